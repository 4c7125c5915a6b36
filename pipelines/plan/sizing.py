"""Tasks and shards: feature shapes, shard counts per split and read tasks (`size_tasks`, pure).

From the scanned inputs: each file's planned rows (`transforms.stages.file_rows`), the rows
kept per split, the shard counts (`pipelines.plan.shard_counts`, about one shard per 128 MiB
of estimated output, `stored_row_bytes`), the rows of a read task (`TASK_BYTES`,
`TASKS_PER_CORE`, `MIN_TASK_ROWS`) and the read tasks (`pipelines.plan.tasks`); the stored
layout is `transforms.spec.layout`. `one_task` puts every segment in one task for a runner that
runs tasks one at a time; `plan_headers` is the whole plan of listed inputs once their headers
are read.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping

from pipelines.config import RecordConfig, UsageError, require
from pipelines.plan import annotated
from pipelines.plan.checks import check_inputs
from pipelines.plan.shard_counts import plan_num_shards, split_rows, split_shard_counts
from pipelines.plan.tasks import merge_tasks, plan_segments, plan_tasks
from pipelines.plan.types import RecordPlan, ScannedInputs
from replay.manifest import MAX_VALUES_PER_KEY
from transforms.audio import features as feats
from transforms.audio.wav import WavInfo
from transforms.spec.layout import RecordLayout
from transforms.spec.types import InputFile, ReadWindowsConfig, Sharding
from transforms.stages.file_rows import planned_rows

TASK_BYTES = 32 << 20  # 32 MiB of stored elements per read task, at most ...
TASKS_PER_CORE = 4  # ... and at least 4 tasks per core when there is enough data ...
MIN_TASK_ROWS = 64  # ... but never tasks of fewer than 64 elements
_ITEMSIZE = {"int16": 2, "int32": 4, "float32": 4, "float64": 8}  # signal dtypes


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
    shapes = feature_shapes(config, inputs)
    read_config = windows_config(config, scanned, shapes)
    rows_of = rows_counter(read_config)
    segments = plan_segments(((f, rows_of(f)) for f in inputs if f.error is None), scanned.sharding)
    sharding, rows_per_task = sized(
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
        read=read_config,
        compression=config.compression_name,
        sharding=sharding,
        tasks=annotated.segment_tasks(tasks),
        input_bytes=sum(f.size_bytes for f in inputs),
        params=json.loads(json.dumps(config.params())),
        classes=scanned.classes,
        analyzed_splits=config.analyzed_splits,
        annotation_errors=scanned.annotation_errors,
        input_stamps=scanned.stamps,
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
    (`pipelines.plan.in_job`) makes the same plan batch by batch, without every file in one list
    (`summarize_headers`, `merge_summaries`, `plan_summary`, `cut_batch`, `read_task`).

    Raises:
      UsageError: what `check_inputs` and `size_tasks` raise.
    """
    dtype = check_inputs(config, inputs)
    scanned = dataclasses.replace(listed, inputs=inputs, signal_dtype=dtype)
    plan = size_tasks(config, scanned, cpu_count=cpu_count)
    return one_task(plan) if single_task else plan


def feature_shapes(
    config: RecordConfig, inputs: tuple[InputFile, ...]
) -> dict[str, tuple[int, ...]]:
    """The feature shapes at the run's rate (the first readable file's without --sample_rate);
    raises `UsageError` on parameters that do not fit or a feature over `MAX_VALUES_PER_KEY`."""
    return shapes_at(config, next((f.info for f in inputs if f.info is not None), None))


def shapes_at(config: RecordConfig, first: WavInfo | None) -> dict[str, tuple[int, ...]]:
    """`feature_shapes` with the first readable file's header `first` (None: none)."""
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


def windows_config(
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


def rows_counter(read_config: ReadWindowsConfig) -> Callable[[InputFile], int]:
    """A usable file -> its planned rows (`planned_rows` once per header object: files of one
    format share it; an annotated file's windows)."""
    rows: dict[int, int] = {}  # id(header) -> its rows

    def rows_of(f: InputFile) -> int:
        if f.annotation:
            return f.annotation.num_rows
        found = rows.get(id(f.info))
        if found is None:
            found = rows[id(f.info)] = planned_rows(f.info, read_config)
        return found

    return rows_of


def sized(
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
    counted = _shard_counts(config, sharding, rows, stored_bytes=stored)
    _check_analyzed_rows(config, rows)
    row_bytes = config.win_len * 4 + feature_floats * 4  # a row in memory (read tasks), about
    total_rows = sum(rows.values())
    return counted, _rows_per_task(total_rows, row_bytes=row_bytes, cpu_count=cpu_count)


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
