"""The Beam, CPython and TensorFlow internals the project still leans on, each behind a guard.

Each one is kept because it changes what a user gets or because a benchmark shows it matters
(figures: docs/performance.md); none of them replaces
a name in a Beam or CPython module. Each is used only when its guard holds (the installed version
is the one it was tested with, the attribute exists with the expected signature); otherwise the
library's stock behaviour runs, and the first fallback of each says so in one warning.
Setting ``AUDIORECORDS_STOCK_BEAM=1`` (`STOCK_ENV`) turns every one of them off.

- `local_runner`: Beam's FnApiRunner built the way Beam's DirectRunner builds it, without the
  DirectRunner's attempt to download Prism first (which fails offline).
- `JobOptions`: the record job's own `PipelineOptions`, whose `view_as` builds each view once.
- `load_one_keras` and `exit_now`: for the command line only (`python -m pipelines.record`),
  never called by `record_dataset`.
- `collector_paused`: CPython's cyclic garbage collector off while the launcher plans a job.

Dropped: the state sampler's short period and the memoised DoFn introspection (each replaced a
name in a Beam module for the whole process while a job ran, for a small gain), and OpenBLAS's C
API through ctypes (now `threadpoolctl`, in `runners.threads`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import inspect
import logging
import os
import platform
import sys
from collections.abc import Iterator
from typing import TypeVar

import apache_beam
from apache_beam.options.pipeline_options import PipelineOptions

STOCK_ENV = "AUDIORECORDS_STOCK_BEAM"  # "1": Beam's, CPython's and TensorFlow's stock behaviour
TESTED_BEAM = "2.77"
TESTED_PYTHON = "3.11"
TESTED_TENSORFLOW = "2.21"
_LOGGER = logging.getLogger("audiorecords")
_noticed: set[str] = set()  # the internals whose fallback was announced in this process
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


def _why(library: str, version: str, tested: str) -> str:
    """Why a guard failed: the opt-out, another version, or a changed internal."""
    if stock_requested():
        return f"{STOCK_ENV} is set"
    if _major_minor(version) != tested:
        return f"{library} {version} is not the tested {tested}"
    return f"{library} {version} does not have the internals this relies on"


def fallback_notice(name: str, reason: str, consequence: str) -> None:
    """Says once per process that `name`'s guard failed and the stock behaviour runs."""
    if name in _noticed:
        return
    _noticed.add(name)
    _LOGGER.warning("%s: %s; %s", name, reason, consequence)


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
    through provision info. Stock fallback: Beam's DirectRunner, said once per process.
    """
    if not local_runner_usable(version):
        beam_version = apache_beam.__version__ if version is None else version
        fallback_notice(
            "local_runner",
            _why("Beam", beam_version, TESTED_BEAM),
            "running Beam's DirectRunner, which first tries to download and start Prism "
            "(it needs the network, and ignores --direct_running_mode)",
        )
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
    command line on every call; Beam calls it about a thousand times for one record job, mostly
    for TFT's transforms (docs/performance.md). A cached
    view is exactly what `view_as` documents: views hold no values of their own, they read and
    write the options' shared value store, so a value set through any view is seen through every
    other one. Parses flags exactly like `PipelineOptions(flags)`. The cache belongs to this
    instance (nothing of Beam's is replaced); it is not pickled or deep-copied: a copy builds its
    own views, on its own value store. Stock fallback: every call builds a new view.
    """

    def view_as(self, cls: type[OptionsT]) -> OptionsT:
        """Same as `PipelineOptions.view_as`; the view for `cls` is built on first use."""
        if not view_cache_usable():
            fallback_notice(
                "JobOptions",
                _why("Beam", apache_beam.__version__, TESTED_BEAM),
                "every view_as call parses the command line again (~0.3 s more per job)",
            )
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
    loaded, tearing down modules and C++ libraries is a visible share of a short run.
    atexit handlers still run (Beam stops the job servers it started there; CPython's own
    at-exit step), buffered output is flushed. Stock fallback: `sys.exit`, said once.
    """
    if not fast_exit_usable(version):
        python = platform.python_version() if version is None else version
        fallback_notice(
            "exit_now",
            _why(platform.python_implementation(), python, TESTED_PYTHON),
            "the command ends with sys.exit (the interpreter's teardown: ~0.7 s)",
        )
        sys.exit(code)
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def collector_pause_usable(version: str | None = None) -> bool:
    """Guard of `collector_paused` (`version`: Python's, default the running one)."""
    python = platform.python_version() if version is None else version
    return _tested(python, TESTED_PYTHON) and platform.python_implementation() == "CPython"


@contextlib.contextmanager
def collector_paused(*, version: str | None = None) -> Iterator[bool]:
    """CPython's cyclic garbage collector off for the block (yields whether it is).

    For the launcher's planning: it makes a few objects per input file that live until the job
    ends (stamps, `InputFile`s, segments) and no reference cycles worth collecting; CPython
    collects its oldest generation whenever it grew by a quarter, and walks the whole heap then
    (TensorFlow's, Beam's and TFT's modules as well as the plan): with many files, a large share
    of planning's time (docs/performance.md). After the block it is on again (if it was on
    before it) and collects what was made meanwhile as usual; nothing is frozen or kept. The
    job itself runs with it on. Stock fallback: the collector stays on, said once.
    """
    if not collector_pause_usable(version):
        python = platform.python_version() if version is None else version
        fallback_notice(
            "collector_paused",
            _why(platform.python_implementation(), python, TESTED_PYTHON),
            "the garbage collector runs during planning (slower planning of many files)",
        )
        yield False
        return
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield True
    finally:
        if was_on:
            gc.enable()


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
    ``__init__`` has imported Keras 3. Set before, the command loads one Keras instead of two
    (docs/performance.md). A value the user set is kept. Guard: the tested
    TensorFlow (`version`: default the installed one); its fallback is said once.
    """
    tensorflow = _tensorflow_version() if version is None else version
    if _tested(tensorflow, TESTED_TENSORFLOW):
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    else:
        fallback_notice(
            "load_one_keras",
            _why("TensorFlow", tensorflow or "(not installed)", TESTED_TENSORFLOW),
            "TensorFlow imports Keras 3 beside TFT's Keras 2 (slower start-up)",
        )
