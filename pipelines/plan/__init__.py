"""Planning a record run: validate options, match inputs, decide shards — before any work.

Everything here happens in the launcher, fails fast with one clear line (`UsageError`), and
produces a frozen `RecordPlan` the pipeline is built from, in three steps:

1. validate: building the `pipelines.config.RecordConfig` checks every option (no I/O);
2. `scan_inputs`: match the files, read labels and headers (and annotation tables), check the
   output directory: everything planning learns from storage (`ScannedInputs`; the reads
   themselves are in `pipelines.inputs`), in two parts: `list_inputs` (no request a file)
   and `read_headers`; a plain run does the second in the job, batch by batch
   (`summarize_headers`, `plan_summary`, `cut_batch`: `pipelines.job_plan`);
3. `size_tasks`: feature shapes, shard counts and read tasks, a pure function of the two.

`one_task` then puts the read tasks' segments into one task when the runner runs tasks one at
a time (the in-memory DirectRunner; `pipelines.job` asks `runners.sequential_tasks`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import operator
import os
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from operator import attrgetter, itemgetter
from typing import Any

from pipelines.config import RecordConfig, UsageError, require
from pipelines.inputs import (
    match_inputs,  # noqa: F401 - planning's listing, imported from here by tests
    match_stamped,
    output_dir_state,
    read_annotation_tables,
    read_classes_file,
    read_csv_labels,
    scan_headers,
)
from replay import format as fmt
from replay.manifest import MAX_VALUES_PER_KEY
from transforms.audio import features as feats
from transforms.audio import labels
from transforms.audio.dtypes import NAMED_FILES
from transforms.audio.dtypes import resolve as resolve_signal_dtype
from transforms.audio.wav import WavInfo
from transforms.planning import annotation_plan
from transforms.planning.layout import RecordLayout
from transforms.planning.sharding import (
    BatchRows,
    RowsBefore,
    batch_rows,
    cut_segments,
    merge_tasks,
    pattern_base,
    plan_num_shards,
    plan_segments,
    plan_tasks,
    rows_before,
    split_of,
    split_rows,
    split_shard_counts,
)
from transforms.planning.types import InputFile, ReadTask, ReadWindowsConfig, Segment, Sharding
from transforms.stages.file_rows import planned_rows

TASK_BYTES = 32 << 20  # 32 MiB of stored elements per read task, at most ...
TASKS_PER_CORE = 4  # ... and at least 4 tasks per core when there is enough data ...
MIN_TASK_ROWS = 64  # ... but never tasks of fewer than 64 elements
_ITEMSIZE = {"int16": 2, "int32": 4, "float32": 4, "float64": 8}  # signal dtypes
# plan_segments: [(file, rows kept, split rank of row 0)]
PlannedRows = list[tuple[InputFile, int, int]]


@dataclasses.dataclass(frozen=True)
class RecordPlan:
    """A validated run: inputs, configs and shard count."""

    output_dir: str
    name: str
    inputs: tuple[InputFile, ...]  # every matched file; `error` set on the unusable ones
    read: ReadWindowsConfig
    compression: str
    sharding: Sharding  # with the shard count per split
    tasks: tuple[ReadTask, ...]
    input_bytes: int
    params: Mapping[str, Any]
    classes: tuple[str, ...] = ()  # the class list in `target` order (labels.run_classes)
    analyzed_splits: tuple[str, ...] = (fmt.ALL_SPLIT,)  # splits TFT's statistics come from
    annotation_errors: tuple[dict, ...] = ()  # --annotations: bad table rows (manifest errors)
    input_stamps: tuple[tuple[str, int, float], ...] = ()  # (path, size, mtime): pipelines.resume


@dataclasses.dataclass(frozen=True)
class ScannedInputs:
    """What planning learns from storage (`scan_inputs`), before sizing the work."""

    output_dir: str  # without a trailing "/"
    inputs: tuple[InputFile, ...]  # headers read (`info`), or `error` set
    classes: tuple[str, ...]  # the class list in `target` order
    sharding: Sharding  # splits and classes; no shard counts yet
    signal_dtype: str  # resolved: holds every usable file exactly
    max_events: int | None = None  # --annotations: most events in one window (None: no tables)
    annotation_errors: tuple[dict, ...] = ()  # --annotations: bad table rows
    stamps: tuple[tuple[str, int, float], ...] = ()  # (path, size, mtime) of every match
    fixed_classes: tuple[str, ...] | None = None  # --classes, parsed


@dataclasses.dataclass(frozen=True)
class Continuation:
    """The dataset an ``--append`` run adds to (`pipelines.append`), as planning needs it."""

    first_index: int  # the first new file's `index`: after every index the dataset gave
    split_base: str  # the prefix the dataset's own paths were hashed into splits without
    known: frozenset[str]  # the inputs the dataset holds (files and errors): not planned
    # --append_transform refresh: the dataset's {feature: Moments}, in the new statistics
    prior_moments: Mapping[str, Any] | None = None


def plan_record(
    config: RecordConfig | Any,
    *,
    shard_func: Callable[[dict], int] | None = None,
    continuation: Continuation | None = None,
) -> RecordPlan:
    """Validates the options, scans the inputs and sizes the work.

    Args:
      config: the run's `RecordConfig` (or parsed options, e.g. a `RecordOptions` view).
      shard_func: optional element -> shard index callable (Python API).
      continuation: with ``--append``, the dataset the run adds to.

    Raises:
      UsageError: the first problem found, as one line naming the option.
    """
    if not isinstance(config, RecordConfig):
        config = RecordConfig.from_namespace(config)  # validates
    scanned = scan_inputs(config, shard_func=shard_func, continuation=continuation)
    return size_tasks(config, scanned, cpu_count=os.cpu_count() or 1)


def scan_inputs(
    config: RecordConfig,
    *,
    shard_func: Callable[[dict], int] | None = None,
    continuation: Continuation | None = None,
) -> ScannedInputs:
    """Matches the inputs, reads their labels and headers, checks the output directory.

    `list_inputs`, then `read_headers`: all of planning's I/O.
    """
    listed = list_inputs(config, shard_func=shard_func, continuation=continuation)
    return read_headers(config, listed)


def list_inputs(
    config: RecordConfig,
    *,
    shard_func: Callable[[dict], int] | None = None,
    continuation: Continuation | None = None,
) -> ScannedInputs:
    """Matches the inputs and labels them: no request a file (the class list file, the
    listing, the label CSV).

    With a `continuation` (``--append``) the inputs the dataset holds are left out, the others
    are numbered after its own and split by its rule. The result's inputs have no header and
    its `signal_dtype` is empty (`read_headers` reads and resolves them).

    Raises:
      UsageError: no input, an unreadable class list or label CSV.
    """
    try:
        fixed_classes = labels.parse_classes(config.classes, read_text=read_classes_file)
    except ValueError as e:
        raise UsageError(str(e)) from e
    stamps = tuple(match_stamped(config.input_pattern))
    if continuation is not None:
        stamps = tuple(s for s in stamps if s[0] not in continuation.known)
    require(bool(stamps), f"--input_pattern {config.input_pattern!r} matches no file")
    _, csv_path = labels.parse_label_source(config.label_source)
    csv_labels = read_csv_labels(csv_path) if csv_path else None
    sharding = Sharding(
        shard_by=config.shard_by,
        splits=config.split_weights,
        split_base=(
            pattern_base(config.input_pattern) if continuation is None else continuation.split_base
        ),
        elements_per_shard=config.elements_per_shard,
        max_elements=config.max_elements,
        shard_func=shard_func,
    )
    labelled = label_inputs(
        stamps,
        config,
        csv_labels=csv_labels,
        fixed_classes=fixed_classes,
        sharding=sharding,
        first_index=0 if continuation is None else continuation.first_index,
    )
    # (label, error), each once
    pairs = set(zip(map(_LABEL, labelled), map(_ERROR, labelled), strict=True))
    classes = labels.run_classes((label for label, error in pairs if error is None), fixed_classes)
    sharding = dataclasses.replace(
        sharding, classes=tuple(sorted({label for label, _ in pairs if label}))
    )
    return ScannedInputs(
        output_dir=config.output_dir.rstrip("/") or "/",
        inputs=tuple(labelled),
        classes=classes,
        sharding=sharding,
        signal_dtype="",
        stamps=stamps,
        fixed_classes=fixed_classes,
    )


def read_headers(config: RecordConfig, listed: ScannedInputs) -> ScannedInputs:
    """`listed` (`list_inputs`) with every file's header read and the signal dtype resolved;
    checks the output directory and reads the annotation tables.

    Raises:
      UsageError: no dtype for every file, a bad file with ``--strict``, an output directory
        we may not replace, bad tables.
    """
    inputs = scan_headers(list(listed.inputs))
    dtype = check_inputs(config, inputs)
    check_output_dir(config, listed.output_dir, output_dir_state(listed.output_dir))
    scanned = dataclasses.replace(listed, inputs=inputs, signal_dtype=dtype)
    annotated = config.annotation_config
    if annotated is None:
        return scanned
    try:  # every file's windows and labels, from the tables
        events, table_errors = read_annotation_tables(annotated)
        inputs, notes = annotation_plan.annotate(
            inputs,
            annotated,
            events,
            table_errors,
            window=config.window,
            split_channels=config.channel_mode == "split",
            sample_rate=config.sample_rate,
            fixed_classes=listed.fixed_classes,
            split_base=listed.sharding.split_base,
            strict=config.strict,
        )
    except ValueError as e:
        raise UsageError(str(e)) from e
    return dataclasses.replace(
        scanned,
        inputs=inputs,
        classes=notes.classes,
        max_events=notes.max_events,
        annotation_errors=notes.errors,
    )


def plan_headers(
    config: RecordConfig,
    listed: ScannedInputs,
    inputs: tuple[InputFile, ...],
    *,
    cpu_count: int,
    single_task: bool,
) -> RecordPlan:
    """The plan of `listed` (`list_inputs`) once its files' headers are read (`inputs`, in
    index order): the signal dtype, shard counts and read tasks, as `read_headers` and
    `size_tasks` make them (pure; `one_task` when `single_task`). The record job's plan step
    (`pipelines.job_plan`) makes the same plan batch by batch, without every file in one list
    (`summarize_headers`, `merge_summaries`, `plan_summary`, `cut_batch`, `read_task`).

    Raises:
      UsageError: what `check_inputs` and `size_tasks` raise.
    """
    dtype = check_inputs(config, inputs)
    scanned = dataclasses.replace(listed, inputs=inputs, signal_dtype=dtype)
    plan = size_tasks(config, scanned, cpu_count=cpu_count)
    return one_task(plan) if single_task else plan


def launcher_windows_config(config: RecordConfig, listed: ScannedInputs) -> ReadWindowsConfig:
    """The read configuration the launcher can know without reading every header: the
    feature shapes at ``--sample_rate`` or the first readable file's rate (a header read per
    file tried, in index order, until one reads); the signal dtype is ``--signal_dtype`` as
    given (the plan step resolves ``auto``)."""
    first: tuple[InputFile, ...] = ()
    if config.feature_names and not config.sample_rate:
        for f in listed.inputs:
            if f.error is None:
                (headed,) = scan_headers([f])
                if headed.info is not None:
                    first = (headed,)
                    break
    shapes = _feature_shapes(config, first)
    scanned = dataclasses.replace(listed, signal_dtype=config.signal_dtype)
    return _windows_config(config, scanned, shapes)


def label_inputs(
    matched: Sequence[tuple[str, int] | tuple[str, int, float]],
    config: RecordConfig,
    *,
    csv_labels: Mapping[str, str] | None,
    fixed_classes: tuple[str, ...] | None,
    sharding: Sharding,
    first_index: int = 0,
) -> list[InputFile]:
    """(path, size[, modification time]) -> `InputFile`s with index (from `first_index`),
    label and split (pure).

    Class ids come from every usable label, known here: never from the data. A file without a
    label, or whose label is outside ``--classes`` (unless ``--unknown_class keep``), gets its
    `error`. With ``--annotations`` the labels come from the tables later: every label is "".
    """
    kind, _ = labels.parse_label_source(config.label_source)
    if matched and set(map(len, matched)) == {3}:  # (path, size, time) each: as columns
        paths, sizes, times = map(list, zip(*matched, strict=True))
        modified = times if set(map(type, times)) == {float} else list(map(float, times))
    else:
        paths = [stamp[0] for stamp in matched]
        sizes = [stamp[1] for stamp in matched]
        modified = [float(stamp[2]) if len(stamp) > 2 else 0.0 for stamp in matched]
    indexes = range(first_index, first_index + len(paths))
    one_split = None if sharding.splits else fmt.ALL_SPLIT  # else hashed from each path
    splits = itertools.repeat(one_split) if one_split else [split_of(p, sharding) for p in paths]
    if config.annotations:  # the tables label the files
        return list(
            map(
                InputFile,
                indexes,
                paths,
                sizes,
                itertools.repeat(""),
                splits,
                *_NO_HEADER,
                modified,
            )
        )
    keep_unknown = config.unknown_class == "keep"
    # a label or LabelError -> (the one string of the label, why it is not a class or None):
    # one string per label (a dirname label is a new slice of each path) in the plan and the
    # pickled read tasks
    cells: dict[Any, tuple[str | None, str | None]] = {}
    found = labels.label_paths(paths, kind=kind, csv_labels=csv_labels)
    for label in dict.fromkeys(found):
        if isinstance(label, labels.LabelError):
            cells[label] = (None, str(label).split(": ", 1)[-1])
        else:
            refusal = labels.class_error(label, fixed_classes, keep_unknown=keep_unknown)
            cells[label] = (sys.intern(label), refusal)
    labelled = list(map(cells.__getitem__, found))
    return list(
        map(
            InputFile,
            indexes,
            paths,
            sizes,
            map(operator.itemgetter(0), labelled),
            splits,
            itertools.repeat(None),  # info
            map(operator.itemgetter(1), labelled),  # error
            itertools.repeat(None),  # annotation
            modified,
        )
    )


_LABEL = operator.attrgetter("label")
_ERROR = operator.attrgetter("error")
_NO_HEADER = (itertools.repeat(None), itertools.repeat(None), itertools.repeat(None))


def check_inputs(config: RecordConfig, inputs: tuple[InputFile, ...]) -> str:
    """The signal dtype for the scanned `inputs`, after the checks that need their headers.

    Raises:
      UsageError: ``--signal_dtype`` cannot hold every file exactly, or ``--strict`` and a bad
        file (the first one is named).
    """
    bad = next((f for f in inputs if f.error), None)
    return _checked_dtype(
        config, _Headers(inputs), None if bad is None else (bad.index, bad.path, bad.error)
    )


def _checked_dtype(
    config: RecordConfig,
    headers: Collection[tuple[str, WavInfo]],
    first_bad: tuple[int, str, str] | None,
) -> str:
    """`check_inputs` from the (path, header) of every file with a header and the first bad
    file's (index, path, reason) (None: none)."""
    try:  # from the headers: a dtype that holds every file exactly, or one line saying why not
        dtype = resolve_signal_dtype(config.signal_dtype, headers)
    except ValueError as e:
        raise UsageError(str(e)) from e
    require(
        not (config.strict and first_bad),
        f"--strict: {first_bad[1]}: {first_bad[2]}" if first_bad else "",
    )
    return dtype


