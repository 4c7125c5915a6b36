"""Test-only fault injection: the record job's read or shard-write stage fails once, mid-work.

Production code has no switch for this: the tests run subclasses of the job's two DoFns,
`FaultyReadTaskFn` and `FaultyWriteShardFn`, either directly in a pipeline of their own or in
place of the originals inside the real job (`injected`, as `tests.support.pause_points` wraps a
function of the job). Each stage ("read": a read task's output, "write": a shard's records)
fails exactly once per fault directory, across every process of the job: the first time one of
its iterables is asked for the item after its first, `InjectedFault` is raised, so a read task
has already written a part file and emitted a file's first windows, and a shard write leaves a
partial temporary file. The file ``<directory>/<stage>`` records which key failed; create it
beforehand to keep that stage from failing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

import apache_beam as beam

from transforms.stages import read_windows, write_shards

T = TypeVar("T")


class InjectedFault(RuntimeError):
    """The failure the faulty DoFns inject."""


def fail_here_once(*, directory: str, stage: str, key: str) -> None:
    """Raises `InjectedFault` the first time it is called for (`directory`, `stage`)."""
    try:
        fd = os.open(os.path.join(directory, stage), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, key.encode())
    os.close(fd)
    raise InjectedFault(f"injected fault: {stage} of {key}")


def fail_once(items: Iterable[T], *, directory: str, stage: str, key: str) -> Iterator[T]:
    """`items`, failing once per (`directory`, `stage`) when asked for the item after the first."""
    for n, item in enumerate(items):
        yield item
        if n == 0:
            fail_here_once(directory=directory, stage=stage, key=key)


class FaultyReadTaskFn(read_windows.ReadTaskFn):
    """`ReadTaskFn` failing once when asked for the output after a task's first window batch
    (keyed by the task's first file): a part file is written and windows are out."""

    def __init__(self, *args, fault_dir: str, **kwargs):
        super().__init__(*args, **kwargs)
        self._fault_dir = fault_dir

    def process(self, task, planned=None):
        windows_out = False
        for output in super().process(task, planned):
            yield output
            if not windows_out and not isinstance(output, beam.pvalue.TaggedOutput):
                windows_out = True
                key = task.segments[0].file.path
                fail_here_once(directory=self._fault_dir, stage="read", key=key)


class FaultyWriteShardFn(write_shards.WriteShardFn):
    """`WriteShardFn` failing once after a shard's first range of records is in its temporary
    file."""

    def __init__(self, *args, fault_dir: str, **kwargs):
        super().__init__(*args, **kwargs)
        self._fault_dir = fault_dir
        self._key = ""

    def process(self, element, *args, **kwargs):
        (split, shard), _ = element
        self._key = f"{split}-{shard}"  # read by _ranges, which process calls
        yield from super().process(element, *args, **kwargs)

    def _ranges(self, parts, failed):
        ranges = super()._ranges(parts, failed)
        return fail_once(ranges, directory=self._fault_dir, stage="write", key=self._key)


_ORIGINALS = {
    "ReadTaskFn": (read_windows.ReadTaskFn, FaultyReadTaskFn),
    "WriteShardFn": (write_shards.WriteShardFn, FaultyWriteShardFn),
}


@contextlib.contextmanager
def injected(directory: str) -> Iterator[None]:
    """Within: the record job (`pipelines.record.run`, in this process) builds its read and write
    stages from the faulty DoFns, failing into `directory`; the originals are restored after.

    The classes are rebound wherever a module of the job holds them (as attribute of their
    module, or imported by name).
    """
    import pipelines.record  # noqa: F401 - binds every `from x import y` of the job first

    swapped = []
    for module in list(sys.modules.values()):
        for name, (original, faulty) in _ORIGINALS.items():
            if getattr(module, name, None) is original:
                setattr(module, name, functools.partial(faulty, fault_dir=directory))
                swapped.append((module, name, original))
    try:
        yield
    finally:
        for module, name, original in swapped:
            setattr(module, name, original)
