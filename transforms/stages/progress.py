"""Progress of a running record job, across worker processes, without flooding logs.

Workers (`ProgressFile`, used by the DoFns) write their running totals to a small JSON file of
their own under ``<output_dir>/.tmp/progress/`` at most every 2 s. The launcher
(`ProgressReporter`, a thread) sums those files every second and shows one live line on a
terminal (files done/total, windows, MB written, rate, ETA), or, off a terminal (CI, Dataflow
logs), one log line every 30 s. "MB written" counts the records' bytes as the read stage
writes them (framed, into part files), so it grows with the reading; the shards, written from
the parts afterwards, add no bytes to it (the summary line gives the shards' size). Beam
metrics are only queryable once the DirectRunner returns, hence files. Only for local output
directories: on Dataflow the job page shows the counters.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Mapping

from replay.storage import is_url

PROGRESS_DIR = ".tmp/progress"
WRITE_SECONDS = 2.0  # a worker rewrites its file at most this often
TERMINAL_SECONDS = 1.0
LOG_SECONDS = 30.0


class ProgressFile:
    """One DoFn instance's running totals, flushed to its own file now and then."""

    def __init__(self, output_dir: str):
        self._dir = None if is_url(output_dir) else os.path.join(output_dir, PROGRESS_DIR)
        self._path = None
        self._totals: dict[str, int] = {}
        self._last = 0.0

    def add(self, **counts: int) -> None:
        for key, value in counts.items():
            self._totals[key] = self._totals.get(key, 0) + value
        if time.monotonic() - self._last >= WRITE_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self._dir is None or not self._totals:
            return
        self._last = time.monotonic()
        try:
            os.makedirs(self._dir, exist_ok=True)
            if self._path is None:
                self._path = os.path.join(self._dir, f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
            tmp = self._path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(self._totals, fh)
            os.replace(tmp, self._path)
        except OSError:  # progress is best effort; the job's own writes report real errors
            pass


def read_totals(output_dir: str) -> dict[str, int]:
    """Sum of every worker's totals (empty when there are none yet)."""
    folder = os.path.join(output_dir, PROGRESS_DIR)
    totals: dict[str, int] = {}
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".json")]
    except OSError:
        return totals
    for name in names:
        try:
            with open(os.path.join(folder, name)) as fh:
                for key, value in json.load(fh).items():
                    totals[key] = totals.get(key, 0) + int(value)
        except (OSError, ValueError):
            continue
    return totals


def format_line(totals: Mapping[str, int], *, total_files: int, elapsed: float) -> str:
    """``files 12/40 (1 failed) | 3,456 windows | 120.5 MB | 60 windows/s | ETA 0:00:35``."""
    done = totals.get("files", 0) + totals.get("failed", 0)
    windows = totals.get("windows", 0)
    rate = windows / elapsed if elapsed > 0 else 0.0
    eta = "?"
    if 0 < done < total_files:
        eta_s = int(elapsed * (total_files - done) / done)
        eta = f"{eta_s // 3600}:{eta_s // 60 % 60:02d}:{eta_s % 60:02d}"
    elif done >= total_files:
        eta = "writing"
    reused = totals.get("reused", 0)  # --resume: windows reused (transforms.stages.task_commits)
    return (
        f"files {done}/{total_files} ({totals.get('failed', 0)} failed) | {windows:,} windows | "
        f"{totals.get('bytes', 0) / 1e6:.1f} MB written | {rate:.0f} windows/s | ETA {eta}"
        + (f" | {reused:,} of them reused" if reused else "")
    )


class ProgressReporter:
    """Launcher-side thread: a live line on a terminal, periodic log lines elsewhere."""

    def __init__(self, output_dir: str, *, total_files: int, stream=None):
        self._output_dir = output_dir
        self._total = total_files
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="record-progress", daemon=True)
        self._start = time.monotonic()

    def __enter__(self) -> ProgressReporter:
        if not is_url(self._output_dir):
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()

    def _loop(self) -> None:
        period = TERMINAL_SECONDS if self._tty else LOG_SECONDS
        while not self._stop.wait(period):
            line = format_line(
                read_totals(self._output_dir),
                total_files=self._total,
                elapsed=time.monotonic() - self._start,
            )
            if self._tty:
                self._stream.write("\r" + line[:200].ljust(100))
                self._stream.flush()
            else:
                logging.getLogger("audiorecords").info("progress: %s", line)
