"""Fixtures shared by the test groups: one recording of the bundled sample per session.

The README's quick-start command (`data/sample/*.wav`, `--win_len 16000`, every other option at
its default) is recorded once, in process, the first time a test asks for it; tests only read it
(copy it first to change it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
