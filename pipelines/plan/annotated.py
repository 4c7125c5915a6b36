"""Planning a record run with ``--annotations``: tables -> events -> every file's windows.

At planning (launcher side, after the WAV headers are read; `pipelines.plan.reads` reads the
tables, `annotate` hands them over), `plan_annotations` matches the events to the input files,
checks them against each file's duration and channels, and fixes every file's
windows with their labels (`FileAnnotation`): the grid windows (without the background ones
under ``--drop_background``) or, with ``--event_windows centered``, one window centred on each
event plus ``--background_per_file`` seeded background windows. The read stage then cuts exactly
those windows (`transforms.audio.annotation_windows.cut_at`) and adds their columns
(`transforms.spec.annotation_columns`). Bad rows become manifest ``errors`` entries (``path`` =
``<table>:<line>``) and never stop the job; per-file statistics go to ``files[].annotation``
(`transforms.audio.annotation_stats`).

Keys added to every element of an annotated run:

- ``labels``: float32 [num_classes], multi-hot over the class list (sorted event labels plus the
  background class);
- ``events``: int64 [max_events, 3], (start, end, class id) of every event overlapping the
  window, start/end in samples relative to the window start (not clipped), padded with -1;
  ``max_events`` is the most any recorded window has;
- ``num_events``: int64 [], how many rows of ``events`` are real;
- ``class``: the window's label, or its labels joined with ``+`` when it has several (then
  ``target`` is -1: use ``labels``).

Under ``--channel_mode split`` an event with a channel labels only that channel's rows, and a
window is dropped by ``--drop_background`` only when no channel has a label.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from math import gcd
from typing import Any

import numpy as np

from pipelines.config import AnnotationConfig
from transforms.audio import annotation_windows as aw
from transforms.audio import annotations as ann
from transforms.audio.annotation_stats import Row, file_summary
from transforms.audio.windows import WindowConfig, window_starts
from transforms.spec.types import FileAnnotation, InputFile

MULTI_LABEL_JOIN = "+"


@dataclasses.dataclass(frozen=True)
class AnnotationPlan:
    """Per-file annotations (by input path), the class list, bad rows, and `max_events`."""

    files: Mapping[str, FileAnnotation]
    classes: tuple[str, ...]
    errors: tuple[dict[str, str], ...]
    max_events: int


def output_frames(num_frames: int, rate: int, target: int | None) -> int:
    """Frames after resampling to `target` (scipy resample_poly: ceil(n * up / down))."""
    if not target or target == rate:
        return num_frames
    g = gcd(rate, target)
    return -(-num_frames * (target // g) // (rate // g))


def plan_annotations(
    files: Sequence[tuple[str, int, int, int]],
    events: Sequence[ann.Event],
    table_errors: Sequence[ann.RowError],
    *,
    config: AnnotationConfig,
    window: WindowConfig,
    split_channels: bool,
    sample_rate: int | None = None,
    fixed_classes: tuple[str, ...] | None = None,
    seed_keys: Mapping[str, str] | None = None,
) -> AnnotationPlan:
    """Matches events to files and fixes every file's windows and label columns (pure).

    Args:
      files: (path, num_frames, sample_rate, num_channels) of every usable input file.
      events: every event read from the tables; `table_errors` their bad rows.
      config: the annotation options.
      window: the window rule (length, hop, pad, max windows per signal).
      split_channels: ``--channel_mode split`` (a row per channel).
      sample_rate: ``--sample_rate`` (None: each file's own).
      fixed_classes: ``--classes`` (an event label outside it is a bad row).
      seed_keys: {path: the key its background windows are seeded with} (default: the path;
        the record job passes the path relative to the input pattern, as for splits).

    Raises:
      ValueError: ``--classes`` without the background class.
    """
    rule = config.rule
    matched, errors = ann.match_events(events, [p for p, *_ in files])
    errors = list(table_errors) + errors
    checked: dict[str, list[ann.Event]] = {}
    for path, frames, rate, channels in files:
        kept, bad = ann.check_events(
            matched.get(path, []), num_frames=frames, sample_rate=rate, num_channels=channels
        )
        if fixed_classes is not None:
            bad += [_not_a_class(e) for e in kept if e.label not in fixed_classes]
            kept = [e for e in kept if e.label in fixed_classes]
        checked[path] = kept
        errors += bad
    background = None if rule.drop_background else rule.background_class
    classes = fixed_classes or ann.event_classes(checked, background_class=background)
    if background is not None and background not in classes:
        raise ValueError(f"--classes must list the background class {background!r}")
    rows = {}
    for path, frames, rate, channels in files:
        out_rate = sample_rate or rate
        key = (seed_keys or {}).get(path, path)
        starts = file_starts(
            checked[path],
            num_frames=output_frames(frames, rate, sample_rate),
            sample_rate=out_rate,
            window=window,
            config=config,
            seed_key=f"{config.seed}:{key}",
        )
        rows[path] = label_rows(
            checked[path],
            starts,
            sample_rate=out_rate,
            win_len=window.win_len,
            channels=channels if split_channels else 1,
            rule=rule,
        )
    max_events = max([len(evs) for _, r in rows.values() for _, evs in r] + [1])
    return AnnotationPlan(
        files={
            p: _file_annotation(s, r, classes, max_events, file_summary(checked[p], r))
            for p, (s, r) in rows.items()
        },
        classes=tuple(classes),
        errors=tuple(e.to_manifest() for e in sorted(errors, key=_row_order)),
        max_events=max_events,
    )


def file_starts(
    events: Sequence[ann.Event],
    *,
    num_frames: int,
    sample_rate: int,
    window: WindowConfig,
    config: AnnotationConfig,
    seed_key: str,
) -> np.ndarray:
    """The sorted, unique window starts of one file, before background windows are dropped."""
    if config.event_windows == "grid":
        return window_starts(num_frames, window)
    centred = aw.centered_starts(
        events, sample_rate=sample_rate, win_len=window.win_len, num_frames=num_frames
    )
    background = aw.background_starts(
        events,
        sample_rate=sample_rate,
        win_len=window.win_len,
        num_frames=num_frames,
        count=config.background_per_file,
        seed_key=seed_key,
    )
    starts = np.unique(np.concatenate([centred, background]))
    return starts if window.max_windows is None else starts[: window.max_windows]


def label_rows(
    events: Sequence[ann.Event],
    starts: np.ndarray,
    *,
    sample_rate: int,
    win_len: int,
    channels: int,
    rule: aw.LabelRule,
) -> tuple[np.ndarray, list[Row]]:
    """(kept starts, rows in (window, channel) order) after the rule and background dropping."""
    per_channel = []
    for c in range(channels):
        evs = events if channels == 1 else [e for e in events if e.channel in (None, c)]
        per_channel.append(
            aw.label_windows(
                starts, win_len=win_len, sample_rate=sample_rate, events=evs, rule=rule
            )
        )
    keep = np.logical_or.reduce([w.keep for w in per_channel])
    rows = [(w.labels[i], w.events[i]) for i in np.flatnonzero(keep) for w in per_channel]
    return starts[keep], rows


def _file_annotation(
    starts: np.ndarray,
    rows: list[Row],
    classes: Sequence[str],
    max_events: int,
    summary: Mapping[str, Any],
) -> FileAnnotation:
    events, counts = aw.events_array([e for _, e in rows], classes, max_events=max_events)
    return FileAnnotation(
        starts=starts.astype(np.int64),
        channels=len(rows) // len(starts) if len(starts) else 1,
        classes=tuple(MULTI_LABEL_JOIN.join(labels) for labels, _ in rows),
        labels=aw.multi_hot([labels for labels, _ in rows], classes),
        events=events,
        num_events=counts,
        summary=summary,
    )


def _not_a_class(e: ann.Event) -> ann.RowError:
    return ann.RowError(e.source, e.line, f"label {e.label!r} is not in --classes")


def _row_order(e: ann.RowError) -> tuple[str, int]:
    return e.source, e.line or 0


def segment_tasks(tasks: Sequence[Any]) -> tuple[Any, ...]:
    """Read tasks whose annotated segments carry only their own rows (smaller to ship).

    Every task is pickled on its own: a 2-hour file with 5,000 events in 74 tasks would carry
    its whole annotation (2.4 MB) 74 times.
    """
    if all(seg.file.annotation is None for t in tasks for seg in t.segments):
        return tuple(tasks)  # no --annotations: the tasks as planned
    return tuple(
        dataclasses.replace(t, segments=tuple(_own_rows(seg) for seg in t.segments)) for t in tasks
    )


def _own_rows(seg: Any) -> Any:
    annotation = seg.file.annotation
    if annotation is None:
        return seg
    held = annotation.rows(seg.row_start, seg.row_stop)
    return dataclasses.replace(seg, file=dataclasses.replace(seg.file, annotation=held))


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
