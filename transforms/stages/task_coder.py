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
"""

from __future__ import annotations

import dataclasses
import pickle

import apache_beam as beam

from transforms.planning.types import ReadTask


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
