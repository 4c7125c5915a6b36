"""The record job's plan step: every file's header read where the work runs, then the plan.

A plain record run (`pipelines.job`) lists and labels its inputs in the launcher
(`pipelines.plan.listing.list_inputs`: no request a file) and stages them
(`transforms.stages.staged`); the job then reads their headers in parallel and plans batch by
batch, with the pure functions the launcher's plan is made of (`pipelines.plan.batches`:
`summarize_headers`, `plan_summary`, `cut_batch`: `plan_headers`' checks, shard counts and
read tasks), so both paths cut the same
read tasks and write the same bytes; no step holds every file as objects: a read task keeps
its segments as the plan step's pickled pieces, decoded as the task reads them
(`transforms.stages.task_coder.EncodedSegments`; the one task of a runner that runs one task,
`pipelines.plan.sizing.one_task`, has every file's segment)::

    staged inputs -> batches of files -> Reshuffle (``--append``: `pipelines.plan.held`, the
        new files only) -> ReadHeaders (``--annotations``: -> Annotate, each file's windows
        from its matched rows, and the bad rows) -> Summarize (per batch)
        -> AllSummaries (one, no per-file list) -> Plan: how each batch cuts its rows (TaskCut),
           (ReadWindowsConfig, Sharding) ("planned")
    header batches + TaskCut (side input) -> CutTasks: (task id, pickled segments), refused files
        ("errors") -> GroupByTask -> read tasks (main; their segments kept pickled)
    ``--resume``: read tasks + the commit records' paths by task (one listing, side input)
        -> ReuseCommitted: each task with what it reuses (`pipelines.resume.reuse.task_reuse`)

``--resume`` of a run planned in the job: the launcher compares the fingerprint (made from the
listing) and clears the directory (`pipelines.resume.output_dir.resume_in_job`); each task reads
only its own commit records, where it runs, and deletes those it does not reuse before it is
read (a continued task rewrites the part bytes they name).

``--annotations``: the launcher matched the tables' rows to the listing (`pipelines.plan.
listing.match_annotations`: each input carries its rows, the class list is fixed); each batch
annotates its files once their headers are read (`annotated.annotate_file`, events padded to
the file's own most), the summaries' most events of a row is the run's `max_events` (the
``events`` shape), `cut_batch` pads each file's events to it, and ``--strict`` refuses the first
bad row of the launcher's and the batches' in the plan step.

The ``planned`` singleton (the resolved signal dtype, the layout, the shard counts) is a side input
of the read, write and finalize stages. A check that needs headers (``--signal_dtype`` that cannot
hold a file, ``--strict`` and a bad file, no window in the analysed splits) fails the plan step with
the launcher's `UsageError`, before any window is read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping
from operator import itemgetter
from typing import Any

import apache_beam as beam

from pipelines.config import RecordConfig, UsageError
from pipelines.plan import annotated
from pipelines.plan.batches import (
    HeaderSummary,
    TaskCut,
    cut_batch,
    merge_summaries,
    plan_summary,
    summarize_headers,
    summary_audio_ms,
)
from pipelines.plan.held import NewInputs
from pipelines.plan.reads import scan_headers
from pipelines.plan.types import HeldTables, ScannedInputs
from pipelines.resume import reuse
from transforms.audio.annotations import RowError
from transforms.spec.types import InputFile, ReadTask
from transforms.stages import staged
from transforms.stages.task_coder import EncodedPiece, EncodedSegments, encode_segments

HEADER_BATCH = 256  # files whose headers one element of the header stage reads
ERRORS_TAG = "errors"  # files refused for their header or label: {"path", "reason"}
BAD_ROWS_TAG = "bad_rows"  # --annotations: table rows refused (RowError)
PLANNED_TAG = "planned"  # (ReadWindowsConfig, Sharding), one element
PLANNED_AUDIO_MS = "planned_audio_ms"  # counter: milliseconds of audio in the planned files
REUSED_TASKS = "reused_tasks"  # counter (--resume): tasks reused whole
REUSED_WINDOWS = "reused_windows"  # counter (--resume): windows reused


def batches(inputs: staged.Staged, *, size: int = HEADER_BATCH) -> Iterator[list[InputFile]]:
    """The staged inputs, in lists of `size` files (index order). In the launcher's process
    the launcher's own list is handed over and then forgotten (`staged.release`): its files
    are dropped as their batches' headers are read, not held to the job's end."""
    files = staged.load(inputs)
    staged.release(inputs)  # a retried step reads the staged file
    for start in range(0, len(files), size):
        yield files[start : start + size]


def read_headers(files: list[InputFile]) -> list[InputFile]:
    """`files` with their headers read (`pipelines.plan.reads.scan_headers`: equal headers share one
    object, a file that cannot be read gets its `error`)."""
    beam.metrics.Metrics.counter("record", "headers_read").inc(len(files))
    return list(scan_headers(files))


class MergeSummaries(beam.CombineFn):
    """Batches' `HeaderSummary`s -> the summary of them all
    (`pipelines.plan.batches.merge_summaries`, every `_MERGE_EVERY` summaries added)."""

    def create_accumulator(self) -> list[HeaderSummary]:
        return []

    def add_input(self, acc: list[HeaderSummary], summary: HeaderSummary) -> list[HeaderSummary]:
        acc.append(summary)
        if len(acc) >= _MERGE_EVERY:
            acc[:] = [merge_summaries(acc)]
        return acc

    def merge_accumulators(self, accs: Any) -> list[HeaderSummary]:
        return [merge_summaries(s for acc in accs for s in acc)]

    def extract_output(self, acc: list[HeaderSummary]) -> HeaderSummary:
        return merge_summaries(acc)


_MERGE_EVERY = 64  # batch summaries an accumulator holds before it merges them


@dataclasses.dataclass(frozen=True)
class PlanArgs:
    """What the plan step needs besides the headers (small: no per-file list).

    Attributes:
      config: the run's options.
      listed: `list_inputs`' result without its inputs and stamps (classes, sharding, ...).
      cpu_count: the launcher's cores (read tasks per core, as the launcher plans them).
      single_task: the runner runs tasks one at a time (`pipelines.plan.sizing.one_task`).
      compute_threads: the read stage's feature threads (`runners.compute_threads`).
      feature_shapes: the launcher's feature shapes (from ``--sample_rate`` or its first
        readable header), which TFT's analysis was built with: the plan step's must be equal.
    """

    config: RecordConfig
    listed: ScannedInputs
    cpu_count: int
    single_task: bool
    compute_threads: int
    feature_shapes: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)


def annotate_batch(files: list[InputFile], args: PlanArgs) -> Iterator[Any]:
    """``--annotations``: a batch of files with their headers read and their matched rows
    (`FileEvents`) -> the batch with each usable file's `FileAnnotation` (its events padded to
    its own most; `cut_batch` pads them to the run's) and each bad row (tagged ``bad_rows``)."""
    done = []
    for f in files:
        annotated_file, bad = annotated.annotate_file(f, config=args.config, listed=args.listed)
        done.append(annotated_file)
        yield from (beam.pvalue.TaggedOutput(BAD_ROWS_TAG, row) for row in bad)
    yield done


