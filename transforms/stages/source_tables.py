"""The source tables the record job writes (format version 3, `replay.format`): ``files.jsonl``'s
lines from the read stage's summaries (`file_lines`, `TableLines`: a file's segments merged),
``errors.jsonl``'s (`error_lines`), and a table written in blocks with its digest
(`write_table`). `transforms.stages.finalize` writes them before the manifest that names them.
"""

from __future__ import annotations

import array
import hashlib
import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from replay import format as fmt
from transforms.stages import atomic
from transforms.stages.task_commits import unpacked_lines

TABLE_BLOCK_LINES = 4096  # a source table is written this many lines at a time


def file_lines(
    summaries: Iterable[bytes], failed: Collection[str]
) -> tuple[Sequence[bytes], list[int]]:
    """The files table's lines (files.jsonl), from the read stage's summaries: one line per
    decoded file, in index order, the windows of its segments summed (a long file is read in
    several); files in `failed` left out. Also the output sample rates of those files, sorted.

    A summary is one segment's table line (`format.table_line`), and each item of `summaries`
    one or more of them joined and compressed (`task_commits.packed_lines`: the read stage emits
    a batch's lines together): a file's line is its first segment's with the windows summed, as
    the summary dicts merged gave it. The table holds the items as they came and where each line
    lies in them (`TableLines`), not a line each: the runner holds the items too, and summaries
    as dicts, or a bytes object a line, took much more memory (docs/performance.md).
    """
    items: list[bytes] = []
    index, item_of, starts, stops = (array.array("q") for _ in range(4))
    rates = set()
    for item in summaries:
        items.append(item)
        block = unpacked_lines(item)
        for start, stop in _line_spans(block):
            entry = json.loads(block[start:stop])
            if entry["path"] in failed:
                continue
            rates.add(entry.get("sample_rate"))
            index.append(entry["index"])
            item_of.append(len(items) - 1)
            starts.append(start)
            stops.append(stop)
    table = TableLines(items, index=index, item=item_of, start=starts, stop=stops)
    return table, sorted(r for r in rates if r is not None)


class TableLines(Sequence):
    """The files table's lines, by file index, each a span of one of the read stage's summary
    items, a file's segments merged into one line (`file_lines`). An item is unpacked when a
    line of it is read (the last one kept: a task's lines come in index order). Slices are
    lists of bytes.

    Args:
      items: the summary items (`task_commits.packed_lines`).
      index, item, start, stop: per segment line kept, its file's index and where it lies (the
        item's number in `items`, its byte span unpacked), in the order they were read.
    """

    def __init__(
        self,
        items: list[bytes],
        *,
        index: array.array,
        item: array.array,
        start: array.array,
        stop: array.array,
    ) -> None:
        self._items = items
        self._unpacked: tuple[int, bytes] = (-1, b"")
        indexes = np.frombuffer(index, dtype=np.int64)
        order = np.argsort(indexes, kind="stable")  # a file's segments in the order read
        first = np.ones(len(order), dtype=bool)
        first[1:] = indexes[order][1:] != indexes[order][:-1]
        self._spans = np.stack(
            [np.frombuffer(c, dtype=np.int64)[order] for c in (item, start, stop)], axis=1
        )
        self._rows = np.flatnonzero(first)  # each file's first segment line, among the spans
        # files read in several segments: their merged lines, by row
        self._merged: dict[int, bytes] = {}
        ends = np.append(self._rows, len(order))[1:]
        for row, end in zip(self._rows.tolist(), ends.tolist(), strict=True):
            if end - row > 1:
                line = self._span(row)
                for other in range(row + 1, end):
                    merged = json.loads(line)
                    merged["num_windows"] += json.loads(self._span(other))["num_windows"]
                    line = fmt.table_line(merged)
                self._merged[row] = line

    def _span(self, row: int) -> bytes:
        item, start, stop = self._spans[row].tolist()
        unpacked = self._unpacked
        if unpacked[0] != item:
            unpacked = (item, unpacked_lines(self._items[item]))
            self._unpacked = unpacked
        return unpacked[1][start:stop]

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        row = int(self._rows[i])
        merged = self._merged.get(row)
        return merged if merged is not None else self._span(row)


def _line_spans(block: bytes) -> Iterator[tuple[int, int]]:
    """The (start, stop) of each table line of `block` (one or more lines, ``\\n`` ended)."""
    start = 0
    while start < len(block):
        stop = block.index(b"\n", start) + 1
        yield start, stop
        start = stop


def error_lines(errors: Iterable[Mapping[str, Any]]) -> list[bytes]:
    """The errors table's lines (errors.jsonl): one per path (the first reported), by path."""
    first = {e["path"]: e for e in reversed(list(errors))}
    return [fmt.table_line(first[path]) for path in sorted(first)]


def write_table(out: str, filename: str, lines: Sequence[bytes]) -> dict[str, Any]:
    """`out`/`filename` := the table `lines` joined, written `TABLE_BLOCK_LINES` lines at a time
    under ``.tmp/`` and renamed into place; returns its digest as `format.table_digest` gives
    it, without joining the whole table in memory."""
    digest, sizes = hashlib.sha256(), []

    def blocks() -> Iterator[bytes]:
        for start in range(0, len(lines), TABLE_BLOCK_LINES):
            block = b"".join(lines[start : start + TABLE_BLOCK_LINES])
            digest.update(block)
            sizes.append(len(block))
            yield block

    atomic.write_atomically(f"{out}/{filename}", blocks(), tmp=f"{out}/.tmp/{filename}")
    return {"num_bytes": sum(sizes), "sha256": digest.hexdigest()}
