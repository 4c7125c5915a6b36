"""A Beam coder for the read tasks, whose size estimate does not pickle every segment.

Beam estimates the size of a sample of every stage output's elements
(`apache_beam.runners.worker.opcounters`: each of the first 10 elements, then about 10/N) by
encoding them. A `ReadTask` has no registered coder, so each sampled task was pickled whole only
to be measured: the in-memory DirectRunner plans one read task holding every file's segment, so
the whole plan was pickled once more in the job's thread. `Coder.estimate_size` is Beam's
documented hook for a cheaper estimate (as `transforms.stages.arrow_coder` uses for Arrow
batches): the task pickled with its first one or two segments only, the second's share counted
once per segment (a task's segments are alike: a file's path, header and row range).

Encoding stays pickle, as Beam's fallback did, so a task that crosses a stage or process
boundary (several tasks are reshuffled) travels as before. `transforms.stages.composites` registers
it for `ReadTask` and types the staged tasks' PCollection with it.

A task the record job plans itself (`pipelines.plan.in_job`) is grouped from pieces, each a
batch's segments of it: `encode_segments` pickles a piece once where it is cut, and the task's
`segments` are an `EncodedSegments`, the pieces' bytes in order, decoded as they are read (a
piece at a time). The task of a runner that runs one task (every file's segment) is so held
as its pickled pieces, not as an object per segment and file, planned in the job or in the
launcher (`pipelines.build.held_tasks` cuts the planned task into pieces); it reads the same
segments in the same order.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import pickle
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any

import apache_beam as beam

from transforms.spec.types import ReadTask, Segment


class ReadTaskCoder(beam.coders.Coder):
    """`ReadTask` <-> pickle bytes; the size estimate pickles one segment, not all of them."""

    def encode(self, value: ReadTask) -> bytes:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> ReadTask:
        return pickle.loads(encoded)

    def estimate_size(self, value: ReadTask) -> int:
        return estimated_size(value)

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self) -> type:
        return ReadTask


def estimated_size(task: ReadTask) -> int:
    """About the pickled size of `task`: pickled with its first segment only, plus what a second
    segment adds to that (pickle writes a class or a repeated string once) for each other one."""
    if len(task.segments) < 2:
        return _pickled_size(task)
    one = _pickled_size(dataclasses.replace(task, segments=task.segments[:1]))
    two = _pickled_size(dataclasses.replace(task, segments=task.segments[:2]))
    return one + (two - one) * (len(task.segments) - 1)


def _pickled_size(task: ReadTask) -> int:
    return len(pickle.dumps(task, pickle.HIGHEST_PROTOCOL))


# a piece of a task's segments: (its first segment's (file index, row start), how many, pickle)
EncodedPiece = tuple[tuple[int, int], int, bytes]


def encode_segments(segments: Sequence[Segment]) -> EncodedPiece:
    """Consecutive segments of one task (file index and row order, at least one) -> the piece
    `EncodedSegments` holds: their order key, count and pickle (a header shared by segments of
    the piece pickled once)."""
    first = segments[0]
    data = pickle.dumps(tuple(segments), pickle.HIGHEST_PROTOCOL)
    return (first.file.index, first.row_start), len(segments), data


class EncodedSegments(Sequence[Segment]):
    """A read task's segments as pickled pieces (`encode_segments`), in (file index, row start)
    order, each decoded when one of its segments is read: an iteration decodes one piece at a
    time, an index the piece holding it (the last one kept). Equal to any sequence of the same
    segments (a task of them equals the task of their tuple); pickled as its pieces."""

    def __init__(self, pieces: Iterable[EncodedPiece]) -> None:
        ordered = sorted(pieces, key=itemgetter(0))
        self._data = [data for _, _, data in ordered]
        self._ends = list(itertools.accumulate(count for _, count, _ in ordered))
        self._last: tuple[int, tuple[Segment, ...]] = (-1, ())

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __iter__(self) -> Iterator[Segment]:
        for data in self._data:
            yield from pickle.loads(data)  # noqa: S301 - pickled by `encode_segments`

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        i = i + len(self) if i < 0 else i
        if not 0 <= i < len(self):
            raise IndexError(i)
        k = bisect.bisect_right(self._ends, i)
        return self._piece(k)[i - (self._ends[k - 1] if k else 0)]

    def after(self, start: int) -> EncodedSegments:
        """The segments from `start` on, still as pieces: the piece holding `start` decoded and
        encoded again from it, the later pieces kept as they are (a resumed task goes on from
        a checkpoint without decoding the rest of its segments)."""
        if start <= 0:
            return self
        if start >= len(self):
            return EncodedSegments(())
        k = bisect.bisect_right(self._ends, start)
        head = self._piece(k)[start - (self._ends[k - 1] if k else 0) :]
        counts = [len(head)] + [b - a for a, b in itertools.pairwise(self._ends[k:])]
        return _encoded_segments(
            [encode_segments(head)[2], *self._data[k + 1 :]], list(itertools.accumulate(counts))
        )

    def _piece(self, k: int) -> tuple[Segment, ...]:
        last = self._last  # one read: other threads may read the task too
        if last[0] != k:
            last = (k, pickle.loads(self._data[k]))  # noqa: S301 - see `__iter__`
            self._last = last
        return last[1]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __reduce__(self) -> tuple[Any, tuple]:
        return _encoded_segments, (self._data, self._ends)


def _encoded_segments(data: list[bytes], ends: list[int]) -> EncodedSegments:
    """The `EncodedSegments` of pieces `data` ending at `ends` (its pickle)."""
    out = EncodedSegments(())
    out._data, out._ends = data, ends
    return out
