"""Planning a record run with ``--annotations``: tables -> events -> every file's windows.

At planning, in two steps: the listing (`pipelines.plan.listing.match_annotations`, no header read)
matches the tables' events to the input files and fixes the class list (`match_tables`); once a
file's header is read, its events are checked against its duration and channels and its windows
fixed with their labels (`file_rows`, `annotate_file`: in the launcher for every file, `annotate`,
or in the job's plan step batch by batch, `pipelines.plan.in_job`), the events padded to the run's
most a row (`padded`) into its `FileAnnotation`: the grid windows (without the background ones under
``--drop_background``) or, with ``--event_windows centered``, one window centred on each event plus
``--background_per_file`` seeded background windows. The read stage then cuts exactly those windows
(`transforms.audio.annotation_windows.cut_at`) and adds their columns
(`transforms.spec.annotation_columns`). Bad rows become manifest ``errors`` entries (``path`` =
``<table>:<line>``) and never stop the job; per-file statistics go to ``files[].annotation``
(`transforms.audio.annotation_stats`).

Keys added to every element of an annotated run:

- ``labels``: float32 [num_classes], multi-hot over the class list (the sorted labels of every
  matched row, even one refused for its file, plus the background class);
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

from pipelines.config import AnnotationConfig, RecordConfig
from pipelines.plan.types import ScannedInputs
from transforms.audio import annotation_windows as aw
from transforms.audio import annotations as ann
from transforms.audio.annotation_stats import Row, file_summary
from transforms.audio.windows import WindowConfig, window_starts
from transforms.spec.types import FileAnnotation, FileEvents, InputFile

MULTI_LABEL_JOIN = "+"


@dataclasses.dataclass(frozen=True)
class AnnotationPlan:
    """Per-file annotations (by input path), the class list, bad rows, and `max_events`."""

    files: Mapping[str, FileAnnotation]
    classes: tuple[str, ...]
    errors: tuple[dict[str, str], ...]
    max_events: int


@dataclasses.dataclass(frozen=True)
class MatchedTables:
    """The tables' rows matched to the listed inputs, before any header is read
    (`match_tables`).

    Attributes:
      events: {input path: its events in table order} (only the paths some row names).
      classes: the class list: ``--classes``, or every label of a matched row and the
        background class (unless dropped), sorted.
      errors: the rows refused without a header: unreadable, unknown or ambiguous file.
    """

    events: Mapping[str, tuple[ann.Event, ...]]
    classes: tuple[str, ...]
    errors: tuple[ann.RowError, ...]


@dataclasses.dataclass(frozen=True)
class FileRows:
    """One file's windows and rows once its header is known (`file_rows`), before its events
    are padded to the run's `max_events`.

    Attributes:
      starts: int64 [n] the kept window starts (output-rate samples).
      rows: (labels, events) per row, in (window, channel) order.
      summary: the file's annotation statistics (`annotation_stats.file_summary`).
      errors: its rows refused for the file's duration, channels, ``--classes``, or because
        the file itself is refused.
    """

    starts: np.ndarray
    rows: list[Row]
    summary: Mapping[str, Any]
    errors: tuple[ann.RowError, ...]

    @property
    def most_events(self) -> int:
        """The most events one row of the file has."""
        return max((len(evs) for _, evs in self.rows), default=0)


def output_frames(num_frames: int, rate: int, target: int | None) -> int:
    """Frames after resampling to `target` (scipy resample_poly: ceil(n * up / down))."""
    if not target or target == rate:
        return num_frames
    g = gcd(rate, target)
    return -(-num_frames * (target // g) // (rate // g))


def match_tables(
    paths: Sequence[str],
    events: Sequence[ann.Event],
    table_errors: Sequence[ann.RowError],
    *,
    config: AnnotationConfig,
    fixed_classes: tuple[str, ...] | None = None,
) -> MatchedTables:
    """Matches the tables' `events` to the input `paths` and fixes the class list: no header is
    needed, so the launcher of a run planned in the job does it too (pure).

    The class list holds every label of a matched row, even a row later refused for its file's
    duration or channels, or because its file is refused: it depends on the tables and the
    listing only, never on which files read.

    Raises:
      ValueError: ``--classes`` without the background class.
    """
    rule = config.rule
    matched, errors = ann.match_events(events, paths)
    background = None if rule.drop_background else rule.background_class
    classes = fixed_classes or ann.event_classes(matched, background_class=background)
    if background is not None and background not in classes:
        raise ValueError(f"--classes must list the background class {background!r}")
    return MatchedTables(
        events={path: tuple(evs) for path, evs in matched.items()},
        classes=tuple(classes),
        errors=(*table_errors, *errors),
    )


def file_rows(
    path: str,
    events: Sequence[ann.Event],
    *,
    header: tuple[int, int, int] | None,
    error: str | None,
    config: AnnotationConfig,
    window: WindowConfig,
    split_channels: bool,
    sample_rate: int | None,
    fixed_classes: tuple[str, ...] | None,
    seed_key: str,
) -> FileRows:
    """One file's events (`match_tables`) checked against its header and cut into its windows
    and rows (pure). A refused file (`error`) has no row; its events are bad rows.

    Args:
      path: the input file; `events` its matched events.
      header: its (num_frames, sample_rate, num_channels) (None when refused); `error` why it
        is refused (None: usable).
      config: the annotation options; `window` the window rule.
      split_channels: ``--channel_mode split`` (a row per channel).
      sample_rate: ``--sample_rate`` (None: the file's own).
      fixed_classes: ``--classes`` (an event label outside it is a bad row).
      seed_key: what its background windows are seeded with (the path relative to the input
        pattern, as for splits).
    """
    if error is not None or header is None:
        reason = f"audio file {path} is refused: {error}"
        bad = tuple(ann.RowError(e.source, e.line, reason) for e in events)
        return FileRows(np.zeros(0, np.int64), [], {}, bad)
    frames, rate, channels = header
    kept, bad = ann.check_events(events, num_frames=frames, sample_rate=rate, num_channels=channels)
    if fixed_classes is not None:
        bad += [_not_a_class(e) for e in kept if e.label not in fixed_classes]
        kept = [e for e in kept if e.label in fixed_classes]
    out_rate = sample_rate or rate
    starts = file_starts(
        kept,
        num_frames=output_frames(frames, rate, sample_rate),
        sample_rate=out_rate,
        window=window,
        config=config,
        seed_key=f"{config.seed}:{seed_key}",
    )
    starts, rows = label_rows(
        kept,
        starts,
        sample_rate=out_rate,
        win_len=window.win_len,
        channels=channels if split_channels else 1,
        rule=config.rule,
    )
    return FileRows(starts, rows, file_summary(kept, rows), tuple(bad))


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


def file_annotation(rows: FileRows, classes: Sequence[str], max_events: int) -> FileAnnotation:
    """A file's `FileAnnotation` from its `file_rows`, its events padded to `max_events` rows
    (at least its `most_events`)."""
    events, counts = aw.events_array([e for _, e in rows.rows], classes, max_events=max_events)
    return FileAnnotation(
        starts=rows.starts.astype(np.int64),
        channels=len(rows.rows) // len(rows.starts) if len(rows.starts) else 1,
        classes=tuple(MULTI_LABEL_JOIN.join(labels) for labels, _ in rows.rows),
        labels=aw.multi_hot([labels for labels, _ in rows.rows], classes),
        events=events,
        num_events=counts,
        summary=rows.summary,
    )


def padded(annotation: FileAnnotation, max_events: int) -> FileAnnotation:
    """`annotation` with its events padded with -1 to `max_events` rows (at least its own):
    what `file_annotation` gives with that `max_events`."""
    have = annotation.events.shape[1]
    if have == max_events:
        return annotation
    if have > max_events:
        raise ValueError(f"{have} events in a row, more than max_events {max_events}")
    events = np.full((annotation.events.shape[0], max_events, 3), -1, np.int64)
    events[:, :have] = annotation.events
    return dataclasses.replace(annotation, events=events)


def _not_a_class(e: ann.Event) -> ann.RowError:
    return ann.RowError(e.source, e.line, f"label {e.label!r} is not in --classes")


def row_order(e: ann.RowError) -> tuple[str, int]:
    """The order bad rows are listed in (and ``--strict`` names the first of): table, line."""
    return e.source, e.line or 0


def segment_tasks(tasks: Sequence[Any]) -> tuple[Any, ...]:
    """Read tasks whose annotated segments carry only their own rows (smaller to ship).

    Every task is pickled on its own: a 2-hour file with 5,000 events in 74 tasks would carry
    its whole annotation (2.4 MB) 74 times.
    """
    if all(seg.file.annotation is None for t in tasks for seg in t.segments):
        return tuple(tasks)  # no --annotations: the tasks as planned
    return tuple(
        dataclasses.replace(t, segments=tuple(own_rows(seg) for seg in t.segments)) for t in tasks
    )


def own_rows(seg: Any) -> Any:
    """A segment whose file's annotation holds only the segment's rows."""
    annotation = seg.file.annotation
    if annotation is None:
        return seg
    held = annotation.rows(seg.row_start, seg.row_stop)
    return dataclasses.replace(seg, file=dataclasses.replace(seg.file, annotation=held))


def annotate_file(
    f: InputFile, *, config: RecordConfig, listed: ScannedInputs
) -> tuple[InputFile, tuple[ann.RowError, ...]]:
    """A listed file with its header read (`annotation`: its `FileEvents` or None) -> the file
    with its `FileAnnotation` (events padded to its own most; None when refused) and its bad
    rows (`file_rows`), by the run's options and its listing's class list."""
    events = f.annotation.events if isinstance(f.annotation, FileEvents) else ()
    info = f.info
    rows = file_rows(
        f.path,
        events,
        header=None if info is None else (info.num_frames, info.sample_rate, info.num_channels),
        error=f.error,
        config=config.annotation_config,
        window=config.window,
        split_channels=config.channel_mode == "split",
        sample_rate=config.sample_rate,
        fixed_classes=listed.fixed_classes,
        seed_key=f.path.removeprefix(listed.sharding.split_base),
    )
    if f.error is not None or info is None:
        return dataclasses.replace(f, annotation=None), rows.errors
    annotation = file_annotation(rows, listed.classes, rows.most_events)
    return dataclasses.replace(f, annotation=annotation), rows.errors


def annotate(
    inputs: Sequence[InputFile], *, config: RecordConfig, listed: ScannedInputs
) -> tuple[tuple[InputFile, ...], AnnotationPlan]:
    """Gives every usable input its windows once the headers are read (the launcher's plan):
    `annotate_file` of each, padded to the most events of a row (at least 1). `listed` is the
    listing the `inputs` come from (`pipelines.plan.listing.match_annotations`: each input's
    `FileEvents`, the class list, the bad rows found without a header).

    Raises:
      ValueError: ``--strict`` and a bad row: the first.
    """
    annotated, errors = [], list(listed.table_errors)
    for f in inputs:
        done, bad = annotate_file(f, config=config, listed=listed)
        annotated.append(done)
        errors += bad
    errors.sort(key=row_order)
    if config.strict and errors:
        raise ValueError(strict_refusal(errors[0]))
    usable = [f.annotation for f in annotated if f.annotation is not None]
    max_events = max([int(a.num_events.max(initial=0)) for a in usable] + [1])
    padded_files = tuple(
        f
        if f.annotation is None
        else dataclasses.replace(f, annotation=padded(f.annotation, max_events))
        for f in annotated
    )
    plan = AnnotationPlan(
        files={f.path: f.annotation for f in padded_files if f.annotation is not None},
        classes=tuple(listed.classes),
        errors=tuple(e.to_manifest() for e in errors),
        max_events=max_events,
    )
    return padded_files, plan


def strict_refusal(first: ann.RowError) -> str:
    """The one line ``--strict`` refuses a run with, naming its first bad row."""
    entry = first.to_manifest()
    return f"--strict: {entry['path']}: {entry['reason']}"
