"""The record job's plan step: every file's header read where the work runs, then the plan.

A plain record run (`pipelines.job`) lists and labels its inputs in the launcher
(`pipelines.plan.list_inputs`: no request a file) and stages them (`transforms.record.staged`);
the job then reads their headers in parallel and plans, with the same pure functions the
launcher calls on the other path (`pipelines.plan.plan_headers`: `check_inputs`, `size_tasks`,
`one_task`), so both paths cut the same read tasks and write the same bytes::

    staged inputs -> batches of files -> Reshuffle -> ReadHeaders -> AllHeaders (index order)
        -> Plan: read tasks (main), refused files ("errors"), (ReadConfig, Sharding) ("planned")

The ``planned`` singleton (the resolved signal dtype, the shard counts) is a side input of the
read, write and finalize stages. A check that needs headers (``--signal_dtype`` that cannot
hold a file, ``--strict`` and a bad file, no window in the analysed splits) fails the plan step
with the launcher's `UsageError`, before any window is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from operator import attrgetter
from typing import Any

import apache_beam as beam

from pipelines.config import RecordConfig, UsageError
from pipelines.inputs import scan_headers
from pipelines.plan import ScannedInputs, plan_headers
from transforms.planning.types import InputFile, ReadTask
from transforms.record import staged

HEADER_BATCH = 256  # files whose headers one element of the header stage reads
ERRORS_TAG = "errors"  # files refused for their header or label: {"path", "reason"}
PLANNED_TAG = "planned"  # (ReadConfig, Sharding), one element
PLANNED_AUDIO_MS = "planned_audio_ms"  # counter: milliseconds of audio in the planned files


def batches(inputs: staged.Staged, *, size: int = HEADER_BATCH) -> Iterator[list[InputFile]]:
    """The staged inputs, in lists of `size` files (index order)."""
    files = staged.load(inputs)
    for start in range(0, len(files), size):
        yield files[start : start + size]


def read_headers(files: list[InputFile]) -> list[InputFile]:
    """`files` with their headers read (`pipelines.inputs.scan_headers`: equal headers share one
    object, a file that cannot be read gets its `error`)."""
    beam.metrics.Metrics.counter("record", "headers_read").inc(len(files))
    return list(scan_headers(files))


class AllFiles(beam.CombineFn):
    """Lists of files -> one tuple of every file, in index order."""

    def create_accumulator(self) -> list[InputFile]:
        return []

    def add_input(self, acc: list[InputFile], files: list[InputFile]) -> list[InputFile]:
        acc.extend(files)
        return acc

    def merge_accumulators(self, accs: Any) -> list[InputFile]:
        merged: list[InputFile] = []
        for acc in accs:
            merged.extend(acc)
        return merged

    def extract_output(self, acc: list[InputFile]) -> tuple[InputFile, ...]:
        return tuple(sorted(acc, key=attrgetter("index")))


@dataclasses.dataclass(frozen=True)
class PlanArgs:
    """What the plan step needs besides the headers (small: no per-file list).

    Attributes:
      config: the run's options.
      listed: `list_inputs`' result without its inputs and stamps (classes, sharding, ...).
      cpu_count: the launcher's cores (read tasks per core, as the launcher plans them).
      single_task: the runner runs tasks one at a time (`pipelines.plan.one_task`).
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


def plan_step(inputs: tuple[InputFile, ...], args: PlanArgs) -> Iterator[Any]:
    """Every file with its header -> the read tasks, the refused files (tagged ``errors``)
    and the (ReadConfig, Sharding) singleton (tagged ``planned``).

    Raises:
      UsageError: a check that needs the headers failed (the launcher's line), or the files
        changed between the launcher's header read and the job's (other feature shapes).
    """
    plan = plan_headers(
        args.config,
        args.listed,
        inputs,
        cpu_count=args.cpu_count,
        single_task=args.single_task,
    )
    shapes = dict(plan.read.layout.feature_shapes)
    if shapes != dict(args.feature_shapes):
        raise UsageError(
            f"the input files changed after the job started: their headers give the feature "
            f"shapes {shapes}, the launcher's first readable file gave {dict(args.feature_shapes)}"
            "; run again"
        )
    read = dataclasses.replace(plan.read, compute_threads=args.compute_threads)
    yield beam.pvalue.TaggedOutput(PLANNED_TAG, (read, plan.sharding))
    for f in plan.inputs:
        if f.error:
            yield beam.pvalue.TaggedOutput(ERRORS_TAG, {"path": f.path, "reason": f.error})
    beam.metrics.Metrics.counter("record", "read_tasks").inc(len(plan.tasks))
    seconds = sum(  # of the files planned (not refused): the command's audio seconds
        f.info.num_frames / f.info.sample_rate
        for f in plan.inputs
        if f.error is None and f.info is not None and f.info.sample_rate
    )
    beam.metrics.Metrics.counter("record", PLANNED_AUDIO_MS).inc(round(1000 * seconds))
    yield from plan.tasks


class PlanInJob(beam.PTransform):
    """Staged labelled inputs -> ``tasks`` (ReadTask), ``errors`` ({"path", "reason"}) and
    ``planned`` ((ReadConfig, Sharding), one element)."""

    def __init__(self, inputs: staged.Staged, args: PlanArgs) -> None:
        super().__init__()
        self._inputs = inputs
        self._args = dataclasses.replace(
            args, listed=dataclasses.replace(args.listed, inputs=(), stamps=())
        )

    @property
    def single_task(self) -> bool:
        """Whether the plan step cuts one read task (`PlanArgs.single_task`)."""
        return self._args.single_task

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, beam.PCollection]:
        files = (
            pbegin
            | "StagedInputs" >> beam.Create([self._inputs], reshuffle=False)
            | "Batches" >> beam.FlatMap(batches)  # list[InputFile], HEADER_BATCH files
        )
        if self._inputs.count > HEADER_BATCH:  # spread the header reads over workers
            files = files | "SpreadBatches" >> beam.Reshuffle()
        out = (
            files
            | "ReadHeaders" >> beam.Map(read_headers)  # list[InputFile], headers read
            | "AllHeaders" >> beam.CombineGlobally(AllFiles())  # tuple[InputFile], index order
            | "Plan"
            >> beam.FlatMap(plan_step, self._args)
            .with_output_types(ReadTask)
            .with_outputs(ERRORS_TAG, PLANNED_TAG, main="tasks")
        )
        return {"tasks": out.tasks, "errors": out[ERRORS_TAG], "planned": out[PLANNED_TAG]}
