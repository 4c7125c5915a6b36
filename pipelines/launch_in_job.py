"""Launching a record run planned in the job: what the launcher plans, and the run.

A plain run of inputs on an object store (or `run_job(plan_in_job=True)`) is planned in the
job's first step (`pipelines.plan.in_job`): the launcher lists and labels the inputs and reads
one header (`launcher_plan`), stages the listing and writes the resume fingerprint while the job
is built (`written_while_built`), and runs it (`run_planned_in_job`); ``--resume`` of such a run
is compared and cleared here and reused task by task in the job. A check that needs the headers
fails in the plan step: the runner's error is turned back into the launcher's one line
(`_usage_error`) and what the run wrote into a directory it found missing or empty is removed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import logging
import operator
import os
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

import apache_beam as beam

import runners
from pipelines.build import build_pipeline, describe_job
from pipelines.config import RecordConfig, UsageError
from pipelines.plan import (
    Continuation,
    RecordPlan,
    ScannedInputs,
    check_output_dir,
    launcher_windows_config,
    match_inputs,
)
from pipelines.plan.in_job import (
    PLANNED_AUDIO_MS,
    REUSED_TASKS,
    REUSED_WINDOWS,
    PlanArgs,
    PlanInJob,
    ResumeArgs,
)
from pipelines.result import RecordResult
from pipelines.resume import fingerprint as fp
from pipelines.resume.output_dir import (
    job_fingerprint,
    prepare_output_dir,
    resume_in_job,
)
from pipelines.summary import counters, summarize
from replay.storage import is_url
from runners import internals
from runners.internals import JobOptions
from transforms.stages import atomic
from transforms.stages import staged as staged_lists
from transforms.stages.progress import ProgressReporter


def launcher_plan(
    config: RecordConfig,
    listed: ScannedInputs,
    state: str,
    *,
    options: JobOptions,
    argv: list[str],
) -> tuple[RecordPlan, PlanArgs]:
    """What the launcher plans of a run planned in the job, from its listing (`list_inputs`)
    and the output directory's `state`: the checks it can make, the runner's configuration and
    the read stage's config (one header read, none with ``--sample_rate``); no request a file.

    Returns:
      The plan the stages are built from (no task, no shard count, the signal dtype as given)
      and the plan step's arguments.

    Raises:
      UsageError: the output directory may not be written, bad feature parameters, a runner
        that cannot work as configured.
    """
    out = listed.output_dir
    check_output_dir(config, out, state)
    read = launcher_windows_config(config, listed)
    try:
        runners.configure(options, input_bytes=sum(map(_SIZE, listed.inputs)), argv=argv)
    except runners.RunnerError as e:
        raise UsageError(str(e)) from e
    args = PlanArgs(
        config=config,
        listed=listed,
        cpu_count=os.cpu_count() or 1,
        single_task=runners.sequential_tasks(options) and not is_url(out),
        compute_threads=runners.compute_threads(options),
        feature_shapes=dict(read.layout.feature_shapes),
    )
    read = dataclasses.replace(read, compute_threads=args.compute_threads)
    plan = RecordPlan(  # what the launcher knows: no header, no task, no shard count
        output_dir=out,
        name=config.dataset_name,
        inputs=(),
        read=read,
        compression=config.compression_name,
        sharding=listed.sharding,
        tasks=(),
        input_bytes=0,
        params=json.loads(json.dumps(config.params())),
        classes=listed.classes,
        analyzed_splits=config.analyzed_splits,
    )
    return plan, args


class ListingHandover:
    """The launcher's listing handed over once: `take` returns it and forgets it, so that no
    frame of the launcher holds every listed file while the job runs (a job planned in the job
    loads its own copy, `transforms.stages.staged`; one planned in the launcher drops it once
    the headers are read)."""

    def __init__(self, listed: ScannedInputs) -> None:
        self._listed: ScannedInputs | None = listed

    def take(self) -> ScannedInputs:
        listed, self._listed = self._listed, None
        if listed is None:
            raise RuntimeError("the listing was already taken")
        return listed


@contextlib.contextmanager
def written_while_built(
    out: str, fingerprint: Mapping[str, Any], inputs: staged_lists.Staged, data: bytes
) -> Iterator[None]:
    """Writes a run's resume fingerprint and its staged inputs (`data`, from
    `staged.pickled`) in two threads while the body builds the job: on an object store each
    write is requests to wait on, and the fingerprint's text is made a piece at a time as it is
    written. On leaving, both are written (or their error is raised)."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        written = [
            pool.submit(
                atomic.write_atomically,
                f"{out}/{fp.FINGERPRINT_FILE}",
                fp.json_pieces(fingerprint),
            ),
            pool.submit(staged_lists.write, inputs, data),
        ]
        del fingerprint, data  # the writers hold them until written
        yield
        for done in written:
            done.result()


