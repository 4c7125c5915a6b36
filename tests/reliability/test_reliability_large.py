"""Guarantee 7, large inputs: a long 48 kHz file and thousands of tiny files, in bounded memory.

Runs the benchmark scenario `large_inputs` (benchmarks/large_inputs.py: the record CLI under a
/proc memory sampler) and checks that every window is recorded and that the job's peak memory
(PSS of the whole process tree) stays under a bound near what it measured (`MAX_MB`, or
``AUDIORECORDS_LARGE_MAX_MB`` for both cases). By default (CI) a 30-minute file and 2,000 tiny
files (~1 minute in all); ``AUDIORECORDS_LARGE=1`` runs the full guarantee of
docs/guarantees.md: a 2-hour file and 10,000 tiny files (minutes, ~0.8 GB of input).
"""

from __future__ import annotations

import importlib
import math
import os

import pytest

pytestmark = pytest.mark.slow
FULL = os.environ.get("AUDIORECORDS_LARGE") == "1"
HOURS = 2.0 if FULL else 0.5
FILES = 10_000 if FULL else 2_000
# Peak PSS of the process tree, measured 2026-11-25 on this project's 2-core machine (shared,
# load ~1.5-2), three runs of the default (CI) size: long 726 / 924 / 919 MB, many 603 / 802 /
# 822 MB (RSS 930-948 and 833-844 MB: PSS is lower when other processes share the libraries).
# Bound: the highest measured + 30%, so a 1.3x regression fails where 2 GiB let 2-3x through.
# docs/guarantees.md gives the full size's (AUDIORECORDS_LARGE=1) RSS as 975 and 944 MB, below
# these bounds too (PSS <= RSS).
_OVERRIDE = os.environ.get("AUDIORECORDS_LARGE_MAX_MB")
MAX_MB = {
    "long": int(_OVERRIDE or 1200),  # 924 MB + 30%
    "many": int(_OVERRIDE or 1070),  # 822 MB + 30%
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> str:
    """Where the inputs are written (once): AUDIORECORDS_LARGE_WORKDIR, or a private temp dir."""
    return os.environ.get("AUDIORECORDS_LARGE_WORKDIR") or str(tmp_path_factory.mktemp("large"))


def _bench():
    """The `large_inputs` scenario's module (``python -m benchmarks large_inputs``)."""
    return importlib.import_module("benchmarks.large_inputs")


def test_long_48khz_file(workdir):
    """Pins a long 48 kHz file: every window recorded, the planned shard count, and peak PSS
    under MAX_MB["long"]."""
    argv = ["--case", "long", "--workdir", workdir, "--hours", str(HOURS)]
    (result,) = _bench().run(argv)
    assert result["files"] == 1
    assert result["windows"] == int(HOURS * 3600 * 48000) // 32768
    # docs/output-layout.md "Shard count": one per 128 MiB of estimated output. Per window
    # (default options): int16 signal [32768] + log_mel float32 [1 + (32768 - 400) // 160, 64]
    # (format 2 does not store log_mel_norm).
    per_window = 32768 * 2 + (1 + (32768 - 400) // 160) * 64 * 4
    assert result["shards"] == math.ceil(result["windows"] * per_window / (128 << 20)), result
    assert result["peak_pss_tree_mb"] < MAX_MB["long"], result


def test_thousands_of_tiny_files(workdir):
    """Pins thousands of one-window files: every file and window recorded, and peak PSS under
    MAX_MB["many"]."""
    (result,) = _bench().run(["--case", "many", "--workdir", workdir, "--files", str(FILES)])
    assert result["files"] == result["windows"] == FILES
    assert result["peak_pss_tree_mb"] < MAX_MB["many"], result
