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
C API (`limit_blas_threads`).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import sys
from collections.abc import Iterator

THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
}
_SET_SYMBOLS = (
    "openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
)
_GET_SYMBOLS = tuple(s.replace("_set_", "_get_") for s in _SET_SYMBOLS)


def _openblas_paths() -> list[str]:
    """Shared objects of every OpenBLAS loaded in this process (numpy's, scipy's, ...)."""
    paths: set[str] = set()
    try:
        with open("/proc/self/maps") as fh:  # Linux: exactly what is loaded
            for line in fh:
                path = line.rsplit(None, 1)[-1]
                if "openblas" in os.path.basename(path).lower():
                    paths.add(path)
    except OSError:  # macOS and others: the wheels' bundled copies
        for module in ("numpy", "scipy"):
            mod = sys.modules.get(module)
            if mod is not None and getattr(mod, "__file__", None):
                root = os.path.dirname(os.path.dirname(mod.__file__))
                for pattern in (f"{module}.libs/*openblas*", f"{module}/.dylibs/*openblas*"):
                    paths.update(glob.glob(os.path.join(root, pattern)))
    return sorted(paths)


def _openblas_libs() -> list[tuple[ctypes.CDLL, str, str]]:
    """(library, set symbol, get symbol) for each loaded OpenBLAS."""
    found = []
    for path in _openblas_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for setter, getter in zip(_SET_SYMBOLS, _GET_SYMBOLS, strict=True):
            if hasattr(lib, setter):
                found.append((lib, setter, getter if hasattr(lib, getter) else ""))
                break
    return found


def blas_threads() -> list[int]:
    """Current thread count of each loaded OpenBLAS (empty when none is loaded)."""
    return [getattr(lib, get)() for lib, _, get in _openblas_libs() if get]


def _limit(n: int) -> list[tuple[ctypes.CDLL, str, int]]:
    """Sets every loaded OpenBLAS to `n` threads; (library, setter, previous count) of each."""
    changed = []
    for lib, setter, getter in _openblas_libs():
        changed.append((lib, setter, getattr(lib, getter)() if getter else 0))
        getattr(lib, setter)(int(n))
    return changed


def limit_blas_threads(n: int = 1) -> int:
    """Sets every loaded OpenBLAS to `n` threads (best effort); returns how many were set."""
    return len(_limit(n))


def limit_this_process() -> None:
    """One numeric thread from now on in this process and in the processes it starts."""
    for var, value in THREAD_ENV.items():
        os.environ.setdefault(var, value)
    limit_blas_threads(1)


@contextlib.contextmanager
def single_threaded(*, environ: bool = False) -> Iterator[None]:
    """BLAS limited to one thread for the block, restored after.

    Args:
      environ: also export `THREAD_ENV` for the block, so that processes started inside it
        (the DirectRunner's multi-processing SDK workers) start with one thread each.
    """
    import numpy  # noqa: F401 - loads numpy's OpenBLAS so that it is limited too

    saved = {var: os.environ.get(var) for var in THREAD_ENV} if environ else {}
    if environ:
        for var, value in THREAD_ENV.items():
            os.environ.setdefault(var, value)
    changed = _limit(1)
    try:
        yield
    finally:
        for lib, setter, previous in changed:
            if previous > 0:
                getattr(lib, setter)(previous)
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
