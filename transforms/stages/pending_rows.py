"""The read stage's computed rows on their way to the part files, handed over in batches.

No Beam transform here (`BatchedPartWriter` is the read stage's write step, `PendingRows` its
batches). `transforms.stages.read_windows` reads a task's segments chunk by chunk; a
one-second clip is a chunk of one row. Done per chunk, the Python around each chunk's rows
(routing them to shards, a part writer hand-off per shard, the moments of its row sums, the
counters) cost more than the rows themselves. So the rows of consecutive chunks wait here, and
are handed over together: their records, grouped by (split, shard) in order with their runs (one
per input file, `record_parts.PartWriter.write_runs`), their analysed row sums, their counts.

Batching does not change a byte: each part receives the same records in the same order, with
the same runs, as chunk-by-chunk writes give it (a shard's records are the subsequence of the
task's rows routed to it, whatever the hand-offs); the moments are exact integer sums
(`transforms.stages.moments`), the same however the rows are grouped; the counters are totals.
`route_chunk` gives each row the shard `transforms.spec.sharding.shard_of` gives it,
from the chunk's own row keys (no Arrow column is read): it runs in the compute pool, where a
pack's rows are computed, so that a chunk whose routing fails is that file's error alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor

import numpy as np

from transforms.spec.sharding import shard_of
from transforms.spec.types import ReadTask, Segment, Sharding
from transforms.stages.framing import FRAME_BYTES
from transforms.stages.record_parts import PartWriter
from transforms.stages.task_commits import continued_parts

RowSums = Mapping[str, tuple[np.ndarray, np.ndarray]]  # feature -> each row's sums, sums of squares


def route_chunk(chunk: Mapping, sh: Sharding, *, channels: bool) -> list[int]:
    """The shard of each row of a decoded chunk (the default sharding: no ``shard_func``).

    Args:
      chunk: ``f`` (the InputFile), ``starts`` and ``channels`` (one per row) and ``rank``
        (the split rank of its first row).
      sh: the sharding (its ``shard_func`` unset).
      channels: whether rows carry their channel (``--channel_mode split``); else channel 0.
    """
    f = chunk["f"]
    count = sh.num_shards[f.split]
    starts = np.asarray(chunk["starts"]).tolist()
    chans = np.asarray(chunk["channels"]).tolist() if channels else [0] * len(starts)
    rank = chunk["rank"]
    return [
        shard_of(
            (f.index, int(c), int(s)),
            label=f.label,
            split_rank=rank + j,
            num_shards=count,
            sharding=sh,
        )
        for j, (c, s) in enumerate(zip(chans, starts, strict=True))
    ]


class PendingRows:
    """Records of consecutive chunks, routed, waiting for one hand-off to the part writer, with
    the row sums of the analysed ones and the read counts (`flush` empties it)."""

    def __init__(self) -> None:
        self._parts: dict[tuple[str, int], tuple[list[bytes], list[list]]] = {}
        self._sums: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.bytes = 0  # framed bytes of the pending records (what `PartWriter.written` adds)
        self.analysed_rows = 0
        self.counts = {"files": 0, "windows": 0, "audio_frames": 0}
        self.lines: list[bytes] = []  # the files table lines of the segments read (the caller's)

    def add(
        self,
        seg: Segment,
        records: Sequence[bytes],
        shards: Sequence[int],
        *,
        sums: RowSums | None = None,
    ) -> None:
        """Takes a chunk of `seg`: its records, the shard of each, and their row sums if they
        are analysed (None: not)."""
        path, split = seg.file.path, seg.file.split
        first = shards[0] if len(shards) else 0
        if all(s == first for s in shards):  # a clip, or a chunk hashed to one shard
            self._take(split, int(first), path, records)
        else:
            by_shard: dict[int, list[bytes]] = {}
            for record, shard in zip(records, shards, strict=True):
                by_shard.setdefault(int(shard), []).append(record)
            for shard, part in by_shard.items():
                self._take(split, shard, path, part)
        if sums is not None and len(records):
            for key, pair in sums.items():
                self._sums.setdefault(key, []).append(pair)
            self.analysed_rows += len(records)

    def _take(self, split: str, shard: int, path: str, records: Sequence[bytes]) -> None:
        if not records:
            return
        size = sum(map(len, records)) + FRAME_BYTES * len(records)
        self.bytes += size
        group = self._parts.get((split, shard))
        if group is None:
            group = self._parts[(split, shard)] = ([], [])
        group[0].extend(records)
        runs = group[1]
        if runs and runs[-1][0] == path:
            runs[-1][1] += len(records)
            runs[-1][2] += size
        else:
            runs.append([path, len(records), size])

    def count(self, seg: Segment, rows: int) -> None:
        """Counts a segment read (`rows` windows); a file once its first segment is read."""
        self.counts["windows"] += rows
        if seg.row_start == 0:
            self.counts["files"] += 1
            self.counts["audio_frames"] += seg.file.info.num_frames

    def flush(self, parts: PartWriter) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], int]:
        """Hands every pending record to `parts` (one `write_runs` per part) and empties this;
        returns the pending analysed rows' sums (each feature's joined) and how many rows."""
        groups, self._parts = self._parts, {}
        sums, self._sums = self._sums, {}
        rows, self.analysed_rows = self.analysed_rows, 0
        self.bytes = 0
        for (split, shard), (records, runs) in groups.items():
            parts.write_runs(split, shard, records=records, runs=runs)
        joined = {
            key: pairs[0]
            if len(pairs) == 1
            else (np.concatenate([a for a, _ in pairs]), np.concatenate([b for _, b in pairs]))
            for key, pairs in sums.items()
        }
        return joined, rows

    def take_counts(self) -> dict[str, int]:
        """The pending counts (files, windows, audio_frames), reset."""
        counts, self.counts = self.counts, {"files": 0, "windows": 0, "audio_frames": 0}
        return counts


class HandOffError(Exception):
    """A batch of rows could not be handed to the part writer (its cause says why): it holds
    rows of files already counted as read, so it fails the task, not a file."""


@dataclasses.dataclass(frozen=True)
class HandedOff:
    """What one hand-off of pending rows gave the part files (`BatchedPartWriter.hand_off`).

    Attributes:
      sums: the analysed rows' sums per feature (`moments.row_sums`, joined).
      analysed_rows: how many rows `sums` holds.
      counts: files, windows and audio_frames of the segments read since the last hand-off.
      bytes: framed bytes of records handed to the parts.
      lines: the files table lines of the segments read since the last hand-off.
    """

    sums: Mapping[str, tuple[np.ndarray, np.ndarray]]
    analysed_rows: int
    counts: Mapping[str, int]
    bytes: int
    lines: list[bytes]


class BatchedPartWriter:
    """A read task's part files (`record_parts.PartWriter`), fed through `PendingRows`: the
    rows of consecutive chunks are handed over together, once `batch_bytes` of records are
    pending (`batched`), or chunk by chunk (not `batched`: with a ``shard_func``, whose error is
    its chunk's file's), and before a checkpoint and at the task's end.

    A task an earlier run checkpointed (`ReadTask.resumed`) goes on in its temporary parts
    (`task_commits.continued_parts`). Used as a context manager, a block that raises leaves no open
    part behind but for its checkpointed bytes (`PartWriter`).
    """

    def __init__(
        self,
        output_dir: str,
        task: ReadTask,
        *,
        batched: bool,
        batch_bytes: int,
        executor: Executor | None = None,
    ):
        continued = continued_parts(output_dir, task.resumed)
        self._parts = PartWriter(output_dir, task.task_id, continued=continued, executor=executor)
        self._pending = PendingRows()
        self._batched, self._batch_bytes = batched, batch_bytes

    def __enter__(self) -> BatchedPartWriter:
        self._parts.__enter__()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._parts.__exit__(exc_type, exc, tb)

    @property
    def written(self) -> int:
        """Framed bytes of records handed to the part files."""
        return self._parts.written

    @property
    def total_bytes(self) -> int:
        """Framed bytes of records handed over and pending."""
        return self._parts.written + self._pending.bytes

    def add(
        self,
        seg: Segment,
        records: Sequence[bytes],
        shards: Sequence[int],
        *,
        sums: RowSums | None = None,
    ) -> bool:
        """Takes a chunk of `seg` (`PendingRows.add`); returns whether to hand off now."""
        self._pending.add(seg, records, shards, sums=sums)
        return not self._batched or self._pending.bytes >= self._batch_bytes

    def file_read(self, seg: Segment, windows: int, line: bytes) -> None:
        """Counts segment `seg` read (`windows` windows), its files table `line` to go out with
        the next hand-off."""
        self._pending.count(seg, windows)
        self._pending.lines.append(line)

    def hand_off(self, *, in_segment: bool = False) -> HandedOff:
        """Hands every pending row to its part and returns what went.

        Raises:
          HandOffError: the part writer's error, but for one chunk's rows handed over within
            its segment (`in_segment`, not batched): that is its file's error, raised as is.
        """
        before = self._parts.written
        try:
            sums, rows = self._pending.flush(self._parts)
        except Exception as e:
            if in_segment and not self._batched:
                raise
            raise HandOffError(f"writing the read rows to their part files: {e}") from e
        lines, self._pending.lines = self._pending.lines, []
        counts = self._pending.take_counts()
        return HandedOff(sums, rows, counts, self._parts.written - before, lines)

    def checkpoint(self) -> list[dict]:
        """`PartWriter.checkpoint`: the parts' pieces since the last (hand off first)."""
        return self._parts.checkpoint()

    def commit(self) -> list[dict]:
        """`PartWriter.commit`: the parts under their final names, described."""
        return self._parts.commit()
