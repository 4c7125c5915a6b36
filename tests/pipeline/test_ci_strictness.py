"""CI cannot go green by skipping (tests/conftest.py): a real engine test, run without `java`.

Without `CI`, the engine test skips and the run lists the reason; with `CI=true` the same skip is
a failure naming it. Each case is a separate pytest process on this repository's own test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE_TEST = "tests/engines/test_engines.py::test_flink_embedded_gives_the_direct_runners_dataset"
REASON = "engine tests need `java` on PATH (Java 11+)"


def _pytest_without_java(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = str(tmp_path)  # nothing there: no java, no mvn (the interpreter is absolute)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", ENGINE_TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only
    )


def test_a_skip_is_listed_with_its_reason(tmp_path):
    run = _pytest_without_java(tmp_path, ci=None)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SKIPPED [1] {ENGINE_TEST.split('::')[0]}:" in run.stdout and REASON in run.stdout
    assert "1 skipped" in run.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_skipped_engine_test_fails_naming_the_reason(tmp_path, ci):
    run = _pytest_without_java(tmp_path, ci=ci)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"skipped under CI=true, where nothing may skip: {REASON}" in run.stdout
    assert "1 error" in run.stdout and "skipped" not in run.stdout.splitlines()[-1]
