"""Every Beam, CPython and OpenBLAS internal the project leans on, each behind a guard.

Each trick below saves measurable time (numbers in benchmarks/RESULTS.md) by using something
its library does not offer as an option. Each is used only when its guard holds (the installed
version is the one it was tested with, the attribute or symbol exists with the expected
signature); otherwise the library's stock behaviour runs. Setting ``AUDIORECORDS_STOCK_BEAM=1``
(`STOCK_ENV`) turns every one of them off.

- `quick_state_sampler`: bundles run in this process sample state every 20 ms, not 200 ms
  (Beam's `statesampler.StateSampler` is swapped for a subclass while a record job runs; the
  short period applies only to the threads of that job).
- `local_runner`: Beam's FnApiRunner built the way Beam's DirectRunner builds it, without the
  DirectRunner's attempt to download Prism first.
- `JobOptions`: `PipelineOptions` whose `view_as` builds each view once.
- `cached_dofn_introspection`: Beam's argument lists of DoFn methods computed once per function.
- `limit_blas_threads`: OpenBLAS's thread count set through its C API (ctypes).
- `load_one_keras` and `exit_now`: for the command line only (`python -m pipelines.record`),
  never called by `record_dataset`.

Safe in a notebook that runs other pipelines: the sampler subclass gives Beam's default period
to every thread but the record job's own, and is removed when the last record job ends; the
options cache belongs to the record job's own `JobOptions`. One effect is process-wide while a
job runs: OpenBLAS has one thread count per process, so other work then gets one BLAS thread too
(restored after the job, `runners.threads.single_threaded`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import glob
import inspect
import logging
import operator
import os
import platform
import sys
import threading
import types
import weakref
from collections.abc import Iterator
from typing import TypeVar

import apache_beam
from apache_beam.options.pipeline_options import PipelineOptions

STOCK_ENV = "AUDIORECORDS_STOCK_BEAM"  # "1": Beam's, CPython's and OpenBLAS's stock behaviour
TESTED_BEAM = "2.77"
TESTED_PYTHON = "3.11"
TESTED_TENSORFLOW = "2.21"
# Beam samples each bundle's state every 200 ms, and a bundle ends only when the sampling thread
# wakes up (`StateSampler.stop` joins it). Measured on the 60-min record benchmark (2 cores, 34
# bundles): 20 ms took 0.5-0.6 s off the pipeline's 5.1-6.3 s (3 interleaved pairs in process);
# CLI end to end 13.63 -> 13.38 s mean wall, 4 interleaved pairs, every pair faster (busy VM).
STATE_SAMPLING_PERIOD_MS = 20
OptionsT = TypeVar("OptionsT", bound=PipelineOptions)


def stock_requested() -> bool:
    """True when `STOCK_ENV` asks for every library's stock behaviour."""
    return os.environ.get(STOCK_ENV, "").strip() not in ("", "0")


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _tested(version: str, tested: str) -> bool:
    return not stock_requested() and _major_minor(version) == tested


def _params(fn: object) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


# -- Beam: the state sampler's period ----------------------------------------------------------


@functools.cache
def _sampler_matches() -> bool:
    from apache_beam.runners.worker import statesampler

    init = getattr(statesampler.StateSampler, "__init__", None)
    return _params(init) == ["self", "prefix", "counter_factory", "sampling_period_ms"] and hasattr(
        statesampler, "DEFAULT_SAMPLING_PERIOD_MS"
    )


def sampler_usable(version: str | None = None) -> bool:
    """Guard of `quick_state_sampler` (`version`: Beam's, default the installed one)."""
    beam_version = apache_beam.__version__ if version is None else version
    return _tested(beam_version, TESTED_BEAM) and _sampler_matches()


_sampler_lock = threading.Lock()
_sampler_state: dict = {"users": 0, "stock": None}
_sampler_period = threading.local()  # period_ms: set only in the threads of a record job


