"""Runs one record job from its `RecordConfig`: plan, build, run, summarize.

Both entry points end here: the command line (`pipelines.record.run`, from argv) and the Python
API (`pipelines.api.record_dataset`, from keywords). Beam's own options (runner, workers, ...)
come as `beam_argv`, parsed into PipelineOptions.

Stages (each a Beam step with its own counters), planned in `pipelines.plan`:

1. Planning: match files, read every WAV header (window counts, the signal dtype), assign
   files to splits and cut the rows into read tasks (a single task when the runner runs tasks
   one at a time: the in-memory DirectRunner); bad files are listed up front. A plain run of
   inputs on an object store lists and labels in the launcher and reads the headers and plans
   in the job's first step (`pipelines.plan.in_job`), and resumes there; local inputs,
   ``--annotations``, ``--append`` and a Python ``shard_func`` plan in the launcher
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

import array
import concurrent.futures
import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import operator
import os
import re
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

import runners
from pipelines.config import RecordConfig, UsageError
from pipelines.plan import (
    Continuation,
    RecordPlan,
    ScannedInputs,
    check_output_dir,
    launcher_windows_config,
    list_inputs,
    one_task,
    read_headers,
    size_tasks,
)
from pipelines.plan.in_job import (
    PLANNED_AUDIO_MS,
    REUSED_TASKS,
    REUSED_WINDOWS,
    PlanArgs,
    PlanInJob,
    ResumeArgs,
)
from pipelines.plan.reads import RUN_MARKER, output_dir_state
from pipelines.result import RecordResult
from pipelines.resume import fingerprint as fp
from pipelines.resume import reuse
from pipelines.resume.output_dir import (
    job_fingerprint,
    prepare_output_dir,
    resume_in_job,
    start_output_dir,
)
from replay import format as fmt
from replay.storage import is_url
from runners import internals
from runners.internals import JobOptions
from transforms.spec.types import InputFile, ReadTask, ShardSpec
from transforms.stages import atomic
from transforms.stages import staged as staged_lists
from transforms.stages.composites import (
    Analyze,
    ChooseCompression,
    Finalize,
    GroupByShard,
    PlannedErrors,
    ReadWindows,
    WriteShards,
    register_coders,
)
from transforms.stages.moments import total as total_moments
from transforms.stages.progress import ProgressReporter
from transforms.stages.task_coder import EncodedSegments, encode_segments


def build_pipeline(
    p: beam.Pipeline,
    plan: RecordPlan,
    *,
    staged: StagedPlan | None = None,
    planning: PlanInJob | None = None,
    prior_moments: Mapping[str, Any] | None = None,
) -> None:
    """Adds the record job's stages to `p` (runner-agnostic; see `transforms.stages.composites`).

    `staged`: the read tasks (with ``--resume``, what they reuse of the committed work) and the
    errors planning found, as `stage_plan` wrote them for the job. Or `planning`: the job's
    plan step (`pipelines.plan.in_job`), whose tasks, refusals and (ReadWindowsConfig, Sharding) the
    stages take; `plan` then holds what the launcher knows (no tasks, no shard counts, the
    signal dtype as given). `prior_moments` (``--append_transform refresh``): the dataset's
    stored {feature: Moments}, added to this job's in the z-score statistics (not in the
    moments its manifest stores).
    """
    from transforms.stages.publish import WriteTransformFn  # imports TFT

    register_coders()  # the read tasks' and RecordBatches' coders, before any PCollection of them
    out = plan.output_dir
    layout = plan.read.layout
    read_stage = functools.partial(
        ReadWindows,
        config=plan.read,
        sharding=plan.sharding,
        classes=plan.classes,
        output_dir=out,
        analyzed_splits=plan.analyzed_splits,
    )
    planned = None  # (ReadWindowsConfig, Sharding) of the job's plan step, one element
    if planning is not None:
        # "tasks": ReadTask, "errors": {"path", "reason"}, "planned": (ReadWindowsConfig, Sharding)
        planned_job = p | "PlanInJob" >> planning
        planned = planned_job["planned"]
        # {"rows": RecordBatch, "errors" / "parts": dict, "files" / "samples": bytes, "stats"}
        read = p | "ReadWindows" >> read_stage(
            planned_job["tasks"], planned=planned, spread=not planning.single_task
        )
        # {"path", "reason"}: files refused by the plan step (counted)
        planned_errors = p | "PlannedErrors" >> PlannedErrors(planned_job["errors"])
        # {split: shard count}, one element
        num_shards: Mapping[str, int] | beam.PCollection = planned | "NumShards" >> beam.Map(
            lambda pl: dict(pl[1].num_shards)
        )
    elif staged is not None:
        # {"rows": RecordBatch, "errors" / "parts": dict, "files" (table lines) / "samples":
        #  bytes, "stats": {feature: Moments}}
        read = p | "ReadWindows" >> read_stage(staged.tasks)
        # {"path", "reason"}: files refused at planning (counted), bad table rows
        planned_errors = p | "PlannedErrors" >> PlannedErrors(staged.errors)
        num_shards = dict(plan.sharding.num_shards)
    else:
        raise ValueError("build_pipeline needs the staged plan or the job's plan step")
    errors = (  # {"path", "reason"}: files failed in planning or reading, bad table rows
        (read["errors"], planned_errors) | "AllErrors" >> beam.Flatten()
    )
    # {feature: Moments} of this job's analysed rows, one element (stored in the manifest)
    moments = read["stats"] | "TotalMoments" >> beam.CombineGlobally(total_moments)
    analysed = read["stats"]  # {feature: Moments}: the statistics' rows
    if prior_moments is not None:
        prior = p | "PriorMoments" >> beam.Create([dict(prior_moments)])
        analysed = (analysed, prior) | "WithPrior" >> beam.Flatten()
    # TFT's transform_fn (saved model path + metadata), one element
    transform_fn = read["rows"] | "Analyze" >> Analyze(
        layout, classes=plan.classes, temp_dir=f"{out}/.tmp/tft", moments=analysed
    )
    # transform_fn/ written (one element), an ordering side input of Finalize
    transform_written = transform_fn | "WriteTransformFn" >> WriteTransformFn(out)
    # "NONE" | "GZIP" | "ZLIB", one element
    compression = read["samples"] | "ChooseCompression" >> ChooseCompression(plan.compression)
    spec = ShardSpec(output_dir=out, name=plan.name)
    written = (  # dict per shard file: split, shard, filename, num_examples, num_bytes, ...
        read["parts"]
        | "GroupByShard" >> GroupByShard()
        | "WriteShards"
        >> WriteShards(
            spec,
            compute_threads=plan.read.compute_threads,
            num_shards=num_shards,
            compression=compression,
            errors=errors,
        )
    )
    _ = p | "Finalize" >> Finalize(  # the manifest dict, written last
        spec,
        plan.read,
        params=plan.params,
        num_shards=num_shards if planned is None else {},
        classes=plan.classes,
        analyzed_splits=plan.analyzed_splits,
        shards=written,
        files=read["files"],
        errors=errors,
        compression=compression,
        transform_written=transform_written,
        moments=moments,
        planned=planned,
    )


@dataclasses.dataclass(frozen=True)
class StagedPlan:
    """The plan's lists that grow with the corpus, staged for the job (`stage_plan`)."""

    tasks: staged_lists.Staged  # ReadTask
    errors: staged_lists.Staged  # ({"path", "reason"}, is a file): planning's errors

    def release(self) -> None:
        """The job has ended: the launcher's lists are no longer handed to it in-process."""
        staged_lists.release(self.tasks)
        staged_lists.release(self.errors)


