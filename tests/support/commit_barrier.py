"""Runs ``python -m pipelines.record --append`` whose commit waits for other appends (test-only).

    python -m tests.support.commit_barrier BARRIER_DIR PARTIES [record arguments...]

The record CLI's `main` runs unchanged in this process, except that
`pipelines.append_commit.next_manifest` is wrapped. `pipelines.append_commit.commit` calls it
after its early check (the version's ``manifests/<v>.json`` does not exist yet) and after
reading its record job's manifest, before the exclusive creation of ``manifests/<v>.json`` (the
commit point). The wrapper writes ``BARRIER_DIR/<pid>`` and waits until PARTIES such files are
there: every append started this way that commits the same version has passed the early check
before any creates the version's manifest, so the commit point itself decides which one
commits, whatever the machine's speed. Production code carries no test switch (the wrapping
lives only here).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable

BARRIER_TIMEOUT_S = 600.0  # only ends a test whose other append died before the barrier


class BarrierTimeout(RuntimeError):
    """The other appends never reached the barrier."""


def _at_barrier(fn: Callable, *, barrier_dir: str, parties: int) -> Callable:
    """`fn`, which first waits until `parties` processes have called it (each its file)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        os.makedirs(barrier_dir, exist_ok=True)
        with open(os.path.join(barrier_dir, str(os.getpid())), "w") as fh:
            fh.write("at the commit point\n")
        deadline = time.monotonic() + BARRIER_TIMEOUT_S
        while len(os.listdir(barrier_dir)) < parties:
            if time.monotonic() > deadline:
                raise BarrierTimeout(f"{parties} appends never reached {barrier_dir}")
            time.sleep(0.01)
        return fn(*args, **kwargs)

    return wrapper


def install(barrier_dir: str, parties: int) -> None:
    """Wraps `pipelines.append_commit.next_manifest` (called by `commit` as a global of its
    module)."""
    from pipelines import append_commit

    append_commit.next_manifest = _at_barrier(
        append_commit.next_manifest, barrier_dir=barrier_dir, parties=parties
    )


if __name__ == "__main__":
    from pipelines import record  # loads no TensorFlow yet
    from runners.internals import exit_now, load_one_keras

    barrier, parties, *argv = sys.argv[1:]
    load_one_keras()  # as the CLI's own __main__ does
    install(barrier, int(parties))
    exit_now(record.main(argv))  # what `python -m pipelines.record` runs