def _scoped_sampler(base: type) -> type:
    from apache_beam.runners.worker import statesampler

    default_ms = statesampler.DEFAULT_SAMPLING_PERIOD_MS

    class ScopedStateSampler(base):
        """Beam's StateSampler; its default period is short only in a record job's thread."""

        def __init__(self, prefix, counter_factory, sampling_period_ms=None):
            if sampling_period_ms is None:
                sampling_period_ms = getattr(_sampler_period, "period_ms", None) or default_ms
            super().__init__(prefix, counter_factory, sampling_period_ms)

    return ScopedStateSampler


@contextlib.contextmanager
def quick_state_sampler(
    period_ms: int = STATE_SAMPLING_PERIOD_MS, *, version: str | None = None
) -> Iterator[None]:
    """Within: bundle processors built in this thread sample every `period_ms`, not 200 ms.

    Beam's bundle processor builds its `StateSampler` with the default period of
    `apache_beam.runners.worker.statesampler`, and ``stop()`` at the end of every bundle waits
    for the sampler's current sleep, up to that period. Beam has no option for it, so while a
    block runs the class is a subclass whose default period is `period_ms` in the threads inside
    such a block and Beam's own elsewhere (another pipeline run meanwhile by another thread
    keeps Beam's behaviour); Beam's class is back once the last block ends. The in-memory
    FnApiRunner builds bundle processors in the thread that runs the pipeline; worker processes
    and ``multi_threading``'s pool threads keep Beam's default.
    """
    if not sampler_usable(version):
        yield
        return
    from apache_beam.runners.worker import statesampler

    with _sampler_lock:
        if _sampler_state["users"] == 0:
            _sampler_state["stock"] = statesampler.StateSampler
            statesampler.StateSampler = _scoped_sampler(statesampler.StateSampler)
        _sampler_state["users"] += 1
    previous = getattr(_sampler_period, "period_ms", None)
    _sampler_period.period_ms = period_ms
    try:
        yield
    finally:
        _sampler_period.period_ms = previous
        with _sampler_lock:
            _sampler_state["users"] -= 1
            if _sampler_state["users"] == 0:
                statesampler.StateSampler = _sampler_state["stock"]


# -- Beam: the FnApiRunner without Prism -------------------------------------------------------


@functools.cache
def _fn_runner_matches() -> bool:
    from apache_beam.runners.portability import portable_runner
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    return (
        hasattr(fn_runner, "ExtendedProvisionInfo")
        and hasattr(portable_runner.JobServiceHandle, "encode_pipeline_options")
        and "provision_info" in _params(fn_runner.FnApiRunner.__init__)
    )


def local_runner_usable(version: str | None = None) -> bool:
    """Guard of `local_runner` (`version`: Beam's, default the installed one)."""
    beam_version = apache_beam.__version__ if version is None else version
    return _tested(beam_version, TESTED_BEAM) and _fn_runner_matches()


def local_runner(options: PipelineOptions, *, version: str | None = None):
    """The runner that runs the DirectRunner's job here: Beam's FnApiRunner, straight away.

    What Beam's DirectRunner does before it hands over to the FnApiRunner, minus its first step
    (download and start the Prism binary, which ignores ``--direct_running_mode`` and fails
    offline): the workers receive the pipeline options (our ``--beam_plugins`` among them)
    through provision info. Stock fallback: Beam's DirectRunner.
    """
    if not local_runner_usable(version):
        from apache_beam.runners.direct.direct_runner import DirectRunner

        return DirectRunner()
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    return fn_runner.FnApiRunner(provision_info=provision)


# -- Beam: one view per options class ----------------------------------------------------------

_VIEWS = "_views"  # instance attribute: {options class: its view}


def view_cache_usable(version: str | None = None) -> bool:
    """Guard of `JobOptions`' view cache (`version`: Beam's, default the installed one)."""
    beam_version = apache_beam.__version__ if version is None else version
    return _tested(beam_version, TESTED_BEAM) and "__getstate__" in vars(PipelineOptions)