def first_bad_row(rows: Iterable[RowError]) -> RowError | None:
    """The first of `rows` in (table, line) order (`annotated.row_order`), None if none."""
    return min(rows, key=annotated.row_order, default=None)


def summarize(files: list[InputFile], args: PlanArgs) -> HeaderSummary:
    """A batch of files with their headers read -> its `HeaderSummary`."""
    return summarize_headers(args.config, args.listed, files)


def plan_step(
    summary: HeaderSummary,
    args: PlanArgs,
    job_rows: Iterable[RowError | None] = (),
    table_errors: tuple[RowError, ...] = (),
) -> Iterator[Any]:
    """Every batch's summary -> how the batches cut their tasks (`TaskCut`, the main output)
    and the (ReadWindowsConfig, Sharding) singleton (tagged ``planned``). ``--annotations``:
    `job_rows` the first bad row the batches found (at most one), `table_errors` those the
    launcher found (passed on, tagged ``bad_rows``).

    Raises:
      UsageError: a check that needs the headers failed (the launcher's line), or the files
        changed between the launcher's header read and the job's (other feature shapes).
    """
    found = [row for row in job_rows if row is not None]
    cut = plan_summary(
        args.config,
        args.listed,
        summary,
        cpu_count=args.cpu_count,
        single_task=args.single_task,
        first_bad_row=first_bad_row([*table_errors, *found]),
    )
    shapes = dict(cut.read.layout.feature_shapes)
    if shapes != dict(args.feature_shapes):
        raise UsageError(
            f"the input files changed after the job started: their headers give the feature "
            f"shapes {shapes}, the launcher's first readable file gave {dict(args.feature_shapes)}"
            "; run again"
        )
    read = dataclasses.replace(cut.read, compute_threads=args.compute_threads)
    yield beam.pvalue.TaggedOutput(PLANNED_TAG, (read, cut.sharding))
    yield from (beam.pvalue.TaggedOutput(BAD_ROWS_TAG, row) for row in table_errors)
    # of the files planned (not refused): the command's audio seconds
    beam.metrics.Metrics.counter("record", PLANNED_AUDIO_MS).inc(summary_audio_ms(summary))
    yield cut