def run_planned_in_job(
    config: RecordConfig,
    launch: ListingHandover,
    state: str,
    *,
    options: JobOptions,
    argv: list[str],
    stored: Mapping[str, Any] | None = None,
    continuation: Continuation | None = None,
) -> RecordResult:
    """A record run planned in the job (`pipelines.plan.in_job`): the launcher makes no request
    a file (the listing, the labels, one header for the feature shapes). `stored`: ``--resume``
    of such a run, its fingerprint: compared and the directory cleared here (`resume_in_job`),
    what each task reuses decided in the job. `continuation`: an ``--append``'s record job
    (`Continuation.held`: the listing compared with the dataset's tables in the plan step).

    Raises:
      UsageError: invalid inputs or options, found by the launcher or by the job's plan step
        (then the output directory is left as it was found when the run made it).
    """
    listed = launch.take()
    out = listed.output_dir
    with internals.collector_paused():  # the launcher's steps; the job runs with it on
        plan, args = launcher_plan(config, listed, state, options=options, argv=argv)
        cut = {"cpu_count": args.cpu_count, "single_task": args.single_task}
        held, prior = (
            (continuation.held, continuation.prior_moments) if continuation else (None,) * 2
        )
        resume = None
        if stored is not None:  # checked and cleared here, reused task by task in the job
            fingerprint, reusable = resume_in_job(  # a template: compared, nothing deleted
                plan, listed, stored, cut=cut, clear=not runners.translation_only(options)
            )
            if reusable:
                resume = ResumeArgs(output_dir=out, checkpoints=not is_url(out))
        if runners.translation_only(options):  # Dataflow template: the job description only
            inputs = staged_lists.stage(out, "inputs", listed.inputs)  # for the plan step
            release = functools.partial(staged_lists.release, inputs)
            planning = PlanInJob(inputs, args, resume=resume, held=held)
            return describe_job(
                plan, options=options, release=release, planning=planning, prior_moments=prior
            )
        if stored is None:
            fingerprint = job_fingerprint(plan.params, listed, cut=cut)
        total_files = len(listed.inputs)
        inputs, data = staged_lists.pickled(out, "inputs", listed.inputs)
        planning = PlanInJob(inputs, args, resume=resume, held=held)
        del listed, args  # the job holds the staged inputs, not the launcher
        if stored is None:
            prepare_output_dir(plan)
        try:  # the fingerprint is there before the job starts
            with written_while_built(out, fingerprint, inputs, data):
                del fingerprint, data
                start = time.monotonic()
                p = beam.Pipeline(options=options)
                build_pipeline(p, plan, planning=planning, prior_moments=prior)
        except BaseException:
            staged_lists.release(inputs)
            raise
    result = _run(p, out, state, total_files=total_files, inputs=inputs)
    elapsed = time.monotonic() - start
    job_counters = counters(result)
    seconds = job_counters.get(PLANNED_AUDIO_MS, 0) / 1000  # failed while read: counted too
    summary = summarize(
        plan,
        elapsed,
        counters=job_counters,
        audio_seconds=seconds,
        tables=_tables(config),
    )
    return dataclasses.replace(
        summary,
        total_tasks=job_counters.get("read_tasks", 0),
        reused_tasks=job_counters.get(REUSED_TASKS, 0),
        reused_windows=job_counters.get(REUSED_WINDOWS, 0),
    )


