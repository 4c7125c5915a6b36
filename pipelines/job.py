"""Runs one record job from its `RecordConfig`: plan, build, run, summarize.

Both entry points end here: the command line (`pipelines.record.run`, from argv) and the Python
API (`pipelines.api.record_dataset`, from keywords). Beam's own options (runner, workers, ...)
come as `beam_argv`, parsed into PipelineOptions.

Stages (each a Beam step with its own counters), planned in `pipelines.plan`:

1. Planning: match files, read every WAV header (window counts, the signal dtype), assign
   files to splits and cut the rows into read tasks (a single task when the runner runs tasks
   one at a time: the in-memory DirectRunner); bad files are listed up front. A plain run of
   inputs on an object store lists and labels in the launcher and reads the headers and plans
   in the job's first step (`pipelines.plan.in_job`), and resumes there; so does an
   ``--append`` of such inputs (`pipelines.plan.held`: the held inputs compared in the job);
   local inputs, ``--annotations`` and a Python ``shard_func`` plan in the launcher
   (`pipelines.plan`), with the same functions.
2. ``ReadWindows``: decode, window, compute features and encode records per task; records
   stream to per-shard part files, and rows feed ``Analyze`` (TFT full pass: class vocabulary,
   z-score statistics) in the same fused stage. Only small descriptions cross stage boundaries.
3. ``GroupByShard`` -> ``WriteShards``: each shard's parts (records encoded by the read stage,
   ``target`` from the planned class list) -> its file (a hard link when it is one whole part,
   else a byte copy); it does not wait for TFT's analysis.
4. ``Finalize``: schema.pbtxt, feature_fn/, and last the manifest.

``--resume`` (`pipelines.resume`): what an unfinished run of the same plan committed (finished
read tasks, checkpoints inside a task) is not read again; the read stage emits its outputs from
its records and parts, then reads the rest.
"""

from __future__ import annotations

# re-exported: the names the job's parts had here before they moved (tests, benchmarks, users)
__all__ = [
    "HELD_PIECE_SEGMENTS",
    "PlannedSeconds",
    "StagedPlan",
    "build_pipeline",
    "counters",
    "held_tasks",
    "job_fingerprint",
    "launcher_plan",
    "resume_in_job",
    "run_job",
    "stage_plan",
    "start_output_dir",
    "summarize",
    "written_while_built",
]

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

import runners
from pipelines.build import (
    HELD_PIECE_SEGMENTS,
    StagedPlan,
    build_pipeline,
    describe_job,
    held_tasks,
    stage_plan,
)
from pipelines.config import RecordConfig, UsageError
from pipelines.launch_in_job import (
    ListingHandover,
    launcher_plan,
    run_planned_in_job,
    written_while_built,
)
from pipelines.plan import (
    Continuation,
    list_inputs,
    one_task,
    read_headers,
    size_tasks,
)
from pipelines.plan.reads import output_dir_state
from pipelines.result import RecordResult
from pipelines.resume import fingerprint as fp
from pipelines.resume import reuse
from pipelines.resume.output_dir import (
    job_fingerprint,
    resume_in_job,
    start_output_dir,
)
from pipelines.summary import PlannedSeconds, counters, summarize
from replay.storage import is_url
from runners import internals
from runners.internals import JobOptions
from transforms.stages.progress import ProgressReporter


def run_job(
    config: RecordConfig,
    *,
    beam_argv: Sequence[str] = (),
    shard_func: Callable[[dict], int] | None = None,
    continuation: Continuation | None = None,
    plan_in_job: bool | None = None,
) -> RecordResult:
    """Plans, runs the pipeline and returns what it produced.

    A plain run or an ``--append`` whose inputs are on an object store is planned in the job
    (`pipelines.plan.in_job`: the launcher reads no header but the first, where each header read
    is a request; an append's held inputs are compared there, `pipelines.plan.held`, unless its
    dataset has no class list or shards by class); ``--resume`` of an unfinished run is planned
    where the run was (its stored fingerprint says); local inputs, ``--annotations`` and a
    `shard_func` are planned in the launcher (`pipelines.plan`). Local inputs stay there: a run
    of many small local files planned in the job peaks at about the memory of one planned in
    the launcher, while a local header read is cheap (docs/running-at-scale.md).

    Args:
      config: the run's options.
      beam_argv: the command line holding the Beam options (the CLI's whole argv; record
        options in it are ignored here, they are in `config`).
      shard_func: optional element -> shard callable (Python API, see pipelines.api).
      continuation: set by `pipelines.append` for the record job of an ``--append``
        (`Continuation.held`: planned in the job).
      plan_in_job: True / False: plan a plain run or an ``--append`` in the job / in the
        launcher wherever its inputs are (the same outputs); None: in the job for inputs on an
        object store.

    Returns:
      The `RecordResult` (counts, errors, bytes, seconds, counters), built from the manifest.

    Raises:
      UsageError: invalid arguments or inputs (before any work).
    """
    if config.append:
        return _run_append(config, beam_argv, shard_func=shard_func, plan_in_job=plan_in_job)
    argv = list(beam_argv)
    options = JobOptions(argv)  # PipelineOptions(argv) with each view built once
    # Planning lists and reads inputs with Beam's FileSystems before any Pipeline exists: give it
    # the options now, as beam.Pipeline(options) does later (s3:// needs --s3_endpoint_url etc.).
    FileSystems.set_options(options)
    out = config.output_dir.rstrip("/") or "/"
    finished = reuse.finished_dataset(out, config.params()) if config.resume else None
    if finished is not None:  # checked: the same options, this format, reads back
        return reuse.finished_result(finished, config)
    # a shard_func (Python API) is not plain data: it reaches the job inside the read stage's
    # DoFn, not as the plan step's output, so such runs plan in the launcher
    listed = None
    # an --append planned in the job (`Continuation.held`) is planned there, resumed or not
    held = continuation is not None and continuation.held is not None
    if (continuation is None or held) and shard_func is None:
        with internals.collector_paused():  # planning's objects live until the job ends
            # validates before the runner
            listed = list_inputs(config, shard_func=shard_func, continuation=continuation)
        state = output_dir_state(listed.output_dir)
        in_job, stored = _where_planned(config, state, held=held, plan_in_job=plan_in_job)
        if in_job:
            launch = ListingHandover(listed)
            del listed  # the job's launch holds the listing until its pipeline is built
            return run_planned_in_job(
                config,
                launch,
                state,
                options=options,
                argv=argv,
                stored=stored,
                continuation=continuation,
            )
    handover = None if listed is None else ListingHandover(listed)
    del listed  # the launcher's planning takes it over, and drops it before the job runs
    return _run_planned_in_launcher(
        config,
        handover,
        options=options,
        argv=argv,
        shard_func=shard_func,
        continuation=continuation,
    )


