"""The record job's ``--annotations``: reading the tables, planning the files' windows.

Glue between planning (`pipelines.plan`; the options are fields of `pipelines.config.RecordConfig`)
and the pure planning of `transforms.record.annotation_plan`; the only I/O is reading the tables
through Beam's FileSystems.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from transforms.audio import annotations as ann
from transforms.audio.windows import WindowConfig
from transforms.record.annotation_plan import AnnotationConfig, AnnotationPlan, plan_annotations


def annotate(
    inputs: Sequence[Any],
    config: AnnotationConfig,
    *,
    window: WindowConfig,
    split_channels: bool,
    sample_rate: int | None,
    fixed_classes: tuple[str, ...] | None,
    split_base: str,
    strict: bool = False,
) -> tuple[tuple[Any, ...], AnnotationPlan]:
    """Reads the tables and gives every usable input (`transforms.record.file_rows.InputFile`) its
    windows.

    Raises:
      ValueError: no table, ``--classes`` without the background class, or (`strict`) the
        first bad row.
    """
    events, table_errors = read_tables(config)
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


def read_tables(config: AnnotationConfig) -> tuple[list[ann.Event], list[ann.RowError]]:
    """Reads every table `config.pattern` matches (local, gs://, ... through Beam's FileSystems).

    A table that cannot be read or decoded is one error; text is UTF-8 (a BOM is skipped), else
    Windows-1252 (what Raven on Windows writes).

    Raises:
      ValueError: the pattern matches no file.
    """
    from apache_beam.io.filesystems import FileSystems

    try:
        found = FileSystems.match([config.pattern])
    except Exception as e:  # noqa: BLE001 - Beam raises BeamIOError / ValueError by scheme
        raise ValueError(f"--annotations {config.pattern!r}: cannot list files ({e})") from e
    paths = sorted({m.path for r in found for m in r.metadata_list})
    if not paths:
        raise ValueError(f"--annotations {config.pattern!r} matches no file")
    events, errors = [], []
    for path in paths:
        try:
            with FileSystems.open(path, compression_type="uncompressed") as fh:
                data = fh.read()
        except Exception as e:  # noqa: BLE001 - an unreadable table is reported, never fatal
            errors.append(ann.RowError(path, None, f"cannot read ({type(e).__name__}: {e})"))
            continue
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = data.decode("cp1252", errors="replace")
        evs, errs = ann.read_table(
            text, source=path, fmt=config.fmt, label_column=config.label_column
        )
        events += evs
        errors += errs
    return events, errors