class _Headers(Collection[tuple[str, Any]]):
    """(path, header) of every file of `inputs` with a header, made as they are iterated (no
    list of every file: `resolve_signal_dtype` looks at each file's header once)."""

    def __init__(self, inputs: Sequence[InputFile]) -> None:
        self._inputs = inputs

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return ((f.path, f.info) for f in self._inputs if f.info is not None)

    def __len__(self) -> int:
        return sum(f.info is not None for f in self._inputs)

    def __contains__(self, item: object) -> bool:
        return any(item == header for header in self)


# --- the in-job plan step, batch by batch (`pipelines.job_plan`) ----------------------------
# A batch of files with their headers read -> its `HeaderSummary`; the summaries merged (in
# any order) -> `plan_summary`: the dtype, the checks, the shard counts and where each batch's
# rows start (`TaskCut`) -> each batch cut into its (task id, segment) pieces (`cut_batch`):
# together, the read tasks `plan_headers` makes of every file at once.


@dataclasses.dataclass(frozen=True)
class HeaderSummary:
    """What the plan needs of one or more batches of files with their headers read
    (`summarize_headers`, `merge_summaries`): no per-file list.

    Attributes:
      batches: each batch's planned rows (`transforms.planning.sharding.BatchRows`).
      headers: (header, files with it, (index, path) of its first `NAMED_FILES` files) of
        every distinct header (the signal dtype; a refusal names the first files).
      first_bad: (index, path, reason) of the first file refused (``--strict``), or None.
      first_header: (index, header) of the first file with a header (feature shapes), or None.
      frames: (sample rate, frames) of the files with a header (their seconds of audio).
    """

    batches: tuple[BatchRows, ...] = ()
    headers: tuple[tuple[WavInfo, int, tuple[tuple[int, str], ...]], ...] = ()
    first_bad: tuple[int, str, str] | None = None
    first_header: tuple[int, WavInfo] | None = None
    frames: tuple[tuple[int, int], ...] = ()


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
    rows_of = _rows_counter(_windows_config(config, listed, {}))  # window, rate, channels
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
        count, named = headers.get(f.info, (0, []))
        if len(named) < NAMED_FILES:
            named.append((f.index, f.path))
        headers[f.info] = (count + 1, named)
        if first_header is None:
            first_header = (f.index, f.info)
        if f.error is None and f.info.sample_rate:
            frames[f.info.sample_rate] = frames.get(f.info.sample_rate, 0) + f.info.num_frames
    bad = next((f for f in files if f.error), None)
    return HeaderSummary(
        batches=(rows,),
        headers=tuple((info, count, tuple(named)) for info, (count, named) in headers.items()),
        first_bad=None if bad is None else (bad.index, bad.path, bad.error),
        first_header=first_header,
        frames=tuple(frames.items()),
    )


