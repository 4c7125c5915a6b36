"""A workaround, fenced: glibc's malloc told to keep freed memory instead of trimming it at once.

Reading records by number allocates and frees a window-sized buffer a record (the bytes
`replay.records` returns, then TensorFlow's copy of them), ~57 KB for a one-second window,
megabytes a batch. glibc returns the free top of its heap to the system once it passes
``M_TRIM_THRESHOLD`` (128 KiB by default), so every batch faulted those pages in again, zeroed
by the kernel: measured on the 10,240 clips, the global order then cost ~1.5x the ordered
reader's CPU per window, ~1.0x with the threshold at 256 MiB (docs/training.md). The threshold
is raised once per process, at the first `Records`; freed memory up to `TRIM_BYTES` then stays in
the process for its next allocations (its resident size does not shrink below its peak by more
than that).

Guarded: only where the C library is glibc (``mallopt`` exists there with this meaning), once,
and never when ``AUDIORECORDS_STOCK_MALLOC=1`` (`STOCK_ENV`) or when the process's own
``MALLOC_TRIM_THRESHOLD_`` is set (the user's choice stands).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import threading

STOCK_ENV = "AUDIORECORDS_STOCK_MALLOC"  # "1": glibc's stock trimming
TRIM_BYTES = 256 << 20  # 256 MiB: freed memory kept before the heap is trimmed
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_lock = threading.Lock()
_done: list[bool] = []  # the one outcome, once decided


def keep_freed_memory() -> bool:
    """Raises glibc's trim threshold to `TRIM_BYTES` once per process (module docstring).

    Returns:
      Whether the threshold is (now or already) raised by this module.
    """
    with _lock:
        if not _done:
            _done.append(_raise_threshold())
        return _done[0]


def _raise_threshold() -> bool:
    if os.environ.get(STOCK_ENV) == "1" or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES) == 1