def stage_plan(
    plan: RecordPlan, tasks: Sequence[ReadTask], *, held: Sequence[ReadTask] | None = None
) -> StagedPlan:
    """Writes `tasks` and the errors planning found beside the output (`transforms.stages.
    staged`), so that the submitted job holds references to them, not the lists: its size does
    not grow with the number of files. `held`: the tasks as a job in this process takes them
    (`held_tasks`; None: `tasks`)."""
    refused = [({"path": f.path, "reason": f.error}, True) for f in plan.inputs if f.error]
    errors = refused + [(e, False) for e in plan.annotation_errors]
    return StagedPlan(
        tasks=staged_lists.stage(plan.output_dir, "tasks", tasks, held=held),
        errors=staged_lists.stage(plan.output_dir, "errors", errors),
    )


def run_job(
    config: RecordConfig,
    *,
    beam_argv: Sequence[str] = (),
    shard_func: Callable[[dict], int] | None = None,
    continuation: Continuation | None = None,
    plan_in_job: bool | None = None,
) -> RecordResult:
    """Plans, runs the pipeline and returns what it produced.

    A plain run whose inputs are on an object store is planned in the job
    (`pipelines.plan.in_job`: the launcher reads no header but the first, where each header read
    is a request); ``--resume`` of an unfinished run is planned where the run was (its stored
    fingerprint says); local inputs, ``--annotations``, ``--append`` and a `shard_func` are
    planned in the launcher (`pipelines.plan`). Local inputs stay
    there: planned in the job, a run of many small local files peaks at about the memory of one
    planned in the launcher, both well above the same audio in long files, while a local
    header read is cheap (docs/running-at-scale.md).

    Args:
      config: the run's options.
      beam_argv: the command line holding the Beam options (the CLI's whole argv; record
        options in it are ignored here, they are in `config`).
      shard_func: optional element -> shard callable (Python API, see pipelines.api).
      continuation: set by `pipelines.append` for the record job of an ``--append``.
      plan_in_job: True / False: plan a plain run in the job / in the launcher wherever its
        inputs are (the same outputs); None: in the job for inputs on an object store.

    Returns:
      The `RecordResult` (counts, errors, bytes, seconds, counters), built from the manifest.

    Raises:
      UsageError: invalid arguments or inputs (before any work).
    """
    if config.append:
        from pipelines import append

        def record(sub: RecordConfig, *, continuation: Continuation) -> RecordResult:
            return run_job(
                sub, beam_argv=beam_argv, shard_func=shard_func, continuation=continuation
            )

        return append.run_append(config, run=record)
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
    if config.annotation_config is None and continuation is None and shard_func is None:
        with internals.collector_paused():  # planning's objects live until the job ends
            listed = list_inputs(config, shard_func=shard_func)  # validates before the runner
        state = output_dir_state(listed.output_dir)
        in_job = is_url(config.input_pattern) if plan_in_job is None else plan_in_job
        stored = None
        if config.resume and state == "ours":  # resumed where it planned: its fingerprint says
            stored = fp.read_fingerprint(listed.output_dir)
            in_job = stored is not None and fp.planned_in_job(stored)
        if in_job:
            launch = _LaunchInJob(listed)
            del listed  # the job's launch holds the listing until its pipeline is built
            return _run_planned_in_job(
                config, launch, state, options=options, argv=argv, stored=stored
            )
    with internals.collector_paused():  # planning's objects live until the job ends
        if listed is None:
            listed_all = list_inputs(config, shard_func=shard_func, continuation=continuation)
            scanned = read_headers(config, listed_all)
            del listed_all
        else:
            scanned = read_headers(config, listed)
        plan = size_tasks(config, scanned, cpu_count=os.cpu_count() or 1)
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
            return _describe_job(plan, options=options, release=staged.release, staged=staged)
        reused = start_output_dir(plan, resuming=config.resume)
        # the listing (files before their headers) and the stamps (in the fingerprint now) are
        # not held while the job runs
        del listed, scanned
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


