"""A hang guard for fuzz targets: never a pass/fail by the clock.

The fuzz tests bound their targets' work in bytes read and memory (see each test). A bug that
loops forever would still only end at CI's 90-minute limit, with no clue where: this guard dumps
every thread's stack and ends the process after `HANG_GUARD_S` on one input instead. The bound
is far beyond any input's real cost (well under a second here, a few seconds with both cores
busy), so a loaded machine never trips it.
"""

from __future__ import annotations

import contextlib
import faulthandler
from collections.abc import Iterator

HANG_GUARD_S = 600  # 10 min on one input: a hang, never a slow machine


@contextlib.contextmanager
def hang_guard() -> Iterator[None]:
    """Ends the process with all thread stacks if the body runs past `HANG_GUARD_S`."""
    faulthandler.dump_traceback_later(HANG_GUARD_S, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
