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
LOOPBACK, an SDK worker importing our Beam plugin) the BLAS and OpenMP libraries are limited at
run time with `threadpoolctl` (OpenBLAS, MKL, BLIS, OpenMP): `single_threaded` for the length of
a job, `limit_blas_threads` for the rest of a worker process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

from threadpoolctl import ThreadpoolController, threadpool_info

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
NO_BLAS_NOTICE = (
    "threadpoolctl found no BLAS library it can limit in this process: matrix products may use "
    "several threads, and features may then differ in the last bit between runners"
)
_lock = threading.Lock()
_scope: dict = {"users": 0, "limits": None, "env_users": 0}  # single_threaded blocks open here
_warned: set[str] = set()


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


def blas_threads() -> list[int]:
    """Current thread count of each loaded BLAS library (empty when none is loaded)."""
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def _limit(n: int) -> tuple[object, int]:
    """Sets every loaded BLAS and OpenMP library to `n` threads.

    Returns:
      The limiter (its ``restore_original_limits()`` undoes it) and how many BLAS libraries it
      set.

    Says once per process when no BLAS library can be limited (threadpoolctl knows OpenBLAS, MKL
    and BLIS, not e.g. Apple's Accelerate): then products may run on several threads.
    """
    import numpy  # noqa: F401 - loads numpy's BLAS so that it is limited too

    controller = ThreadpoolController()
    blas = len(controller.select(user_api="blas"))
    if not blas and not _warned:
        _warned.add(NO_BLAS_NOTICE)
        logging.getLogger("audiorecords").warning(NO_BLAS_NOTICE)
    return controller.limit(limits=int(n)), blas


def limit_blas_threads(n: int = 1) -> int:
    """Every loaded BLAS and OpenMP library limited to `n` threads from now on, in this process
    (a worker's, or a LOOPBACK launcher's); returns how many BLAS libraries were limited."""
    return _limit(n)[1]


def limit_this_process() -> None:
    """One numeric thread from now on in this process and in the processes it starts."""
    export_thread_env()
    limit_blas_threads(1)


@contextlib.contextmanager
def single_threaded(*, environ: bool = False) -> Iterator[None]:
    """BLAS (and OpenMP) limited to one thread for the block, restored after the last one.

    Blocks may overlap (two record jobs in two threads of a notebook): the first one in limits
    the libraries, the last one out restores them, so no job's products run on several threads
    because another job ended. The limit is the process's: other work in the process meanwhile
    gets one BLAS thread too.

    Args:
      environ: also export `THREAD_ENV` for the block, so that processes started inside it
        (the DirectRunner's multi-processing SDK workers) start with one thread each.
    """
    with _lock:
        if _scope["users"] == 0:
            _scope["limits"] = _limit(1)[0]
        _scope["users"] += 1
        if environ:  # the same rule for the environment: first in exports, last out restores
            if _scope["env_users"] == 0:
                _scope["env_saved"] = export_thread_env()
            _scope["env_users"] += 1
    try:
        yield
    finally:
        with _lock:
            _scope["users"] -= 1
            if _scope["users"] == 0:
                _scope.pop("limits").restore_original_limits()
            if environ:
                _scope["env_users"] -= 1
                if _scope["env_users"] == 0:
                    restore_env(_scope.pop("env_saved"))
