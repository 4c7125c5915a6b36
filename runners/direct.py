"""DirectRunner: Beam's FnApiRunner on this machine, in memory or one process per core.

``--runner DirectRunner`` (the default) runs `LocalRunner`: Beam's FnApiRunner, exactly what
Beam's own DirectRunner falls back to, without its first step, which tries to download and start
the Prism runner binary. Prism would ignore ``--direct_running_mode`` (and fails offline after a
download attempt), so the run would depend on the network.

Running mode, unless ``--direct_running_mode`` / ``--direct_num_workers`` are given:

- ``in_memory`` (one process) by default: on 2 cores worker processes did not pay for their
  start-up (each imports TensorFlow), even once the record job stopped sending records through
  the runner's data plane (numbers at `MULTIPROCESS_MIN_BYTES`).
- ``multi_processing`` with one worker per core with `MULTIPROCESS_MIN_CORES` cores and
  `MULTIPROCESS_MIN_BYTES` of input (``multi_threading`` gains nothing: the GIL).

Every process that runs DoFns uses one numpy/BLAS/TF thread (`runners.threads`).
"""

from __future__ import annotations

import os

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
)
from apache_beam.runners.runner import PipelineRunner

from runners import internals, threads
from runners.support import add_plugin

# Worker processes only by default with >= 4 cores and >= 1 GiB of input. Measured on 2 cores:
# multi-processing was slower at every size tried (docs/performance.md; worker start-up imports
# TensorFlow). With more cores and 1 GiB the start-up is amortised: an estimate, not a
# measurement.
MULTIPROCESS_MIN_BYTES = 1 << 30
MULTIPROCESS_MIN_CORES = 4
RUNNING_MODES = ("in_memory", "multi_threading", "multi_processing")
LOCAL_RUNNER = f"{__name__}.LocalRunner"


class LocalRunner(PipelineRunner):
    """Beam's FnApiRunner, straight away (no Prism attempt), one BLAS thread per DoFn process.

    The Beam internal it uses (`runners.internals.local_runner`) falls back to Beam's stock
    DirectRunner when its guard does not hold, and says so once.
    """

    def run_pipeline(self, pipeline, options: PipelineOptions):
        runner = internals.local_runner(options)
        multi = options.view_as(DirectOptions).direct_running_mode == "multi_processing"
        # FnApiRunner.run_pipeline blocks until the job is done, so the limit is scoped to it.
        with threads.single_threaded(environ=multi):
            return runner.run_pipeline(pipeline, options)


def auto_running_mode(input_bytes: int, cores: int) -> str:
    """The running mode when the user chose none (see the module docstring for the numbers)."""
    if cores >= MULTIPROCESS_MIN_CORES and input_bytes >= MULTIPROCESS_MIN_BYTES:
        return "multi_processing"
    return "in_memory"


def compute_threads(options: PipelineOptions) -> int:
    """Threads one process may use for numeric work (features): its share of the cores.

    In memory one process runs every DoFn, so it gets every core; ``multi_processing`` workers
    get ``cores // workers`` each; ``multi_threading`` already runs bundles in parallel: 1.
    """
    cores = os.cpu_count() or 1
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "in_memory":
        return cores
    if direct.direct_running_mode == "multi_processing":
        return max(1, cores // max(1, direct.direct_num_workers or cores))
    return 1


def one_bundle_at_a_time(options: PipelineOptions) -> bool:
    """True when the FnApiRunner runs every bundle in this process's one thread (in memory,
    one worker): read tasks then run one after another whatever their number."""
    direct = options.view_as(DirectOptions)
    return direct.direct_running_mode == "in_memory" and (direct.direct_num_workers or 1) == 1


def check(options: PipelineOptions, given: set[str]) -> list[str]:
    """Problems with the DirectRunner flags (static: no I/O)."""
    del given  # Beam's parser already restricts --direct_running_mode to RUNNING_MODES
    direct = options.view_as(DirectOptions)
    problems = []
    if direct.direct_num_workers is not None and direct.direct_num_workers < 0:
        problems.append("--direct_num_workers must be >= 0 (0: one per core)")
    return problems


def configure(options: PipelineOptions, *, given: set[str], input_bytes: int) -> None:
    """Picks the running mode and worker count unless the user did; installs `LocalRunner`."""
    cores = os.cpu_count() or 1
    direct = options.view_as(DirectOptions)
    mode_given = "direct_running_mode" in given
    workers_given = "direct_num_workers" in given
    if not mode_given and not workers_given:
        direct.direct_running_mode = auto_running_mode(input_bytes, cores)
        direct.direct_num_workers = cores if direct.direct_running_mode != "in_memory" else 1
    elif not mode_given:  # --direct_num_workers N alone means N processes
        many = direct.direct_num_workers != 1
        direct.direct_running_mode = "multi_processing" if many else "in_memory"
    elif not workers_given:
        parallel = direct.direct_running_mode != "in_memory"
        direct.direct_num_workers = cores if parallel else 1
    if direct.direct_running_mode == "multi_processing":
        add_plugin(options)
    options.view_as(StandardOptions).runner = LOCAL_RUNNER