class JobOptions(PipelineOptions):
    """PipelineOptions whose `view_as` returns one view per options class.

    `PipelineOptions.view_as(cls)` builds a new argparse parser for `cls` and re-parses the
    command line on every call (~0.45 ms); Beam 2.77 calls it about a thousand times for one
    record job, mostly for TFT's ~250 transforms (1,018 parses -> 20, ~1 s less per run:
    benchmarks/RESULTS.md, Update 4). A cached view is exactly what `view_as` documents: views
    hold no values of their own, they read and write the options' shared value store, so a value
    set through any view is seen through every other one. Parses flags exactly like
    `PipelineOptions(flags)`. The cache is not pickled or deep-copied: a copy builds its own
    views, on its own value store. Stock fallback: every call builds a new view.
    """

    def view_as(self, cls: type[OptionsT]) -> OptionsT:
        """Same as `PipelineOptions.view_as`; the view for `cls` is built on first use."""
        if not view_cache_usable():
            return super().view_as(cls)
        views = self.__dict__.setdefault(_VIEWS, {})
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())
        state.pop(_VIEWS, None)
        return state


# -- Beam: each function's signature inspected once ---------------------------------------

_introspection_lock = threading.Lock()
_introspection_state: dict = {"users": 0, "stock": None}


@functools.cache
def _introspection_matches() -> bool:
    from apache_beam.transforms import core

    return _params(getattr(core, "get_function_args_defaults", None)) == ["f"] and callable(
        getattr(core, "get_function_arguments", None)
    )


def introspection_cache_usable(version: str | None = None) -> bool:
    """Guard of `cached_dofn_introspection` (`version`: Beam's, default the installed one)."""
    beam_version = apache_beam.__version__ if version is None else version
    return _tested(beam_version, TESTED_BEAM) and _introspection_matches()


def _signature_inputs(func: types.FunctionType) -> tuple:
    """Everything `inspect.signature` reads from a function (checked by identity on a hit)."""
    extra = func.__dict__
    return (
        func.__code__,
        func.__defaults__,
        func.__kwdefaults__,
        extra.get("__wrapped__"),
        extra.get("__signature__"),
        extra.get("__text_signature__"),
    )


def _cached_args_defaults(stock, cache: weakref.WeakKeyDictionary):
    def get_function_args_defaults(f):
        func = f.__func__ if type(f) is types.MethodType else f
        if type(func) is not types.FunctionType:  # partials, builtins, classes: Beam's
            return stock(f)
        bound = func is not f  # a bound method's signature drops `self`
        inputs = _signature_inputs(func)
        entry = (cache.get(func) or {}).get(bound)  # a dict read: atomic, no lock needed
        if entry is not None and all(map(operator.is_, entry[0], inputs)):
            return list(entry[1]), list(entry[2])  # fresh lists, as Beam's function returns
        args, defaults = stock(f)
        with _introspection_lock:
            cache.setdefault(func, {})[bound] = (inputs, tuple(args), tuple(defaults))
        return args, defaults

    return get_function_args_defaults


