"""The plan made batch by batch, without every file in one list (`pipelines.plan.in_job`).

A batch of files with their headers read -> its `HeaderSummary`; the summaries merged (in any
order) -> `plan_summary`: the dtype, the checks, the shard counts and where each batch's rows
start (`TaskCut`) -> each batch cut into its (task id, segment) pieces (`cut_batch`): together,
the read tasks `pipelines.plan.sizing.plan_headers` makes of every file at once (pure).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from operator import attrgetter, itemgetter
from typing import Any

from pipelines.config import RecordConfig, UsageError
from pipelines.plan import annotated
from pipelines.plan.checks import checked_dtype
from pipelines.plan.sizing import rows_counter, shapes_at, sized, windows_config
from pipelines.plan.tasks import (
    BatchRows,
    RowsBefore,
    batch_rows,
    cut_segments,
    plan_segments,
    rows_before,
)
from pipelines.plan.types import ScannedInputs
from transforms.audio.annotations import RowError
from transforms.audio.dtypes import NAMED_FILES
from transforms.audio.wav import WavInfo
from transforms.spec.types import (
    FileAnnotation,
    InputFile,
    ReadTask,
    ReadWindowsConfig,
    Segment,
    Sharding,
)


@dataclasses.dataclass(frozen=True)
class HeaderSummary:
    """What the plan needs of one or more batches of files with their headers read
    (`summarize_headers`, `merge_summaries`): no per-file list.

    Attributes:
      batches: each batch's planned rows (`pipelines.plan.tasks.BatchRows`).
      headers: (format, files with it, (index, path) of its first `NAMED_FILES` files) of
        every distinct format: a header without its length (`_format`), all the signal-dtype
        rule reads (a refusal names the first files), so files of any lengths share one.
      first_bad: (index, path, reason) of the first file refused (``--strict``), or None.
      first_header: (index, header) of the first file with a header (feature shapes), or None.
      frames: (sample rate, frames) of the files with a header (their seconds of audio).
      max_events: ``--annotations``: the most events one row of the files has.
    """

    batches: tuple[BatchRows, ...] = ()
    headers: tuple[tuple[WavInfo, int, tuple[tuple[int, str], ...]], ...] = ()
    first_bad: tuple[int, str, str] | None = None
    first_header: tuple[int, WavInfo] | None = None
    frames: tuple[tuple[int, int], ...] = ()
    max_events: int = 0


@dataclasses.dataclass(frozen=True)
class TaskCut:
    """How each batch of the in-job plan cuts its files into read tasks (`plan_summary`).

    Attributes:
      read: the run's read-stage config (the signal dtype resolved).
      sharding: the run's sharding, with its shard counts.
      rows_per_task: rows of a read task (the last one the rest).
      starts: the rows kept before each batch, by the batch's first file index.
      single_task: every segment goes to task 0 (`one_task`).
    """

    read: ReadWindowsConfig
    sharding: Sharding
    rows_per_task: int
    starts: Mapping[int, RowsBefore]
    single_task: bool


def summarize_headers(
    config: RecordConfig, listed: ScannedInputs, files: Sequence[InputFile]
) -> HeaderSummary:
    """A batch of consecutive files (index order) with their headers read -> its summary.

    Args:
      config: the run's options.
      listed: `list_inputs`' result (its sharding; its inputs are not looked at).
      files: the batch, headers read (`scan_headers`).
    """
    rows_of = rows_counter(windows_config(config, listed, {}))  # window, rate, channels
    usable = [f for f in files if f.error is None]
    rows = batch_rows(
        ((f.split, rows_of(f)) for f in usable),
        listed.sharding,
        first_index=files[0].index if files else 0,
    )
    headers: dict[WavInfo, tuple[int, list[tuple[int, str]]]] = {}
    frames: dict[int, int] = {}
    first_header = None
    for f in files:
        if f.info is None:
            continue
        key = _format(f.info)
        count, named = headers.get(key, (0, []))
        if len(named) < NAMED_FILES:
            named.append((f.index, f.path))
        headers[key] = (count + 1, named)
        if first_header is None:
            first_header = (f.index, f.info)
        if f.error is None and f.info.sample_rate:
            frames[f.info.sample_rate] = frames.get(f.info.sample_rate, 0) + f.info.num_frames
    bad = next((f for f in files if f.error), None)
    annotations = [f.annotation for f in usable if isinstance(f.annotation, FileAnnotation)]
    return HeaderSummary(
        batches=(rows,),
        headers=tuple((info, count, tuple(named)) for info, (count, named) in headers.items()),
        first_bad=None if bad is None else (bad.index, bad.path, bad.error),
        first_header=first_header,
        frames=tuple(frames.items()),
        max_events=max((int(a.num_events.max(initial=0)) for a in annotations), default=0),
    )


def merge_summaries(summaries: Iterable[HeaderSummary]) -> HeaderSummary:
    """Summaries of batches -> the summary of them all (in any order; the result's lists in a
    fixed order)."""
    batches: list[BatchRows] = []
    headers: dict[WavInfo, tuple[int, list[tuple[int, str]]]] = {}
    frames: dict[int, int] = {}
    bad, first, most = [], [], 0
    for s in summaries:
        batches.extend(s.batches)
        for info, count, named in s.headers:
            seen, names = headers.get(info, (0, []))
            headers[info] = (seen + count, sorted([*names, *named])[:NAMED_FILES])
        for rate, n in s.frames:
            frames[rate] = frames.get(rate, 0) + n
        bad += [s.first_bad] if s.first_bad else []
        first += [s.first_header] if s.first_header else []
        most = max(most, s.max_events)
    return HeaderSummary(
        batches=tuple(sorted(batches, key=attrgetter("first_index"))),
        headers=tuple(
            sorted(
                ((info, count, tuple(named)) for info, (count, named) in headers.items()),
                key=lambda h: h[2][0],
            )
        ),
        first_bad=min(bad, default=None),
        first_header=min(first, key=itemgetter(0), default=None),
        frames=tuple(sorted(frames.items())),
        max_events=most,
    )


def plan_summary(
    config: RecordConfig,
    listed: ScannedInputs,
    summary: HeaderSummary,
    *,
    cpu_count: int,
    single_task: bool,
    first_bad_row: RowError | None = None,
) -> TaskCut:
    """The plan of `listed` (`list_inputs`) from every batch's summary: what `plan_headers`
    decides before cutting the tasks, with the same checks in the same order (pure).
    ``--annotations``: `first_bad_row` is the first of every bad table row (``--strict``
    refuses it) and `max_events` the most of the summary's and the listing's.

    Raises:
      UsageError: what `check_inputs`, ``--strict`` with a bad row and `size_tasks` raise.
    """
    dtype = checked_dtype(config, _SummaryHeaders(summary.headers), summary.first_bad)
    if config.strict and first_bad_row is not None:
        raise UsageError(annotated.strict_refusal(first_bad_row))
    first = summary.first_header[1] if summary.first_header else None
    shapes = shapes_at(config, first)
    scanned = dataclasses.replace(listed, inputs=(), signal_dtype=dtype)
    if listed.max_events is not None:  # --annotations: the most events of a row of any file
        scanned = dataclasses.replace(
            scanned, max_events=max(listed.max_events, summary.max_events)
        )
    read_config = windows_config(config, scanned, shapes)
    starts, end = rows_before(summary.batches, listed.sharding)
    sharding, rows_per_task = sized(
        config,
        listed.sharding,
        dict(end.split_rows),
        shapes=shapes,
        signal_dtype=dtype,
        cpu_count=cpu_count,
    )
    return TaskCut(
        read=read_config,
        sharding=sharding,
        rows_per_task=rows_per_task,
        starts=starts,
        single_task=single_task,
    )


def summary_audio_ms(summary: HeaderSummary) -> int:
    """Milliseconds of audio in the summarised files with a header (exact, then rounded)."""
    return round(1000 * sum(Fraction(n, rate) for rate, n in summary.frames))


def cut_batch(
    config: RecordConfig, listed: ScannedInputs, files: Sequence[InputFile], cut: TaskCut
) -> Iterator[tuple[int, Segment]]:
    """A batch of consecutive files with their headers read (as `summarize_headers` saw it) ->
    (task id, segment) of its usable files, as `plan_headers` cuts them (task 0 when
    `cut.single_task`); a task's segments in file index and row order are the task."""
    if not files:
        return
    rows_of = rows_counter(windows_config(config, listed, {}))  # as `summarize_headers`
    max_events = cut.read.layout.max_events
    if listed.max_events is not None:  # --annotations: each file's events padded to the run's
        files = [
            f
            if f.error
            else dataclasses.replace(f, annotation=annotated.padded(f.annotation, max_events))
            for f in files
        ]
    before = cut.starts[files[0].index]
    segments = plan_segments(
        ((f, rows_of(f)) for f in files if f.error is None), listed.sharding, before=before
    )
    pieces = cut_segments(segments, rows_per_task=cut.rows_per_task, first_row=before.total)
    if listed.max_events is not None:  # each segment with its own rows only
        pieces = ((task_id, annotated.own_rows(seg)) for task_id, seg in pieces)
    if cut.single_task:
        yield from ((0, seg) for _, seg in pieces)
    else:
        yield from pieces


