"""Fixtures shared by the test groups: record runs made once per session.

- `sample_run` / `sample_dataset`: the README's quick-start command (`data/sample/*.wav`,
  `--win_len 16000`, every other option at its default);
- `reliability_reference`: the reliability tests' uninterrupted reference run
  (`tests.support.reliability.reference_run`: nasty file names, a label CSV, 3 shards).

Each is recorded in process the first time a test asks for it; tests only read them (copy one
first to change it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import reliability
from tests.support.record_helpers import SAMPLE_DIR, record

# The README's "Quick start" record command, as arguments after --input_pattern/--output_dir.
README_SAMPLE_ARGS = ("--win_len", "16000")


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory) -> dict:
    """The bundled sample recorded by the README's command: {"out": Path, "summary": dict}.

    "summary" is what `pipelines.record.run` returns (counts, counters, the written manifest).
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
