"""Test-only fault injection: make a stage fail once, mid-work, to test retries and re-runs.

Off unless the environment variable ``AUDIORECORDS_FAULT_INJECTION`` names a directory (never
set it in production; see README "Guarantees"). Then each wrapped stage ("read": a file's
windows, "write": a shard's records) fails exactly once per directory, across every process of
the job: the first time one of its iterables is asked for the item after its first,
`InjectedFault` is raised, so a shard write leaves a partial temporary file and a file read has
already emitted windows. The file ``<directory>/<stage>`` records which key failed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TypeVar

FAULT_ENV = "AUDIORECORDS_FAULT_INJECTION"
T = TypeVar("T")


class InjectedFault(RuntimeError):
    """The failure `fail_once` injects (test-only)."""


def fail_once(items: Iterable[T], *, stage: str, key: str) -> Iterable[T]:
    """`items` unchanged, unless fault injection is on: then maybe fail after the first item."""
    directory = os.environ.get(FAULT_ENV)
    return _failing(items, directory, stage, key) if directory else items


def _failing(items: Iterable[T], directory: str, stage: str, key: str) -> Iterator[T]:
    for n, item in enumerate(items):
        yield item
        if n == 0:  # the first item is out; fail before the next, unless this stage failed once
            try:
                fd = os.open(os.path.join(directory, stage), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue
            os.write(fd, key.encode())
            os.close(fd)
            raise InjectedFault(f"injected fault: {stage} of {key}")
