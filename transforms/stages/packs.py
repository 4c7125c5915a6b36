"""Packs: the decoded chunks of consecutive short files computed by one job.

No Beam here. A long file is read in chunks of ~8 MiB of samples (`file_rows.chunk_rows` rows), each
one feature computation and one encoding. A one-second clip is a chunk of one row, and at that size
the per-call costs (Arrow columns, encoder set-up, a thread hand-off per job) cost more than the
features (docs/performance.md). So consecutive chunks that can share a computation (the same output
rate; no ``--annotations`` columns) are packed, up to the rows of one full chunk, and computed by
one job; a long file's chunks are full already and stay one job each.

Packing does not change a byte: the features of a row depend on that row alone (checked bit for
bit against row-by-row computation in tests/unit/test_packs.py), and each chunk still gets its own
RecordBatch and records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any

Item = tuple[int, Any]  # (segment, chunk | None at its end | the Exception that ended it)


@dataclasses.dataclass(frozen=True)
class PackedChunk:
    """One chunk's result among those of its pack's job (a list, one entry per chunk)."""

    job: Future
    position: int

    def result(self) -> Any:
        """The chunk's result; raises the exception its entry holds."""
        out = self.job.result()[self.position]
        if isinstance(out, Exception):
            raise out
        return out


def packs(
    items: Iterable[Item],
    *,
    submit: Callable[[list[dict]], Future],
    max_rows: Callable[[dict], int],
    key: Callable[[dict], Hashable | None],
) -> Iterator[list[Item]]:
    """Groups `items` into packs and submits each pack's chunks as one job.

    Args:
      items: (segment, x) in order, where x is a chunk (a dict with ``starts``, one entry per
        row), None (the segment ended) or an Exception (it failed).
      submit: chunks -> a Future of their results, one per chunk (a result or an Exception).
      max_rows: the most rows a pack holding this chunk may have.
      key: chunks of one pack have equal keys; None: the chunk is packed alone.

    Yields:
      The items in order, a list per pack (ending at its last chunk, submitted as soon as it is
      full), each chunk replaced by its `PackedChunk`; items after the last chunk of a pack pass
      on in a list of their own when no chunk is pending.
    """
    pending: list[Item] = []
    chunks: list[dict] = []
    rows, pack_key, limit = 0, None, 0

    def flush() -> list[Item]:
        nonlocal pending, chunks, rows
        job = submit(chunks) if chunks else None
        out = [(i, PackedChunk(job, x) if isinstance(x, int) else x) for i, x in pending]
        pending, chunks, rows = [], [], 0
        return out

    for segment, x in items:
        if isinstance(x, dict):
            k, chunk_key = len(x["starts"]), key(x)
            if chunks and (chunk_key is None or chunk_key != pack_key or rows + k > limit):
                yield flush()
            pack_key, limit = chunk_key, max_rows(x)
            pending.append((segment, len(chunks)))
            chunks.append(x)
            rows += k
            if chunk_key is None or rows >= limit:
                yield flush()
        else:
            pending.append((segment, x))
            if not chunks:  # nothing to wait for: pass the end (or error) on now
                yield flush()
    if pending:
        yield flush()
