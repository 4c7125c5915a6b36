"""Runs ``python -m pipelines.record`` and freezes it at a named point of its work (test-only).

    python -m tests.support.pause_points PHASE MARKER [record arguments...]

The record CLI's `main` runs unchanged in this process (one in-memory DirectRunner worker:
every stage runs here), except that one function of the job is wrapped: when the job reaches
PHASE, the wrapper writes MARKER and stops the whole process with SIGSTOP. The test waits for
MARKER, sees the process stopped, checks the output directory and SIGKILLs it. The kill lands in
the phase every time, whatever the machine's speed: nothing here depends on timing, and
production code carries no test switch (the wrapping lives only in this test module).
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable

# phase -> (module, attribute, which call pauses (1 = the first)). Each point is an entry of a
# function that runs once the job is in that phase; the output directory is then:
PHASES: dict[str, tuple[str, str, int]] = {
    # reading: a read task has written its part files under temporary names; no shard yet
    "reading": ("transforms.stages.record_parts", "PartWriter.commit", 1),
    # writing shards: the first shard is written and renamed; the second is about to be written
    # (shards are written by 2 threads: the second waits for the first, later ones never start)
    "writing shards": ("transforms.stages.write_shards", "write_shard", 2),
    # finalising: every shard, schema.pbtxt and feature_fn/ are written; the manifest is not
    "finalising": ("transforms.stages.finalize", "build_manifest", 1),
}
# Points of the --resume tests (tests/reliability/test_resume.py), not of every kill test:
MORE_PHASES: dict[str, tuple[str, str, int]] = {
    # a task committed: the first read task's commit record is written; the second's is not
    "task committed": ("transforms.stages.task_commits", "commit_record", 2),
    # checkpointed: a read task recorded two checkpoints; its third is about to be recorded
    # (small checkpoints: CHECKPOINT_BYTES_ENV)
    "checkpointed": ("transforms.stages.task_commits", "commit_record", 3),
}
# Points of an --append run (tests/reliability/test_append_kills.py), after its record job:
APPEND_PHASES: dict[str, tuple[str, str, int]] = {
    # recorded: the new files' records, tables and manifest are in appends/<token>/; nothing of
    # the commit is written
    "append recorded": ("pipelines.append_commit", "next_manifest", 1),
    # committed: manifests/<v>.json is created (the commit point); manifest.json is the old one
    "append committed": ("pipelines.append_commit", "switch_latest", 1),
    # switched: manifest.json is the new version's; the record job's own transform files and
    # manifest are still in appends/<token>/
    "append switched": ("pipelines.append_commit", "clean_up", 1),
}
# read_windows.ANALYSIS_BATCH_BYTES for this run (tests/reliability/test_resume.py: many batches)
ANALYSIS_BATCH_BYTES_ENV = "AUDIORECORDS_TEST_ANALYSIS_BATCH_BYTES"
# read_windows.CHECKPOINT_BYTES for this run (tests/reliability/test_resume.py: many checkpoints)
CHECKPOINT_BYTES_ENV = "AUDIORECORDS_TEST_CHECKPOINT_BYTES"
# set: the run is planned in the job whatever its inputs (`run_job(plan_in_job=True)`)
PLAN_IN_JOB_ENV = "AUDIORECORDS_TEST_PLAN_IN_JOB"
_calls = {"n": 0, "done": 0}
_lock = threading.Condition()


def _pausing(fn: Callable, *, marker: str, at_call: int) -> Callable:
    """`fn`, which stops the process on its call number `at_call`, once every earlier call has
    returned; calls after it (from other threads) wait, so none runs past the pause point."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _lock:
            _calls["n"] += 1
            n = _calls["n"]
            if n >= at_call:
                _lock.wait_for(lambda: _calls["done"] == at_call - 1)
        if n > at_call:
            threading.Event().wait()  # never set: the process is stopped, then killed
        if n == at_call:
            with open(marker, "w") as fh:
                fh.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)  # every thread stops here, until SIGKILL
            # The stop reaches this thread asynchronously: on a loaded machine it ran on into `fn`
            # (a hard-linked shard is written in microseconds), so it must never get there.
            threading.Event().wait()
        result = fn(*args, **kwargs)
        with _lock:
            _calls["done"] += 1
            _lock.notify_all()
        return result

    return wrapper


def install(phase: str, marker: str) -> None:
    """Wraps the function of `phase` wherever the record job's modules bound it."""
    module_name, attr, at_call = {**PHASES, **MORE_PHASES, **APPEND_PHASES}[phase]
    importlib.import_module("pipelines.record")  # binds every `from x import y` of the job
    owner = importlib.import_module(module_name)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    wrapped = _pausing(original, marker=marker, at_call=at_call)
    setattr(owner, name, wrapped)
    if not path:  # a module function: rebind it in every module that imported it by name
        for module in list(sys.modules.values()):
            if getattr(module, name, None) is original:
                setattr(module, name, wrapped)


if __name__ == "__main__":
    from pipelines import record  # loads no TensorFlow yet
    from runners.internals import exit_now, load_one_keras

    phase, marker, *argv = sys.argv[1:]
    if os.environ.get(ANALYSIS_BATCH_BYTES_ENV):  # a test's small analysis batches
        from transforms.stages import read_windows

        read_windows.ANALYSIS_BATCH_BYTES = int(os.environ[ANALYSIS_BATCH_BYTES_ENV])
    if os.environ.get(CHECKPOINT_BYTES_ENV):  # a test's small checkpoints
        from transforms.stages import read_windows

        read_windows.CHECKPOINT_BYTES = int(os.environ[CHECKPOINT_BYTES_ENV])
    if os.environ.get(PLAN_IN_JOB_ENV):  # a test's run planned in the job, of local inputs
        from pipelines import job

        job.run_job = functools.partial(job.run_job, plan_in_job=True)
    load_one_keras()  # as the CLI's own __main__ does
    install(phase, marker)
    exit_now(record.main(argv))  # what `python -m pipelines.record` runs