HELD_PIECE_SEGMENTS = 256  # segments pickled together in a task held by `held_tasks`


def held_tasks(tasks: Sequence[ReadTask]) -> list[ReadTask]:
    """`tasks` as a job in this process reads them (`stage_plan`'s `held`): each task's segments
    pickled in pieces of HELD_PIECE_SEGMENTS (`task_coder.EncodedSegments`, decoded a piece at a
    time as they are read), so that the one task of a runner that runs tasks one at a time is
    not an object per segment and file while it runs. A task whose segments are not in (file
    index, row start) order, the order its pieces keep, stays as it is."""
    out = []
    for task in tasks:
        segments = task.segments
        keys = [(seg.file.index, seg.row_start) for seg in segments]
        if len(segments) <= HELD_PIECE_SEGMENTS or keys != sorted(keys):
            out.append(task)
            continue
        pieces = [
            encode_segments(segments[start : start + HELD_PIECE_SEGMENTS])
            for start in range(0, len(segments), HELD_PIECE_SEGMENTS)
        ]
        out.append(dataclasses.replace(task, segments=EncodedSegments(pieces)))
    return out


class PlannedSeconds:
    """The seconds of audio of a plan's files with a header, kept without the files (whose
    summary of the run needs only those not failed): each one's path digest and seconds, in the
    plan's order."""

    def __init__(self, inputs: Sequence[InputFile]) -> None:
        self._digests, self._seconds = array.array("Q"), array.array("d")
        for f in inputs:
            if f.info is not None and f.info.sample_rate:
                self._digests.append(_path_digest(f.path))
                self._seconds.append(f.info.num_frames / f.info.sample_rate)

    def total(self, failed: Collection[str]) -> float:
        """The seconds of the files not in `failed` (paths), summed in the plan's order."""
        if not failed:
            return sum(self._seconds)
        gone = {_path_digest(path) for path in failed}
        return sum(s for d, s in zip(self._digests, self._seconds, strict=True) if d not in gone)