def cut_step(files: list[InputFile], cut: TaskCut, args: PlanArgs) -> Iterator[Any]:
    """A batch of files with their headers read -> (task id, its segments of the batch) for
    each task the batch has rows of (`cut_batch`: one element per task and batch,
    pickled with the batch's shared headers) and its refused files (tagged ``errors``)."""
    for f in files:
        if f.error:
            yield beam.pvalue.TaggedOutput(ERRORS_TAG, {"path": f.path, "reason": f.error})
    for task_id, pieces in itertools.groupby(
        cut_batch(args.config, args.listed, files, cut), key=itemgetter(0)
    ):
        yield task_id, encode_segments(tuple(seg for _, seg in pieces))


def to_task(keyed: tuple[int, Iterable[EncodedPiece]]) -> ReadTask:
    """(task id, its pieces from each batch) -> the read task: its segments in (file index, row
    start) order, as `pipelines.plan.batches.read_task` orders them (a batch's pieces are in
    that order and batches do not overlap), kept encoded (`task_coder.EncodedSegments`)."""
    beam.metrics.Metrics.counter("record", "read_tasks").inc()
    task_id, pieces = keyed
    return ReadTask(task_id, EncodedSegments(pieces))


@dataclasses.dataclass(frozen=True)
class ResumeArgs:
    """``--resume`` of a run planned in the job: what its tasks reuse is decided in the job.

    Attributes:
      output_dir: the run's output directory (its ``.tmp/commits`` records).
      checkpoints: checkpoint records are reused too (False on an object store: whole tasks).
    """

    output_dir: str
    checkpoints: bool


def commit_paths(resume: ResumeArgs) -> dict[int, list[str]]:
    """The run's commit and checkpoint records' paths by task (one listing, no record read)."""
    return reuse.record_paths(resume.output_dir)


def reuse_committed(task: ReadTask, paths: Mapping[int, list[str]], resume: ResumeArgs) -> ReadTask:
    """A planned read task with what it reuses of its records (`reuse.task_reuse`); its records
    not reused are deleted (a continued task rewrites the part bytes they name)."""
    import tensorflow as tf  # the dataset's file system (local or an object store)

    found = reuse.read_records(paths.get(task.task_id, ()))
    one = reuse.task_reuse(resume.output_dir, task, found, checkpoints=resume.checkpoints)
    for path in one.stale:
        with contextlib.suppress(tf.errors.NotFoundError):  # a retried bundle removed it first
            tf.io.gfile.remove(path)
    beam.metrics.Metrics.counter("record", REUSED_TASKS).inc(one.whole_tasks)
    beam.metrics.Metrics.counter("record", REUSED_WINDOWS).inc(one.windows)
    return one.tasks[0]


