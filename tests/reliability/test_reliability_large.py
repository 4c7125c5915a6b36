"""Guarantee 7, large inputs: a long 48 kHz file and thousands of tiny files, in bounded memory.

Runs benchmarks/large_inputs.py (the record CLI under a /proc memory sampler) and checks that every
window is recorded and that the job's peak memory (PSS of the whole process tree) stays under
``AUDIORECORDS_LARGE_MAX_MB`` (default 2048; measured: ~0.6 GB at every size). By default (CI) a
30-minute file and 2,000 tiny files (~1 minute in all); ``AUDIORECORDS_LARGE=1`` runs the full
guarantee of README "Guarantees": a 2-hour file and 10,000 tiny files (minutes, ~0.8 GB of input).
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
FULL = os.environ.get("AUDIORECORDS_LARGE") == "1"
HOURS = 2.0 if FULL else 0.5
FILES = 10_000 if FULL else 2_000
MAX_MB = int(os.environ.get("AUDIORECORDS_LARGE_MAX_MB", "2048"))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> str:
    """Where the inputs are written (once): AUDIORECORDS_LARGE_WORKDIR, or a private temp dir."""
    return os.environ.get("AUDIORECORDS_LARGE_WORKDIR") or str(tmp_path_factory.mktemp("large"))


def _bench():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "large_inputs.py"
    spec = importlib.util.spec_from_file_location("large_inputs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_long_48khz_file(workdir):
    argv = ["--case", "long", "--workdir", workdir, "--hours", str(HOURS)]
    (result,) = _bench().run(argv)
    assert result["files"] == 1
    assert result["windows"] == int(HOURS * 3600 * 48000) // 32768
    # README "Shard count": one per 128 MiB of estimated output. Per window (default options):
    # int16 signal [32768] + log_mel float32 [1 + (32768 - 400) // 160, 64] (format 2 does not
    # store log_mel_norm).
    per_window = 32768 * 2 + (1 + (32768 - 400) // 160) * 64 * 4
    assert result["shards"] == math.ceil(result["windows"] * per_window / (128 << 20)), result
    assert result["peak_pss_tree_mb"] < MAX_MB, result


def test_thousands_of_tiny_files(workdir):
    (result,) = _bench().run(["--case", "many", "--workdir", workdir, "--files", str(FILES)])
    assert result["files"] == result["windows"] == FILES
    assert result["peak_pss_tree_mb"] < MAX_MB, result
