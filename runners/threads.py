"""One numeric thread per process that runs our DoFns: faster on many cores, and deterministic.

Two reasons, both measured on this project:

- Speed: with several worker processes on a machine, each worker's numpy/BLAS and TensorFlow
  thread pools fight over the same cores; multi-processing gets *slower* unless every worker is
  limited to one numeric thread.
- Byte-identical output: OpenBLAS splits a matrix product between its threads, and the float32
  log-mel product (`transforms.audio.features`) then rounds differently (~1 ulp) with 1 or 2
  threads. The record job promises byte-identical shards whatever the runner, so every process that
  computes features must use the same BLAS thread count: one.

Environment variables work only before the libraries load (spawned workers, the worker pool
sidecar). In a process where numpy is already loaded (the launcher running DoFns in memory or
LOOPBACK, an SDK worker importing our Beam plugin) OpenBLAS is limited at run time through its
C API (`limit_blas_threads`, in `runners.internals` with the other library internals we use).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from runners.internals import (
    blas_threads,
    limit_blas_threads,
    restore_blas_threads,
    set_blas_threads,
)

__all__ = [
    "THREAD_ENV",
    "blas_threads",
    "export_thread_env",
    "limit_blas_threads",
    "limit_this_process",
    "restore_env",
    "single_threaded",
]
THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
}


def export_thread_env() -> dict[str, str | None]:
    """Sets each `THREAD_ENV` variable this process's environment lacks (a value set is kept).

    Returns:
      The previous value of each variable (None: unset), for `restore_env`.
    """
    saved = {var: os.environ.get(var) for var in THREAD_ENV}
    for var, value in THREAD_ENV.items():
        os.environ.setdefault(var, value)
    return saved


def restore_env(saved: dict[str, str | None]) -> None:
    """Puts back the variables `export_thread_env` returned (None: unset)."""
    for var, value in saved.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value


def limit_this_process() -> None:
    """One numeric thread from now on in this process and in the processes it starts."""
    export_thread_env()
    limit_blas_threads(1)


@contextlib.contextmanager
def single_threaded(*, environ: bool = False) -> Iterator[None]:
    """BLAS limited to one thread for the block, restored after.

    Args:
      environ: also export `THREAD_ENV` for the block, so that processes started inside it
        (the DirectRunner's multi-processing SDK workers) start with one thread each.
    """
    import numpy  # noqa: F401 - loads numpy's OpenBLAS so that it is limited too

    saved = export_thread_env() if environ else {}
    changed = set_blas_threads(1)
    try:
        yield
    finally:
        restore_blas_threads(changed)
        restore_env(saved)
