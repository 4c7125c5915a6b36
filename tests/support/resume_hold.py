"""Runs ``python -m pipelines.record`` whose read tasks hold the job once one has committed
(test-only; the ``--resume`` tests of the other execution modes, tests/reliability/
test_resume_modes.py).

    python -m tests.support.resume_hold HOLD_DIR [--in_job] [record arguments...]

``--in_job``: the run is planned in the job whatever its inputs (`run_job(plan_in_job=True)`).

`tests.support.pause_points` stops the launcher process, which only works when the read tasks
run there (the in-memory DirectRunner). Here the read tasks may run in other processes (the
DirectRunner's multi_processing workers, a worker pool behind a portable job service or Flink),
so the hold travels with the job: the launcher builds the job's read stage from
`HeldReadTaskFn` (a test subclass of `ReadTaskFn`, pickled by reference: every worker imports
this module), as `tests.support.faults` injects its faults. Production code has no switch for
it.

`HeldReadTaskFn`, wherever it runs:

- a task that finished (its parts renamed, its commit record written) then waits; the first
  to get there creates ``HOLD_DIR/held`` (its pid and task id, written before the file
  appears);
- a task that starts once ``HOLD_DIR/held`` exists waits before reading anything;

so at least one task is committed, the job can never finish (a waiting task's bundle never
ends) and nothing is read after the hold but what was already being read. The test waits for
``HOLD_DIR/held``, checks the output directory, and kills the job (SIGKILL to the launcher's
process group, or cancelling the engine's job). Waiting tasks end when ``HOLD_DIR/release``
appears (the test writes it once the job is killed: a worker pool outliving the job is not left
with threads waiting forever), or after `HOLD_TIMEOUT_S`; either way they raise.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Iterator

from transforms.stages import read_windows

HOLD_TIMEOUT_S = 900.0  # only ends a forgotten hold; the tests release it long before


class HoldReleased(RuntimeError):
    """What a held task raises when it is let go (its job is already dead)."""


def _wait(hold_dir: str) -> None:
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    while not os.path.exists(os.path.join(hold_dir, "release")):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    raise HoldReleased(f"held read task let go ({hold_dir})")


class HeldReadTaskFn(read_windows.ReadTaskFn):
    """`ReadTaskFn` holding the job once a task has committed (module docstring)."""

    def __init__(self, *args, hold_dir: str, **kwargs):
        super().__init__(*args, **kwargs)
        self._hold_dir = hold_dir

    def process(self, task, planned=None) -> Iterator:
        held = os.path.join(self._hold_dir, "held")
        if os.path.exists(held):
            _wait(self._hold_dir)
        yield from super().process(task, planned)  # ends once the task's commit record is written
        mine = f"{held}.{os.getpid()}.{task.task_id}"
        with open(mine, "w") as fh:
            fh.write(f"{os.getpid()} task {task.task_id}")
        with contextlib.suppress(FileExistsError):  # the first task to commit holds the job
            os.link(mine, held)  # atomic: ``held`` appears with its pid in it
        _wait(self._hold_dir)


def install(hold_dir: str) -> None:
    """The record job (`pipelines.record`, in this process) builds its read stage from
    `HeldReadTaskFn`, holding into `hold_dir`."""
    import pipelines.record  # noqa: F401 - binds every `from x import y` of the job first

    original = read_windows.ReadTaskFn
    held = functools.partial(HeldReadTaskFn, hold_dir=hold_dir)
    for module in list(sys.modules.values()):
        if getattr(module, "ReadTaskFn", None) is original:
            module.ReadTaskFn = held


if __name__ == "__main__":
    # The classes must come from `tests.support.resume_hold`, not `__main__`: workers import them.
    from pipelines import record
    from runners.internals import exit_now, load_one_keras
    from tests.support import resume_hold

    hold_dir, *argv = sys.argv[1:]
    load_one_keras()  # as the CLI's own __main__ does
    resume_hold.install(hold_dir)
    if argv[:1] != ["--in_job"]:
        exit_now(record.main(argv))  # what `python -m pipelines.record` runs
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines import job
    from pipelines.config import RecordConfig

    argv = argv[1:]
    config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(record.RecordOptions))
    job.run_job(config, beam_argv=argv, plan_in_job=True)
    exit_now(0)
