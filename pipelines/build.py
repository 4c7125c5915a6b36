"""Building the record job: its stages added to a Beam pipeline from the plan.

`build_pipeline` adds the stages (runner-agnostic: `transforms.stages.composites`) from a plan
made in the launcher, whose read tasks and refusals `stage_plan` writes beside the output so the
job names them, not holds them (`held_tasks`: the one task of a runner in this process, in
pickled pieces), or from the job's own plan step (`pipelines.plan.in_job`). `describe_job`
builds and translates it only (a Dataflow template). Launching is `pipelines.job` (planned in
the launcher) and `pipelines.launch_in_job` (planned in the job); the result's summary
`pipelines.summary`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import apache_beam as beam

from pipelines.plan import (
    RecordPlan,
)
from pipelines.plan.in_job import (
    PlanInJob,
)
from pipelines.result import RecordResult
from runners.internals import JobOptions
from transforms.spec.types import ReadTask, ShardSpec
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
    # read: the read stage's outputs; planned_errors: {"path", "reason"} refused by planning;
    # num_shards: {split: count} (the job's plan step: one element); planned: its
    # (ReadWindowsConfig, Sharding), one element, or None (planned in the launcher)
    read, planned_errors, num_shards, planned = _read(p, plan, staged=staged, planning=planning)
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


def _read(
    p: beam.Pipeline,
    plan: RecordPlan,
    *,
    staged: StagedPlan | None,
    planning: PlanInJob | None,
) -> tuple[Any, beam.PCollection, Mapping[str, int] | beam.PCollection, beam.PCollection | None]:
    """`build_pipeline`'s read: the read stage of the staged tasks or of the job's plan step;
    (its outputs, the refusals of planning, the shard counts, the plan step's (ReadWindowsConfig,
    Sharding) or None)."""
    out = plan.output_dir
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
        if "bad_rows" in planned_job:  # --annotations: bad table rows ({"path", "reason"})
            planned_errors = (planned_errors, planned_job["bad_rows"]) | "WithBadRows" >> (
                beam.Flatten()
            )
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
    return read, planned_errors, num_shards, planned


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


def describe_job(
    plan: RecordPlan,
    *,
    options: JobOptions,
    release: Callable[[], None],
    staged: StagedPlan | None = None,
    planning: PlanInJob | None = None,
    prior_moments: Mapping[str, Any] | None = None,
) -> RecordResult:
    """The job description only (a Dataflow template): the pipeline built from `plan` and
    `staged` or `planning` and `prior_moments` (as `build_pipeline` takes them) and translated,
    nothing run; the output directory holds only the staged lists. `release` forgets them once
    translated."""
    try:
        p = beam.Pipeline(options=options)
        build_pipeline(p, plan, staged=staged, planning=planning, prior_moments=prior_moments)
        p.run()
    finally:
        release()
    return RecordResult.job_description_only(plan.output_dir)
