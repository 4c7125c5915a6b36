"""The record job's ``--annotations``: the tables' events -> every input file's windows.

Glue between planning (`pipelines.plan`; the options are fields of `pipelines.config.RecordConfig`)
and the pure planning of `transforms.record.annotation_plan`. No I/O: the tables are read with
planning's other reads (`pipelines.inputs.read_annotation_tables`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from transforms.audio import annotations as ann
from transforms.audio.windows import WindowConfig
from transforms.planning.types import InputFile
from transforms.record.annotation_plan import AnnotationConfig, AnnotationPlan, plan_annotations


def annotate(
    inputs: Sequence[InputFile],
    config: AnnotationConfig,
    events: Sequence[ann.Event],
    table_errors: Sequence[ann.RowError],
    *,
    window: WindowConfig,
    split_channels: bool,
    sample_rate: int | None,
    fixed_classes: tuple[str, ...] | None,
    split_base: str,
    strict: bool = False,
) -> tuple[tuple[InputFile, ...], AnnotationPlan]:
    """Gives every usable input its windows, from the tables' `events` (`table_errors`: their
    bad rows).

    Raises:
      ValueError: ``--classes`` without the background class, or (`strict`) the first bad row.
    """
    usable = [f for f in inputs if f.error is None]
    plan = plan_annotations(
        [(f.path, f.info.num_frames, f.info.sample_rate, f.info.num_channels) for f in usable],
        events,
        table_errors,
        config=config,
        window=window,
        split_channels=split_channels,
        sample_rate=sample_rate,
        fixed_classes=fixed_classes,
        seed_keys={f.path: f.path.removeprefix(split_base) for f in usable},
    )
    if strict and plan.errors:
        raise ValueError(f"--strict: {plan.errors[0]['path']}: {plan.errors[0]['reason']}")
    annotated = tuple(
        f if f.error is not None else dataclasses.replace(f, annotation=plan.files[f.path])
        for f in inputs
    )
    return annotated, plan
