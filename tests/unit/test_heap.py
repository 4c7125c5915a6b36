"""`replay.heap`: glibc's trim threshold raised once per process, unless the user says no."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

SNIPPET = """
from replay import heap
first, again = heap.keep_freed_memory(), heap.keep_freed_memory()
print(first, again)
"""


def _run(env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("MALLOC_TRIM_THRESHOLD_",)}
    clean.pop("AUDIORECORDS_STOCK_MALLOC", None)
    done = subprocess.run(
        [sys.executable, "-c", SNIPPET],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_raised_once_on_glibc():
    assert _run({}) == "True True"


def test_the_users_choice_stands():
    """``AUDIORECORDS_STOCK_MALLOC=1`` or the user's own ``MALLOC_TRIM_THRESHOLD_``: untouched."""
    assert _run({"AUDIORECORDS_STOCK_MALLOC": "1"}) == "False False"
    assert _run({"MALLOC_TRIM_THRESHOLD_": "131072"}) == "False False"


def test_opening_records_raises_it(tmp_path):
    """The first `Records` of a process is where it happens (the layer's allocations)."""
    from tests.support.replay_fixtures import write_dataset

    write_dataset(tmp_path, num_examples_per_shard=(3,), compression="NONE")
    code = (
        "import replay; from replay import heap; "
        f"r = replay.open_records({str(tmp_path)!r}); r[0]; print(heap._done)"
    )
    clean = {k: v for k, v in os.environ.items() if k != "AUDIORECORDS_STOCK_MALLOC"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str([platform.libc_ver()[0] == "glibc"])
