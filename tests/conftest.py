"""Fixtures shared by the test groups: record runs made once per session.

- `sample_run` / `sample_dataset`: the README's quick-start command (`data/sample/*.wav`,
  `--win_len 16000`, every other option at its default);
- `reliability_reference`: the reliability tests' uninterrupted reference run
  (`tests.support.reliability.reference_run`: nasty file names, a label CSV, 3 shards);
- `resume_runs`: the ``--resume`` tests' corpus and its uninterrupted runs, one per set of
  runner options (`tests.support.reliability.ResumeRuns`), read-only.
- `forker`: the commands a test runs as processes of their own (launchers it kills, a job
  server's launcher), forked from one server per test process that imported Beam and TensorFlow
  once (`tests.support.forked.Forker`, with the test process's environment).

Each is recorded in process the first time a test asks for it; tests only read them (copy one
first to change it).

Also, for every run:

- once every test module is imported (with Beam, TensorFlow and TFT), the objects that exist are
  frozen out of the cyclic garbage collector (`gc.freeze`): a collection then traverses only what
  the tests make, not the libraries' millions of long-lived objects.
- hypothesis: no per-example deadline anywhere (work is bounded in bytes read and memory, never by
  the clock); with `CI=true` the "ci" profile derandomises every property test (a fixed seed per
  test, no example database), so a red CI run is reproduced by `CI=true python -m pytest -q ...`.
- `CI=true`: a skipped test fails. CI runs on this project's machines, which have everything the
  suite needs (Java and Maven for the engines, a file system with access times, OpenBLAS); a skip
  there means a missing install step or a broken fixture, which must not pass for green. Skip
  reasons are always printed (`-rs` in pyproject.toml).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support import reliability
from tests.support.forked import Forker
from tests.support.record_helpers import SAMPLE_DIR, record

# The README's "Quick start" record command, as arguments after --input_pattern/--output_dir.
README_SAMPLE_ARGS = ("--win_len", "16000")

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, database=None, print_blob=True)
settings.load_profile("ci" if IN_CI else "default")


def pytest_collection_finish(session) -> None:
    """The modules are loaded: what exists now is never garbage, so collections skip it."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With CI=true a skip is a failure that says why the test skipped (module docstring)."""
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where nothing may skip: {reason}"


@pytest.fixture(scope="session")
def forker() -> Iterator[Forker]:
    """The fork server of this test process's environment, started in the repository's root."""
    server = Forker(dict(os.environ), reliability.ROOT)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory) -> dict:
    """The bundled sample recorded by the README's command: {"out": Path, "summary": result}.

    "summary" is the `RecordResult` `pipelines.record.run` returns (counts, errors, counters).
    """
    out = tmp_path_factory.mktemp("readme_sample") / "sample"
    summary = record(str(SAMPLE_DIR / "*.wav"), out, *README_SAMPLE_ARGS)
    return {"out": out, "summary": summary}


@pytest.fixture(scope="session")
def sample_dataset(sample_run) -> Path:
    """The output directory of `sample_run` (read-only by convention)."""
    return sample_run["out"]


@pytest.fixture(scope="session")
def reliability_reference(tmp_path_factory) -> tuple[str, Path, Path]:
    """(input pattern, labels csv, output dir) of the reliability reference run."""
    return reliability.reference_run(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def resume_runs(tmp_path_factory) -> Iterator[reliability.ResumeRuns]:
    """The --resume tests' read-only corpus and its uninterrupted runs (made on first use);
    at the session's end, unchanged."""
    runs = reliability.ResumeRuns(tmp_path_factory.mktemp("resume_runs"))
    yield runs
    runs.assert_unchanged()
