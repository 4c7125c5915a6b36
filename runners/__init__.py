"""Runner-specific choices, in one place, so pipelines/ and transforms/ stay runner-agnostic.

`configure` turns the user's flags into final Beam options: with no ``--runner`` the job runs on
the DirectRunner's FnApiRunner, multi-processing on every core when the input is big enough to
pay the ~2 s worker start-up, with numpy/BLAS/TF threads limited to one per worker process.
"""

from __future__ import annotations

import os

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

KNOWN_RUNNERS = ("DirectRunner", "PortableRunner", "FlinkRunner", "DataflowRunner")
MULTIPROCESS_MIN_BYTES = 64 << 20  # 64 MiB of input: below this one process beats the start-up
_THREAD_ENV = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)


class RunnerError(ValueError):
    """The runner flags cannot work (message says which flag and why)."""


def runner_name(options: PipelineOptions) -> str:
    """The runner's short name (DirectRunner when none was given)."""
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    return runner if isinstance(runner, str) else type(runner).__name__


def configure(options: PipelineOptions, *, input_bytes: int, argv: list[str]) -> PipelineOptions:
    """Checks the runner and fills in the defaults this project relies on.

    Args:
      options: the parsed pipeline options (modified in place and returned).
      input_bytes: total size of the matched input files.
      argv: the raw command line, to tell flags the user set from defaults.

    Raises:
      RunnerError: unknown runner name (lists the known ones).
    """
    name = runner_name(options)
    short = name.rsplit(".", 1)[-1]
    if short not in KNOWN_RUNNERS and "." not in name:
        raise RunnerError(f"unknown runner {name!r}; known runners: {', '.join(KNOWN_RUNNERS)}")
    if short == "DirectRunner":
        options.view_as(StandardOptions).runner = "DirectRunner"
        direct = options.view_as(DirectOptions)
        user_set = any(
            a.startswith(("--direct_running_mode", "--direct_num_workers")) for a in argv
        )
        if not user_set:
            big = input_bytes >= MULTIPROCESS_MIN_BYTES and (os.cpu_count() or 1) > 1
            direct.direct_running_mode = "multi_processing" if big else "in_memory"
            direct.direct_num_workers = (os.cpu_count() or 1) if big else 1
        if direct.direct_running_mode == "multi_processing":
            limit_worker_threads()
    return options


def limit_worker_threads() -> None:
    """One numpy/BLAS/TF thread per worker process (inherited by spawned SDK workers)."""
    for var in _THREAD_ENV:
        os.environ.setdefault(var, "1")