def _path_digest(path: str) -> int:
    return int.from_bytes(hashlib.blake2b(path.encode("utf-8"), digest_size=8).digest(), "big")


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


class _LaunchInJob:
    """The launcher's listing of a run planned in the job, handed over once: `take` returns it
    and forgets it, so that no frame of the launcher holds every listed file while the job runs
    (the job loads its own copy, `transforms.stages.staged`)."""

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


def _run_planned_in_job(
    config: RecordConfig,
    launch: _LaunchInJob,
    state: str,
    *,
    options: JobOptions,
    argv: list[str],
    stored: Mapping[str, Any] | None = None,
) -> RecordResult:
    """A plain record run planned in the job (`pipelines.plan.in_job`): the launcher makes no
    request a file (the listing, the labels, one header for the feature shapes). `stored`:
    ``--resume`` of such a run, its fingerprint: compared and the directory cleared in the
    launcher (`resume_in_job`), what each task reuses decided in the job.

    Raises:
      UsageError: invalid inputs or options, found by the launcher or by the job's plan step
        (then the output directory is left as it was found when the run made it).
    """
    listed = launch.take()
    out = listed.output_dir
    with internals.collector_paused():  # the launcher's steps; the job runs with it on
        plan, args = launcher_plan(config, listed, state, options=options, argv=argv)
        cut = {"cpu_count": args.cpu_count, "single_task": args.single_task}
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
            planning = PlanInJob(inputs, args, resume=resume)
            return _describe_job(plan, options=options, release=release, planning=planning)
        if stored is None:
            fingerprint = job_fingerprint(plan.params, listed, cut=cut)
        total_files = len(listed.inputs)
        inputs, data = staged_lists.pickled(out, "inputs", listed.inputs)
        planning = PlanInJob(inputs, args, resume=resume)
        del listed, args  # the job holds the staged inputs, not the launcher
        if stored is None:
            prepare_output_dir(plan)
        try:  # the fingerprint is there before the job starts
            with written_while_built(out, fingerprint, inputs, data):
                del fingerprint, data
                start = time.monotonic()
                p = beam.Pipeline(options=options)
                build_pipeline(p, plan, planning=planning)
        except BaseException:
            staged_lists.release(inputs)
            raise
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
    elapsed = time.monotonic() - start
    job_counters = counters(result)
    seconds = job_counters.get(PLANNED_AUDIO_MS, 0) / 1000  # failed while read: counted too
    summary = summarize(plan, elapsed, counters=job_counters, audio_seconds=seconds)
    return dataclasses.replace(
        summary,
        total_tasks=job_counters.get("read_tasks", 0),
        reused_tasks=job_counters.get(REUSED_TASKS, 0),
        reused_windows=job_counters.get(REUSED_WINDOWS, 0),
    )