@contextlib.contextmanager
def cached_dofn_introspection(*, version: str | None = None) -> Iterator[None]:
    """Within: Beam computes each Python function's argument list once, not once per use.

    Beam 2.77 asks for every DoFn's state and timer specs (``userstate.get_dofn_specs``: the
    signature of each of its ~60 methods) when a pipeline is built, translated, and again for
    each bundle processor it creates: ~29,000 ``inspect.signature`` calls for the sample run,
    0.8 s of CPU (2026-11-23). While a block runs, ``core.get_function_args_defaults`` (which
    those calls go through) is memoised per Python function; a hit checks by identity that the
    code, defaults, ``__wrapped__`` and ``__signature__`` are the ones it was computed from, and
    returns fresh lists as Beam's does. Other callables (partials, builtins, classes) go to
    Beam's function. Beam's function is back once the last block ends. Stock fallback: Beam's.
    """
    if not introspection_cache_usable(version):
        yield
        return
    from apache_beam.transforms import core

    with _introspection_lock:
        if _introspection_state["users"] == 0:
            _introspection_state["stock"] = stock = core.get_function_args_defaults
            core.get_function_args_defaults = _cached_args_defaults(
                stock, weakref.WeakKeyDictionary()
            )
        _introspection_state["users"] += 1
    try:
        yield
    finally:
        with _introspection_lock:
            _introspection_state["users"] -= 1
            if _introspection_state["users"] == 0:
                core.get_function_args_defaults = _introspection_state["stock"]


# -- OpenBLAS: thread count through its C API --------------------------------------------------

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
    """(library, set symbol, get symbol) of each loaded OpenBLAS exporting a known setter.

    The guard: a library without one of the known symbols is left alone; with `STOCK_ENV` none
    is touched (then only the environment variables of `runners.threads` limit threads).
    """
    if stock_requested():
        return []
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


def set_blas_threads(n: int) -> list[tuple[ctypes.CDLL, str, int]]:
    """Sets every loaded OpenBLAS to `n` threads; (library, setter, previous count) of each."""
    changed = []
    for lib, setter, getter in _openblas_libs():
        changed.append((lib, setter, getattr(lib, getter)() if getter else 0))
        getattr(lib, setter)(int(n))
    return changed


def restore_blas_threads(changed: list[tuple[ctypes.CDLL, str, int]]) -> None:
    """Undoes `set_blas_threads` (libraries whose previous count is unknown keep `n`)."""
    for lib, setter, previous in changed:
        if previous > 0:
            getattr(lib, setter)(previous)


def limit_blas_threads(n: int = 1) -> int:
    """Sets every loaded OpenBLAS to `n` threads (best effort); returns how many were set."""
    return len(set_blas_threads(n))


# -- CPython and TensorFlow: for the command line only -----------------------------------------


def fast_exit_usable(version: str | None = None) -> bool:
    """Guard of `exit_now` (`version`: Python's, default the running one)."""
    python = platform.python_version() if version is None else version
    return (
        _tested(python, TESTED_PYTHON)
        and platform.python_implementation() == "CPython"
        and callable(getattr(atexit, "_run_exitfuncs", None))
    )


def exit_now(code: int, *, version: str | None = None) -> None:
    """Ends the command without the interpreter's teardown (the job is done and closed).

    For ``python -m`` entry points only, never a library call. With TensorFlow, Beam and TFT
    loaded, tearing down modules and C++ libraries costs 1-2 s of CPU after the last file is
    closed (8.5 vs 6.7 s, 2026-11-21). atexit handlers still run (Beam stops the job servers it
    started there; CPython's own at-exit step), buffered output is flushed. Stock fallback:
    `sys.exit`.
    """
    if not fast_exit_usable(version):
        sys.exit(code)
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _tensorflow_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("tensorflow")
    except metadata.PackageNotFoundError:
        return ""


def load_one_keras(*, version: str | None = None) -> None:
    """Makes TensorFlow load Keras 2 (``tf_keras``, the one TFT uses) and not Keras 3 as well.

    For ``python -m`` entry points only, before TensorFlow is imported. TFT works only with
    Keras 2 and sets ``TF_USE_LEGACY_KERAS=1`` when it is imported, but by then TensorFlow's
    ``__init__`` has imported Keras 3. Set before, the command loads one Keras instead of two:
    0.45 s less TensorFlow import and 0.3 s less TFT import per run (2026-11-21). A value the
    user set is kept. Guard: the tested TensorFlow (`version`: default the installed one).
    """
    tensorflow = _tensorflow_version() if version is None else version
    if _tested(tensorflow, TESTED_TENSORFLOW):
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