def _where_planned(
    config: RecordConfig, state: str, *, held: bool, plan_in_job: bool | None
) -> tuple[bool, Mapping[str, Any] | None]:
    """Whether a run that may plan in the job does (an append planned in the job: `held`), and
    the stored fingerprint of a ``--resume`` (resumed where it planned: its fingerprint says)."""
    in_job = held or (is_url(config.input_pattern) if plan_in_job is None else plan_in_job)
    stored = None
    if config.resume and state == "ours":
        stored = fp.read_fingerprint(config.output_dir.rstrip("/") or "/")
        in_job = held or (stored is not None and fp.planned_in_job(stored))
    return in_job, stored


def _run_append(
    config: RecordConfig,
    beam_argv: Sequence[str],
    *,
    shard_func: Callable[[dict], int] | None,
    plan_in_job: bool | None,
) -> RecordResult:
    """An ``--append`` (`pipelines.append.run_append`), its record job run by `run_job`: planned
    in the job as a plain run would be (`plan_in_job`, or inputs on an object store)."""
    from pipelines import append

    def record(sub: RecordConfig, *, continuation: Continuation, **_: bool) -> RecordResult:
        return run_job(sub, beam_argv=beam_argv, shard_func=shard_func, continuation=continuation)

    in_job = is_url(config.input_pattern) if plan_in_job is None else plan_in_job
    return append.run_append(config, run=record, in_job=in_job and shard_func is None)


def _run_planned_in_launcher(
    config: RecordConfig,
    handover: ListingHandover | None,
    *,
    options: JobOptions,
    argv: list[str],
    shard_func: Callable[[dict], int] | None,
    continuation: Continuation | None,
) -> RecordResult:
    """A run planned in the launcher (`pipelines.plan`): every header read here, the read tasks
    cut, staged beside the output and run. `handover`: the plain run's listing `run_job`
    made (None: listed here, with the `continuation` of an ``--append``)."""
    with internals.collector_paused():  # planning's objects live until the job ends
        if handover is None:
            listed = list_inputs(config, shard_func=shard_func, continuation=continuation)
        else:
            listed = handover.take()
        scanned = read_headers(config, listed)
        del listed  # the listing (files before their headers) is not held while the job runs
        plan = size_tasks(config, scanned, cpu_count=os.cpu_count() or 1)
        del scanned  # nor the stamps (in the plan and then the fingerprint)
        try:
            runners.configure(options, input_bytes=plan.input_bytes, argv=argv)
        except runners.RunnerError as e:
            raise UsageError(str(e)) from e
        single_task = runners.sequential_tasks(options) and not is_url(plan.output_dir)
        if single_task:
            # one thread runs the tasks: one task, each shard a hard link to its part, and the
            # task checkpoints for --resume; on an object store shards are copies anyway and
            # parts cannot be checkpointed in place: the planned tasks, each committed when done
            plan = one_task(plan)
        threads = runners.compute_threads(options)
        read = dataclasses.replace(plan.read, compute_threads=threads)
        plan = dataclasses.replace(plan, read=read)
        if runners.translation_only(options):  # Dataflow template: the job description only
            staged = stage_plan(plan, plan.tasks)
            return describe_job(plan, options=options, release=staged.release, staged=staged)
        reused = start_output_dir(plan, resuming=config.resume)
        start = time.monotonic()
        p = beam.Pipeline(options=options)
        held = held_tasks(reused.tasks) if single_task else None
        staged = stage_plan(plan, reused.tasks, held=held)
        # nor the plan's files and tasks: the job takes the staged tasks (`held`: a piece of the
        # one task's segments at a time), and the result summary these counts and seconds
        seconds = PlannedSeconds(plan.inputs)
        total_files, total_tasks = len(plan.inputs), len(plan.tasks)
        reused_tasks, reused_windows = reused.whole_tasks, reused.windows
        plan = dataclasses.replace(plan, inputs=(), tasks=(), input_stamps=())
        del reused, held
        prior = None if continuation is None else continuation.prior_moments
        build_pipeline(p, plan, staged=staged, prior_moments=prior)
    try:
        with ProgressReporter(plan.output_dir, total_files=total_files):
            result = p.run()
            result.wait_until_finish()
    finally:
        staged.release()
    elapsed = time.monotonic() - start
    summary = summarize(plan, elapsed, counters=counters(result), planned_seconds=seconds)
    return dataclasses.replace(
        summary,
        total_tasks=total_tasks,
        reused_tasks=reused_tasks,
        reused_windows=reused_windows,
    )