def _describe_job(
    plan: RecordPlan,
    *,
    options: JobOptions,
    release: Callable[[], None],
    staged: StagedPlan | None = None,
    planning: PlanInJob | None = None,
) -> RecordResult:
    """The job description only (a Dataflow template): the pipeline built from `plan` and
    `staged` or `planning` (as `build_pipeline` takes them) and translated, nothing run; the
    output directory holds only the staged lists. `release` forgets them once translated."""
    try:
        p = beam.Pipeline(options=options)
        build_pipeline(p, plan, staged=staged, planning=planning)
        p.run()
    finally:
        release()
    return RecordResult.job_description_only(plan.output_dir)


_SIZE = operator.attrgetter("size_bytes")  # of an InputFile

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


def counters(result: beam.runners.runner.PipelineResult) -> dict[str, int]:
    """The job's "record" counters (files_read, files_failed, windows, bytes_written, ...)."""
    try:
        query = result.metrics().query(beam.metrics.MetricsFilter().with_namespace("record"))
    except (NotImplementedError, AttributeError):  # some runners do not report metrics
        return {}
    totals: dict[str, int] = {}
    for counter in query["counters"]:
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + int(value or 0)
    return totals


def summarize(
    plan: RecordPlan,
    elapsed: float,
    *,
    counters: dict[str, int],
    audio_seconds: float | None = None,
    planned_seconds: PlannedSeconds | None = None,
) -> RecordResult:
    """Reads the written manifest and errors table, cleans temporary files, logs the counters.

    The files table is not read: its count is the manifest's ``num_files``, and the seconds of
    audio come from the plan's headers (or `audio_seconds`, planned in the job: the plan step's
    counter, which also counts the files that fail while read; or `planned_seconds`, the plan's
    headers kept without its inputs), so the launcher's work here does not grow with the number
    of files.
    """
    import tensorflow as tf

    with tf.io.gfile.GFile(f"{plan.output_dir}/{fmt.MANIFEST_FILENAME}") as fh:
        m = json.load(fh)
    with tf.io.gfile.GFile(f"{plan.output_dir}/{fmt.ERRORS_TABLE}", "rb") as fh:
        errors = [json.loads(line) for line in fh.read().splitlines()]
    for leftover in (".tmp", RUN_MARKER):
        path = f"{plan.output_dir}/{leftover}"
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        elif tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    failed = {e["path"] for e in errors}
    seconds = audio_seconds
    if seconds is None and planned_seconds is not None:
        seconds = planned_seconds.total(failed)
    if seconds is None:
        seconds = sum(  # of the files read: planned, and not failed while read
            f.info.num_frames / f.info.sample_rate
            for f in plan.inputs
            if f.info is not None and f.info.sample_rate and f.path not in failed
        )
    logging.getLogger("audiorecords").info("record counters: %s", counters)
    return RecordResult.from_manifest(
        m,
        errors,
        output_dir=plan.output_dir,
        elapsed=elapsed,
        audio_seconds=seconds,
        counters=counters,
        num_bad_rows=len(plan.annotation_errors),  # --annotations: bad table rows, also in errors
    )