def merge_summaries(summaries: Iterable[HeaderSummary]) -> HeaderSummary:
    """Summaries of batches -> the summary of them all (in any order; the result's lists in a
    fixed order)."""
    batches: list[BatchRows] = []
    headers: dict[WavInfo, tuple[int, list[tuple[int, str]]]] = {}
    frames: dict[int, int] = {}
    bad, first = [], []
    for s in summaries:
        batches.extend(s.batches)
        for info, count, named in s.headers:
            seen, names = headers.get(info, (0, []))
            headers[info] = (seen + count, sorted([*names, *named])[:NAMED_FILES])
        for rate, n in s.frames:
            frames[rate] = frames.get(rate, 0) + n
        bad += [s.first_bad] if s.first_bad else []
        first += [s.first_header] if s.first_header else []
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
    )


def plan_summary(
    config: RecordConfig,
    listed: ScannedInputs,
    summary: HeaderSummary,
    *,
    cpu_count: int,
    single_task: bool,
) -> TaskCut:
    """The plan of `listed` (`list_inputs`) from every batch's summary: what `plan_headers`
    decides before cutting the tasks, with the same checks in the same order (pure).

    Raises:
      UsageError: what `check_inputs` and `size_tasks` raise.
    """
    dtype = _checked_dtype(config, _SummaryHeaders(summary.headers), summary.first_bad)
    first = summary.first_header[1] if summary.first_header else None
    shapes = _shapes_at(config, first)
    scanned = dataclasses.replace(listed, inputs=(), signal_dtype=dtype)
    windows_config = _windows_config(config, scanned, shapes)
    starts, end = rows_before(summary.batches, listed.sharding)
    sharding, rows_per_task = _sized(
        config,
        listed.sharding,
        dict(end.split_rows),
        shapes=shapes,
        signal_dtype=dtype,
        cpu_count=cpu_count,
    )
    return TaskCut(
        read=windows_config,
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
    rows_of = _rows_counter(_windows_config(config, listed, {}))  # as `summarize_headers`
    before = cut.starts[files[0].index]
    segments = plan_segments(
        ((f, rows_of(f)) for f in files if f.error is None), listed.sharding, before=before
    )
    pieces = cut_segments(segments, rows_per_task=cut.rows_per_task, first_row=before.total)
    if cut.single_task:
        yield from ((0, seg) for _, seg in pieces)
    else:
        yield from pieces


def read_task(task_id: int, segments: Iterable[Segment]) -> ReadTask:
    """The read task of `segments` (`cut_batch`'s pieces of one task id, in any order)."""
    ordered = sorted(segments, key=lambda seg: (seg.file.index, seg.row_start))
    return ReadTask(task_id, tuple(ordered))


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


def check_output_dir(config: RecordConfig, output_dir: str, state: str) -> None:
    """Whether the run may write to `output_dir` in `state` (see `output_dir_state`).

    With ``--resume`` one of our directories is accepted (`pipelines.resume` decides what is
    reused).

    Raises:
      UsageError: it exists and ``--overwrite`` is not given, or it holds foreign files.
    """
    require(
        state in ("missing", "empty") or config.overwrite or (config.resume and state == "ours"),
        f"--output_dir {output_dir} exists; pass --overwrite to replace it"
        + (" (--resume continues only a run of ours)" if config.resume else ""),
    )
    require(
        state != "foreign",
        f"--output_dir {output_dir} holds files that are not an audiorecords dataset; "
        "refusing to overwrite it",
    )


def one_task(plan: RecordPlan) -> RecordPlan:
    """`plan` with its read tasks' segments in a single task (pure), for a runner that runs
    read tasks one at a time in one thread (`runners.sequential_tasks`): each shard is then one
    part file, which becomes the shard without a copy (`record_parts.copy_ranges`).

    The segments (where files are cut) stay those of the parallel plan, so every runner reads
    and summarises the same pieces; a window's features do not depend on how windows are
    chunked or packed (`transforms.audio.features`).
    """
    return dataclasses.replace(plan, tasks=merge_tasks(plan.tasks))


def size_tasks(config: RecordConfig, scanned: ScannedInputs, *, cpu_count: int) -> RecordPlan:
    """Feature shapes, shard counts per split and the read tasks (pure).

    Args:
      config: the run's options.
      scanned: what `scan_inputs` found.
      cpu_count: cores of the launcher (read tasks: at least `TASKS_PER_CORE` per core).

    Raises:
      UsageError: feature parameters that do not fit the windows at the files' rate, or no
        window in the splits TFT's statistics are computed on.
    """
    inputs = scanned.inputs
    shapes = _feature_shapes(config, inputs)
    windows_config = _windows_config(config, scanned, shapes)
    rows_of = _rows_counter(windows_config)
    segments = plan_segments(((f, rows_of(f)) for f in inputs if f.error is None), scanned.sharding)
    sharding, rows_per_task = _sized(
        config,
        scanned.sharding,
        split_rows(segments, scanned.sharding),
        shapes=shapes,
        signal_dtype=scanned.signal_dtype,
        cpu_count=cpu_count,
    )
    tasks = plan_tasks(segments, rows_per_task=rows_per_task)
    return RecordPlan(
        output_dir=scanned.output_dir,
        name=config.dataset_name,
        inputs=inputs,
        read=windows_config,
        compression=config.compression_name,
        sharding=sharding,
        tasks=annotation_plan.segment_tasks(tasks),
        input_bytes=sum(f.size_bytes for f in inputs),
        params=json.loads(json.dumps(config.params())),
        classes=scanned.classes,
        analyzed_splits=config.analyzed_splits,
        annotation_errors=scanned.annotation_errors,
        input_stamps=scanned.stamps,
    )


def _feature_shapes(
    config: RecordConfig, inputs: tuple[InputFile, ...]
) -> dict[str, tuple[int, ...]]:
    """The feature shapes at the run's rate (the first readable file's without --sample_rate);
    raises `UsageError` on parameters that do not fit or a feature over `MAX_VALUES_PER_KEY`."""
    return _shapes_at(config, next((f.info for f in inputs if f.info is not None), None))


def _shapes_at(config: RecordConfig, first: WavInfo | None) -> dict[str, tuple[int, ...]]:
    """`_feature_shapes` with the first readable file's header `first` (None: none)."""
    if not config.feature_names:
        return {}
    feature_config = config.feature_config
    rate = config.sample_rate or (first.sample_rate if first is not None else 16000)
    try:
        feature_config.validate(win_len=config.win_len, sample_rate=rate)
    except ValueError as e:
        raise UsageError(f"feature parameters: {e}") from e
    shapes = feats.feature_shapes(feature_config, win_len=config.win_len, sample_rate=rate)
    for name, shape in shapes.items():
        require(
            math.prod(shape) <= MAX_VALUES_PER_KEY,
            f"feature parameters: {name} would have shape {list(shape)}, over "
            f"{MAX_VALUES_PER_KEY} (2^28) values, the most the reader takes in one element",
        )
    return shapes


def _windows_config(
    config: RecordConfig, scanned: ScannedInputs, shapes: Mapping[str, tuple[int, ...]]
) -> ReadWindowsConfig:
    """The read tasks' configuration: window, stored layout, features, channels, dtype."""
    layout = RecordLayout(
        feature_shapes=shapes,
        normalize=config.normalize,
        with_channel=config.channel_mode == "split",
        feature_dtype=config.feature_dtype,
    )
    if scanned.max_events is not None:
        layout = dataclasses.replace(
            layout, num_label_classes=len(scanned.classes), max_events=scanned.max_events
        )
    return ReadWindowsConfig(
        window=config.window,
        layout=layout,
        features=config.feature_config,
        channel_mode=config.channel_mode,
        sample_rate=config.sample_rate,
        strict=config.strict,
        signal_dtype=scanned.signal_dtype,
    )


def _rows_counter(windows_config: ReadWindowsConfig) -> Callable[[InputFile], int]:
    """A usable file -> its planned rows (`planned_rows` once per header object: files of one
    format share it; an annotated file's windows)."""
    rows: dict[int, int] = {}  # id(header) -> its rows

    def rows_of(f: InputFile) -> int:
        if f.annotation:
            return f.annotation.num_rows
        found = rows.get(id(f.info))
        if found is None:
            found = rows[id(f.info)] = planned_rows(f.info, windows_config)
        return found

    return rows_of


def _sized(
    config: RecordConfig,
    sharding: Sharding,
    rows: Mapping[str, int],
    *,
    shapes: Mapping[str, tuple[int, ...]],
    signal_dtype: str,
    cpu_count: int,
) -> tuple[Sharding, int]:
    """`sharding` with its shard counts, and the rows per read task, from the rows kept per
    split (`split_rows`).

    Raises:
      UsageError: no window in the splits TFT's statistics are computed on.
    """
    feature_floats = sum(math.prod(s) for s in shapes.values())
    stored = stored_row_bytes(
        win_len=config.win_len,
        signal_dtype=signal_dtype,
        feature_values=feature_floats,
        feature_dtype=config.feature_dtype,
    )
    sized = _shard_counts(config, sharding, rows, stored_bytes=stored)
    _check_analyzed_rows(config, rows)
    row_bytes = config.win_len * 4 + feature_floats * 4  # a row in memory (read tasks), about
    total_rows = sum(rows.values())
    return sized, _rows_per_task(total_rows, row_bytes=row_bytes, cpu_count=cpu_count)


def _shard_counts(
    config: RecordConfig, sharding: Sharding, rows: Mapping[str, int], *, stored_bytes: int
) -> Sharding:
    """`sharding` with the shard count of each split, from its rows kept (`split_rows`)."""
    estimated = {  # docs/output-layout.md "Shard count": one shard per 128 MiB of estimated output
        split: plan_num_shards(stored_bytes * rows.get(split, 0), num_shards=config.num_shards)
        for split in sharding.split_names
    }
    return dataclasses.replace(sharding, num_shards=split_shard_counts(rows, sharding, estimated))


def _check_analyzed_rows(config: RecordConfig, rows: Mapping[str, int]) -> None:
    """With normalization and windows, some window must be in the analysed splits (`rows`: the
    rows kept per split)."""
    analyze = config.analyzed_splits
    total_rows = sum(rows.values())
    require(
        not (config.normalize and config.feature_names and total_rows)
        or any(rows.get(split, 0) for split in analyze),
        f"--analyze_splits {','.join(analyze)}: no window in the analysed split(s) to compute "
        "statistics on; choose other splits, weights or --no_normalize",
    )


def _rows_per_task(total_rows: int, *, row_bytes: int, cpu_count: int) -> int:
    """At most `TASK_BYTES` of rows, at least `TASKS_PER_CORE` tasks per core, at least
    `MIN_TASK_ROWS` rows (`total_rows`: the rows kept in all)."""
    return max(
        MIN_TASK_ROWS,
        min(TASK_BYTES // row_bytes, -(-total_rows // (TASKS_PER_CORE * cpu_count))),
    )


def stored_row_bytes(
    *, win_len: int, signal_dtype: str, feature_values: int, feature_dtype: str
) -> int:
    """Bytes a stored element takes, about: its samples and its stored features (format 2).

    ``<feature>_norm`` is not stored (the reader computes it); scalars and the Example framing
    (~100 bytes) are left out. Planned windows times this is the estimated output.
    """
    feature_bytes = 2 if feature_dtype in ("float16", "bfloat16") else 4
    return win_len * _ITEMSIZE[signal_dtype] + feature_values * feature_bytes
