"""Planning a record run: validate options, match inputs, decide shards — before any work.

Everything here happens in the launcher (or, for a plain run, partly in the job's plan step),
fails fast with one clear line (`UsageError`), and produces a frozen `RecordPlan` the pipeline
is built from: validate (`pipelines.config.RecordConfig` checks every option, no I/O), then
`scan_inputs` (what planning learns from storage), then `size_tasks` (shapes, shard counts and
read tasks, a pure function of the two). The modules, in reading order:

- `types`: `ScannedInputs`, `RecordPlan`, `Continuation` (the dataset ``--append`` adds to);
- `reads`: planning's I/O: listing, headers, class and label files, annotation tables, the
  output directory's state;
- `splits`: which split a file goes to (a stable hash of its path);
- `listing`: inputs -> labels and splits (`list_inputs`, no request a file), then their headers
  (`read_headers`); the two together are `scan_inputs`;
- `checks`: the signal dtype that holds every file, ``--strict``, the output directory;
- `tasks`: the index-ordered rows ranked within their split and cut into read tasks;
- `shard_counts`: how many shards each split gets;
- `sizing`: tasks -> shards -> layout, put together: feature shapes, the read configuration and
  stored layout, rows per file, shard counts, rows per read task (`size_tasks`, `one_task`,
  `plan_headers`);
- `annotated`: with ``--annotations``, the tables' events matched to the listing and the class
  list (`listing`, no header), then every file's windows and labels once its header is read
  (`listing`, or the job's plan step batch by batch);
- `batches`: the same plan made batch by batch, without every file in one list;
- `in_job`: the record job's plan step (Beam), built of `batches`.

What the plan hands the Beam stages (its types, the layout, the rules the workers apply) is in
`transforms.spec`.

This module is `plan_record` (the three steps at once) and the names callers import from
`pipelines.plan`; importing it imports no Beam (`in_job` is imported by itself).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pipelines.config import RecordConfig, UsageError
from pipelines.plan.batches import (
    HeaderSummary,
    TaskCut,
    cut_batch,
    merge_summaries,
    plan_summary,
    read_task,
    summarize_headers,
    summary_audio_ms,
)
from pipelines.plan.checks import check_inputs, check_output_dir
from pipelines.plan.listing import (
    label_inputs,
    launcher_windows_config,
    list_inputs,
    read_headers,
    scan_inputs,
)
from pipelines.plan.reads import (
    match_inputs,
    match_stamped,
    output_dir_state,
    read_classes_file,
    scan_headers,
)
from pipelines.plan.sizing import (
    MIN_TASK_ROWS,
    TASK_BYTES,
    TASKS_PER_CORE,
    one_task,
    plan_headers,
    size_tasks,
    stored_row_bytes,
)
from pipelines.plan.splits import pattern_base
from pipelines.plan.types import Continuation, RecordPlan, ScannedInputs
from transforms.spec.types import Sharding

__all__ = [
    "MIN_TASK_ROWS",
    "TASKS_PER_CORE",
    "TASK_BYTES",
    "Continuation",
    "HeaderSummary",
    "RecordPlan",
    "ScannedInputs",
    "Sharding",
    "TaskCut",
    "UsageError",
    "check_inputs",
    "check_output_dir",
    "cut_batch",
    "label_inputs",
    "launcher_windows_config",
    "list_inputs",
    "match_inputs",
    "match_stamped",
    "merge_summaries",
    "one_task",
    "output_dir_state",
    "pattern_base",
    "plan_headers",
    "plan_record",
    "plan_summary",
    "read_classes_file",
    "read_headers",
    "read_task",
    "scan_headers",
    "scan_inputs",
    "size_tasks",
    "stored_row_bytes",
    "summarize_headers",
    "summary_audio_ms",
]


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