def _run(
    p: beam.Pipeline, out: str, state: str, *, total_files: int, inputs: staged_lists.Staged
) -> Any:
    """Runs the job planned in the job and returns its result; the plan step's `UsageError` is
    raised as the launcher's one line, and what the run wrote into the output directory `out`,
    found `state` "missing" or "empty", is removed then. The staged `inputs` are released."""
    for name in _STEP_ERROR_LOGGERS:  # the user gets the refusal's one line, not its traceback
        logging.getLogger(name).addFilter(_drop_refusals)
    try:
        with ProgressReporter(out, total_files=total_files):
            result = p.run()
            result.wait_until_finish()
    except Exception as e:
        refusal = _usage_error(e)
        if refusal is None:
            raise
        if state in ("missing", "empty"):  # nothing of the user's was there: as it was found
            _remove_run(out, keep_dir=state == "empty")
        raise refusal from e
    finally:
        for name in _STEP_ERROR_LOGGERS:
            logging.getLogger(name).removeFilter(_drop_refusals)
        staged_lists.release(inputs)
    return result


_SIZE = operator.attrgetter("size_bytes")  # of an InputFile


def _tables(config: RecordConfig) -> list[str] | None:
    """The annotation tables of an ``--annotations`` run (one listing), else None."""
    return [path for path, _ in match_inputs(config.annotations)] if config.annotations else None


# where runners log a failed step's traceback (in this process, or a worker's, passed on)
_STEP_ERROR_LOGGERS = (
    "apache_beam.runners.common",
    "apache_beam.runners.worker.sdk_worker",
    "apache_beam.runners.portability.local_job_service",
    "",  # the root logger: Beam's job services log some errors there
)


def _drop_refusals(record: logging.LogRecord) -> bool:
    """A logging filter: False for a runner's traceback of the plan step's `UsageError` (the
    user gets its one line)."""
    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, UsageError):
        return False
    return not any(_REMOTE_REFUSAL.search(text) for text in (record.getMessage(), str(error)))


def _usage_error(e: BaseException) -> UsageError | None:
    """The `UsageError` the job's plan step raised, as the launcher's one line (the runner may
    wrap it, or re-raise it with the step's name added to its message); None: another error."""
    found = None
    seen = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, UsageError):
            found = cause  # the innermost: the plan step's own
        cause = cause.__cause__ or cause.__context__
    if found is not None:
        line = str(found.args[0]) if found.args else str(found)
    else:  # a runner in other processes (portable, Flink...) passes on the worker's traceback
        lines = _REMOTE_REFUSAL.findall(str(e))
        if not lines:
            return None
        line = lines[-1]
    return UsageError(_STEP_NOTE.sub("", line.splitlines()[0] if line else line))


_STEP_NOTE = re.compile(r" \[while running '[^']*'\]$")  # Beam's note on a re-raised error
_REMOTE_REFUSAL = re.compile(r"pipelines\.config\.UsageError: ([^\n]+)")  # in a traceback's text


def _remove_run(output_dir: str, *, keep_dir: bool) -> None:
    """Removes what a run refused by its plan step wrote into `output_dir` (the directory
    itself too unless `keep_dir`)."""
    import tensorflow as tf

    if not keep_dir:
        tf.io.gfile.rmtree(output_dir)
        return
    for name in tf.io.gfile.listdir(output_dir):
        path = f"{output_dir}/{name.rstrip('/')}"
        (tf.io.gfile.rmtree if tf.io.gfile.isdir(path) else tf.io.gfile.remove)(path)