class PlanInJob(beam.PTransform):
    """Staged labelled inputs -> ``tasks`` (ReadTask), ``errors`` ({"path", "reason"}) and
    ``planned`` ((ReadWindowsConfig, Sharding), one element); ``--annotations``: ``bad_rows``
    ({"path": "<table>:<line>", "reason"}), the inputs carrying their matched rows.

    `batch_size`: files whose headers one element of the header stage reads. `resume`
    (``--resume``): each task goes with what it reuses of the committed work. `held`
    (``--append``): the inputs are the whole listing; those the dataset holds are left out
    and the others numbered after its own (`pipelines.plan.held.NewInputs`) before any header
    is read.
    """

    def __init__(
        self,
        inputs: staged.Staged,
        args: PlanArgs,
        *,
        batch_size: int = HEADER_BATCH,
        resume: ResumeArgs | None = None,
        held: HeldTables | None = None,
    ) -> None:
        super().__init__()
        self._held = held
        self._inputs = inputs
        self._table_errors = tuple(args.listed.table_errors)  # the plan step's only
        self._args = dataclasses.replace(
            args, listed=dataclasses.replace(args.listed, inputs=(), stamps=(), table_errors=())
        )
        self._batch_size = batch_size
        self._resume = resume

    @property
    def single_task(self) -> bool:
        """Whether the plan step cuts one read task (`PlanArgs.single_task`)."""
        return self._args.single_task

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, beam.PCollection]:
        args = self._args
        files = (
            pbegin
            | "StagedInputs" >> beam.Create([self._inputs], reshuffle=False)
            | "Batches" >> beam.FlatMap(batches, size=self._batch_size)  # list[InputFile]
        )
        if self._held is not None:  # --append: the new inputs, numbered after the dataset's
            files = files | "NewInputs" >> NewInputs(self._held, batch_size=self._batch_size)
        elif self._inputs.count > self._batch_size:  # spread the header reads over workers
            files = files | "SpreadBatches" >> beam.Reshuffle()
        # list[InputFile], headers read: summarised, then cut once the summaries are merged
        headed = files | "ReadHeaders" >> beam.Map(read_headers)
        annotating = args.config.annotation_config is not None
        first_rows: Any = ()
        if annotating:  # each file's windows and rows; RowError per bad row (bad_rows)
            annotated_batches = headed | "Annotate" >> beam.FlatMap(
                annotate_batch, args
            ).with_outputs(BAD_ROWS_TAG, main="files")
            headed, job_rows = annotated_batches.files, annotated_batches[BAD_ROWS_TAG]
            first_rows = beam.pvalue.AsList(  # the first bad row (--strict), one or none
                job_rows | "FirstBadRow" >> beam.CombineGlobally(first_bad_row).without_defaults()
            )
        planned = (
            headed
            | "Summarize" >> beam.Map(summarize, args)  # HeaderSummary per batch
            | "AllSummaries" >> beam.CombineGlobally(MergeSummaries())  # one HeaderSummary
            | "Plan"
            >> beam.FlatMap(plan_step, args, first_rows, self._table_errors).with_outputs(
                PLANNED_TAG, BAD_ROWS_TAG, main="cut"
            )
        )
        pieces = headed | "CutTasks" >> beam.FlatMap(
            cut_step, beam.pvalue.AsSingleton(planned.cut), args
        ).with_outputs(ERRORS_TAG, main="pieces")  # (task id, EncodedPiece) per batch
        tasks = (
            pieces.pieces
            | "GroupByTask" >> beam.GroupByKey()
            | "Tasks" >> beam.Map(to_task).with_output_types(ReadTask)
        )
        if self._resume is not None:
            paths = (  # {task id: [record path]}, one element
                pbegin
                | "CommitsDir" >> beam.Create([self._resume], reshuffle=False)
                | "CommitPaths" >> beam.Map(commit_paths)
            )
            tasks = tasks | "ReuseCommitted" >> beam.Map(
                reuse_committed, beam.pvalue.AsSingleton(paths), self._resume
            ).with_output_types(ReadTask)
        outputs = {"tasks": tasks, "errors": pieces[ERRORS_TAG], "planned": planned[PLANNED_TAG]}
        if annotating:  # the job's bad rows and the launcher's (passed on by the plan step)
            outputs["bad_rows"] = (
                (job_rows, planned[BAD_ROWS_TAG])
                | "AllBadRows" >> beam.Flatten()
                | "BadRows" >> beam.Map(RowError.to_manifest)
            )
        return outputs
