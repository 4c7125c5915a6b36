"""Pure planning of splits and shards: which split a file goes to, which shard a window goes to.

- Splits (``--splits train=80,validation=10,test=10``) take whole source files, by a stable hash
  (blake2b) of the file's path relative to the input pattern's fixed prefix, so no window of one
  recording leaks across splits and moving the corpus elsewhere keeps the assignment.
- Shards (``--shard_by``): ``hash`` spreads windows by a hash of (index, channel, win_start_idx);
  ``file`` keeps all windows of a file in one shard; ``class`` gives each class its own disjoint
  set of shards; a Python ``shard_func(element) -> int`` (the snapshot contract) chooses freely.
- ``--elements_per_shard N`` / ``--max_elements M`` work on the element *rank*: elements ordered
  by (file index, win_start_idx, channel), counted within their split; shards then hold exactly
  N consecutive elements (the last one the rest) and only the first M elements are kept. No
  element is dropped at a shard or file boundary.

Reading is planned here too: the index-ordered rows (window counts come from the headers, read
at planning) are cut into `ReadTask`s of similar size, long files into several segments, for
every file at once (`plan_segments`, `plan_tasks`) or batch by batch with the same cuts
(`batch_rows` per batch, `rows_before` over the batches, then `plan_segments(before=...)` and
`cut_segments` per batch: the record job's plan step, `pipelines.plan.in_job`). And
the shard count (`plan_num_shards`: one per 128 MiB of estimated output) and the splits TFT's
statistics come from (`analyzed_splits`). The data these rules fill in: `transforms.spec.types`.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import itertools
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any

from replay import format as fmt
from transforms.spec.types import InputFile, ReadTask, Segment, Sharding

SHARD_BY = ("hash", "file", "class")
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")
TARGET_SHARD_BYTES = 128 << 20  # 128 MiB per shard when --num_shards is not given
MAX_AUTO_SHARDS = 4096


def parse_splits(value: str | None) -> tuple[tuple[str, float], ...]:
    """``train=80,validation=10,test=10`` -> (("train", .8), ...); None/"" -> ().

    Raises:
      ValueError: malformed, duplicate or reserved names, or non-positive weights.
    """
    if not value:
        return ()
    parts = []
    for item in value.split(","):
        name, sep, weight = item.partition("=")
        name = name.strip()
        if not sep or not _SPLIT_NAME.match(name) or name == fmt.ALL_SPLIT:
            raise ValueError(f"--splits: bad item {item!r}; expected name=weight, e.g. train=80")
        try:
            w = float(weight)
        except ValueError:
            raise ValueError(f"--splits: weight of {name!r} is not a number: {weight!r}") from None
        if not w > 0:
            raise ValueError(f"--splits: weight of {name!r} must be > 0")
        parts.append((name, w))
    names = [n for n, _ in parts]
    if len(set(names)) != len(names):
        raise ValueError(f"--splits: duplicate split names in {value!r}")
    total = sum(w for _, w in parts)
    return tuple((n, w / total) for n, w in parts)


def pattern_base(pattern: str) -> str:
    """The fixed directory prefix of a glob (``data/**/*.wav`` -> ``data/``)."""
    cut = len(pattern)
    for i, ch in enumerate(pattern):
        if glob.has_magic(ch):
            cut = i
            break
    return pattern[: pattern[:cut].rfind("/") + 1]


def _unit_hash(text: str) -> float:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def split_of(path: str, sharding: Sharding) -> str:
    """The split a source file belongs to (all its windows go there)."""
    if not sharding.splits:
        return fmt.ALL_SPLIT
    key = path[len(sharding.split_base) :] if path.startswith(sharding.split_base) else path
    u, acc = _unit_hash(key), 0.0
    for name, fraction in sharding.splits:
        acc += fraction
        if u < acc:
            return name
    return sharding.splits[-1][0]


def _hash_int(*parts: Any) -> int:
    key = ":".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


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


def split_rows(
    segments: Iterable[tuple[InputFile, int, int]], sharding: Sharding
) -> dict[str, int]:
    """Rows kept per split (every split) of `plan_segments`' result."""
    rows = dict.fromkeys(sharding.split_names, 0)
    for f, kept, _ in segments:
        rows[f.split] += kept
    return rows


def split_shard_counts(
    rows: Mapping[str, int], sharding: Sharding, estimated: Mapping[str, int]
) -> dict[str, int]:
    """Shard count per split: exact under ``--elements_per_shard`` (from the rows kept per
    split, `split_rows`), else `estimated`."""
    if sharding.elements_per_shard is None:
        counts = dict(estimated)
    else:
        counts = {
            s: max(1, math.ceil(rows.get(s, 0) / sharding.elements_per_shard))
            for s in sharding.split_names
        }
    if sharding.shard_by == "class":
        counts = {s: max(n, len(sharding.classes)) for s, n in counts.items()}
    return counts


def shard_of(
    element_key: tuple[int, int, int],
    *,
    label: str,
    split_rank: int,
    num_shards: int,
    sharding: Sharding,
) -> int:
    """Shard of one window within its split (`shard_func` is applied by the caller)."""
    index, channel, win_start = element_key
    if sharding.elements_per_shard is not None:
        return split_rank // sharding.elements_per_shard
    if sharding.shard_by == "file":
        return _hash_int(index) % num_shards
    if sharding.shard_by == "class":
        k = len(sharding.classes)
        i = sharding.classes.index(label)
        lo, hi = i * num_shards // k, (i + 1) * num_shards // k
        return lo + _hash_int(index, channel, win_start) % (hi - lo)
    return _hash_int(index, channel, win_start) % num_shards


def plan_num_shards(estimated_bytes: int, *, num_shards: int | None = None) -> int:
    """Shard count: `num_shards` if given, else one per 128 MiB of estimated output (>= 1)."""
    if num_shards is not None:
        if num_shards <= 0:
            raise ValueError(f"--num_shards must be > 0, got {num_shards}")
        return num_shards
    return int(min(MAX_AUTO_SHARDS, max(1, math.ceil(estimated_bytes / TARGET_SHARD_BYTES))))


TRAIN_SPLIT = "train"  # the split analysed by default when --splits is given


def analyzed_splits(value: str | None, *, split_names: Sequence[str]) -> tuple[str, ...]:
    """The splits TFT's full pass (z-score statistics) sees, from ``--analyze_splits``.

    Without ``--splits`` (the single split "all") that is everything; with splits, the named
    ones, by default ``train``: statistics from held-out data would leak into training features.

    Raises:
      ValueError: an unknown or repeated name, the option without ``--splits``, or splits
        without a ``train`` split and no ``--analyze_splits``.
    """
    if tuple(split_names) == (fmt.ALL_SPLIT,):
        if value:
            raise ValueError("--analyze_splits needs --splits")
        return (fmt.ALL_SPLIT,)
    if not value:
        if TRAIN_SPLIT not in split_names:
            raise ValueError(
                f"--splits has no split named {TRAIN_SPLIT!r} to compute statistics on; "
                f"name the analysed splits with --analyze_splits (of {', '.join(split_names)})"
            )
        return (TRAIN_SPLIT,)
    names = [n.strip() for n in value.split(",")]
    for i, name in enumerate(names):
        if name not in split_names:
            raise ValueError(
                f"--analyze_splits: unknown split {name!r}; --splits has {', '.join(split_names)}"
            )
        if name in names[:i]:
            raise ValueError(f"--analyze_splits: split {name!r} is listed twice")
    return tuple(names)
