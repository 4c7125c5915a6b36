"""Read tasks: the index-ordered rows of every file, ranked within their split and cut into
`ReadTask`s of similar size.

Every usable file's planned rows (window counts come from the headers) are taken in file index
order; ``--max_elements M`` keeps only the first M of them, and each file's row 0 gets its
*rank* within its split (elements ordered by (file index, win_start_idx, channel), counted
within their split: what ``--elements_per_shard`` shards by, `transforms.spec.sharding`). The
rows are then cut into tasks of `rows_per_task` rows, long files into several segments, so a
single long recording is read in parallel:

- for every file at once: `plan_segments`, then `plan_tasks` (`merge_tasks`: one task);
- batch by batch, with the same cuts and no list of every file (the record job's plan step,
  `pipelines.plan.in_job`): `batch_rows` per batch, `rows_before` over the batches, then
  `plan_segments(before=...)` and `cut_segments` per batch.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter

from transforms.spec.types import InputFile, ReadTask, Segment, Sharding


@dataclasses.dataclass(frozen=True)
class RowsBefore:
    """Where a run of index-ordered files starts among the planned rows: the rows kept before
    it (after ``--max_elements``), in all and per split (its files' split ranks start there).

    Attributes:
      total: rows kept before the run's first file.
      split_rows: (split, rows kept before the run's first file in that split), every split.
    """

    total: int = 0
    split_rows: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class BatchRows:
    """The planned rows of a run of consecutive usable files (a batch of the in-job plan
    step), as much as the rows before and after it need (`rows_after`): no per-file list but
    the files that ``--max_elements`` may cut.

    Attributes:
      first_index: the run's first file's index (the runs are put in order by it).
      total: its files' planned rows (before ``--max_elements``).
      split_rows: (split, planned rows) of its splits with rows.
      head: with ``--max_elements M``, (split, planned rows) of its files with rows, in index
        order, until the first whose rows make the run's total reach M (the cut is there or
        before); () without.
    """

    first_index: int
    total: int = 0
    split_rows: tuple[tuple[str, int], ...] = ()
    head: tuple[tuple[str, int], ...] = ()


def _kept(rows: int, total: int, limit: int | None) -> int:
    """Rows of a file with `rows` planned kept after `total` kept rows (``--max_elements``)."""
    if limit is None:
        return int(rows) if rows > 0 else 0
    return int(max(0, min(rows, limit - total)))


def batch_rows(
    files: Iterable[tuple[str, int]], sharding: Sharding, *, first_index: int
) -> BatchRows:
    """(split, planned rows) of consecutive usable files, in index order -> their `BatchRows`."""
    limit = sharding.max_elements
    total, split_rows, head = 0, {}, []
    for split, rows in files:
        rows = _kept(rows, 0, None)
        if not rows:
            continue
        if limit is not None and total < limit:
            head.append((split, rows))
        total += rows
        split_rows[split] = split_rows.get(split, 0) + rows
    return BatchRows(first_index, total, tuple(sorted(split_rows.items())), tuple(head))


def rows_after(before: RowsBefore, batch: BatchRows, sharding: Sharding) -> RowsBefore:
    """The rows kept before the run that follows `batch`, whose own rows start at `before`."""
    limit = sharding.max_elements
    split_rows = dict.fromkeys(sharding.split_names, 0)
    split_rows.update(before.split_rows)
    total = before.total
    if limit is None or total + batch.total <= limit:
        for split, rows in batch.split_rows:
            split_rows[split] += rows
        total += batch.total
    else:  # the cut is in this batch, among its head
        for split, rows in batch.head:
            kept = _kept(rows, total, limit)
            split_rows[split] += kept
            total += kept
    return RowsBefore(total, tuple(split_rows.items()))


def rows_before(
    batches: Iterable[BatchRows], sharding: Sharding
) -> tuple[dict[int, RowsBefore], RowsBefore]:
    """Each batch's `RowsBefore` (by its first index) and the rows kept in all (after the
    last batch): `plan_segments` over every file, but from per-batch sums."""
    before = RowsBefore(0, tuple((split, 0) for split in sharding.split_names))
    starts = {}
    for batch in sorted(batches, key=lambda b: b.first_index):
        starts[batch.first_index] = before
        before = rows_after(before, batch, sharding)
    return starts, before


def plan_segments(
    files: Iterable[tuple[InputFile, int]],
    sharding: Sharding,
    *,
    before: RowsBefore | None = None,
) -> list[tuple[InputFile, int, int]]:
    """[(file, rows kept, split rank of row 0)] in index order, after ``--max_elements``.

    Args:
      files: (file, planned rows) for every usable file, in index order (gone through once).
      sharding: the split / rank rules.
      before: the rows kept before the first of `files` (`rows_before`); None: none (`files`
        are every usable file).
    """
    out = []
    split_rows = dict.fromkeys(sharding.split_names, 0)
    total = 0
    if before is not None:
        split_rows.update(before.split_rows)
        total = before.total
    limit = sharding.max_elements
    for f, rows in files:
        kept = _kept(rows, total, limit)
        split = f.split
        out.append((f, kept, split_rows[split]))
        total += kept
        split_rows[split] += kept
    return out


def cut_segments(
    segments: Iterable[tuple[InputFile, int, int]], *, rows_per_task: int, first_row: int = 0
) -> Iterator[tuple[int, Segment]]:
    """(task id, segment) of index-ordered planned rows (`plan_segments`) whose first row is
    the plan's `first_row`: task k holds the plan's rows [k * rows_per_task, (k + 1) *
    rows_per_task), a file longer than what is left of a task is cut into several segments,
    and a file with no row gets a segment in the task its place falls in (its summary must be
    reported). Any run of consecutive files is cut as the whole plan cuts it."""
    row = first_row
    for f, rows, split_rank in segments:
        if rows <= 0:
            yield row // rows_per_task, Segment(f, 0, 0, split_rank)
            continue
        start = 0
        while start < rows:
            take = min(rows - start, rows_per_task - row % rows_per_task)
            yield row // rows_per_task, Segment(f, start, start + take, split_rank)
            start, row = start + take, row + take


def plan_tasks(
    segments: Sequence[tuple[InputFile, int, int]], *, rows_per_task: int
) -> tuple[ReadTask, ...]:
    """Cuts the index-ordered rows into ReadTasks of `rows_per_task` rows each (the last one
    the rest), with `cut_segments`.

    Files longer than a task are cut into several segments, so a single long recording is read
    in parallel; files with no rows still get a segment (their summary must be reported).
    """
    cut = cut_segments(segments, rows_per_task=rows_per_task)
    return tuple(
        ReadTask(task_id, tuple(seg for _, seg in pieces))
        for task_id, pieces in itertools.groupby(cut, key=itemgetter(0))
    )


def merge_tasks(tasks: Sequence[ReadTask]) -> tuple[ReadTask, ...]:
    """`tasks`' segments, in order, as one task (none: no task), for a runner that runs tasks
    one after another anyway."""
    segments = tuple(seg for task in tasks for seg in task.segments)
    return (ReadTask(0, segments),) if segments else ()