def read_task(task_id: int, segments: Iterable[Segment]) -> ReadTask:
    """The read task of `segments` (`cut_batch`'s pieces of one task id, in any order)."""
    ordered = sorted(segments, key=lambda seg: (seg.file.index, seg.row_start))
    return ReadTask(task_id, tuple(ordered))


def _format(info: WavInfo) -> WavInfo:
    """`info` without its length: one entry a format, however many lengths the files have."""
    return info if info.num_frames == 0 else dataclasses.replace(info, num_frames=0)


class _SummaryHeaders(Collection[tuple[str, Any]]):
    """(path, header) of every file with a header, from a `HeaderSummary`'s headers, for
    `resolve_signal_dtype`: each header's first files by name, in index order, then one
    unnamed entry per other file with that header (it names `NAMED_FILES` of the files it
    refuses, the first in index order, and counts the others)."""

    def __init__(self, headers: Sequence[tuple[WavInfo, int, tuple[tuple[int, str], ...]]]):
        self._headers = headers

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        named = sorted(
            (index, path, info) for info, _, names in self._headers for index, path in names
        )
        yield from ((path, info) for _, path, info in named)
        for info, count, names in self._headers:
            yield from itertools.repeat(("", info), count - len(names))

    def __len__(self) -> int:
        return sum(count for _, count, _ in self._headers)

    def __contains__(self, item: object) -> bool:
        return any(item == header for header in self)
