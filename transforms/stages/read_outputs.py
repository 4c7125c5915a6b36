"""The read stage's small per-row outputs: analysis batches for TFT, AUTO compression samples.

`transforms.stages.read_windows` emits them; `transforms.stages.task_commits` rebuilds a reused
record's samples as `sample_bytes` takes them (from the stored bytes, found by `first_key`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from replay import format as fmt
from transforms.spec.types import Segment


class Batcher:
    """Joins RecordBatches of one schema into batches of at least `min_rows` (the last: fewer).

    Counted in rows, not `RecordBatch.nbytes`, which is slow on the slices of a pack's batch.
    """

    def __init__(self, min_rows: int):
        self._min_rows = min_rows
        self._pending: list[pa.RecordBatch] = []
        self._rows = 0

    def add(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """Takes `batch`; yields the joined batch once `min_rows` are pending."""
        self._pending.append(batch)
        self._rows += batch.num_rows
        if self._rows >= self._min_rows:
            yield from self.flush()

    def flush(self) -> Iterator[pa.RecordBatch]:
        """Yields what is pending as one batch (nothing when nothing is)."""
        if self._pending:
            pending, self._pending, self._rows = self._pending, [], 0
            if len(pending) == 1:
                yield pending[0]
            else:
                yield pa.Table.from_batches(pending).combine_chunks().to_batches()[0]


def first_key(batch: pa.RecordBatch, seg: Segment) -> list[int]:
    """The row key (index, window start, channel) of the first row of `batch`, of `seg`."""
    start = batch.column(batch.schema.get_field_index(fmt.WIN_START_KEY)).flatten()[0].as_py()
    i = batch.schema.get_field_index(fmt.CHANNEL_KEY)
    channel = batch.column(i).flatten()[0].as_py() if i >= 0 else 0
    return [seg.file.index, int(start), int(channel)]


def sample_bytes(batch: pa.RecordBatch) -> bytes:
    """The payload of the first row (signal + features), as it will be stored."""
    row = batch.slice(0, 1)
    parts = []
    for i, name in enumerate(row.schema.names):
        values = row.column(i).flatten()
        if name == fmt.SIGNAL_KEY:
            parts.append(values[0].as_py())
        elif values.type == pa.float32():
            parts.append(values.to_numpy().tobytes())
    return b"".join(parts)
