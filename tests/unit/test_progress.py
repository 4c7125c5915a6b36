"""Progress: workers' totals summed from their files; a live line on a terminal, logs elsewhere."""

import io
import logging
import threading
from collections.abc import Callable

from transforms.stages import progress

HANG_GUARD_S = 60  # only ends a hung test; no assertion depends on how long anything took


def _wait_for(condition: Callable[[], bool]) -> None:
    """Returns once `condition()` holds (the reporter thread has done what the test waits for)."""
    done = threading.Event()
    for _ in range(HANG_GUARD_S * 100):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("the progress thread never produced the expected output")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_totals_from_several_workers_and_the_live_line(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "WRITE_SECONDS", 0.0)
    monkeypatch.setattr(progress, "TERMINAL_SECONDS", 0.05)
    a, b = progress.ProgressFile(str(tmp_path)), progress.ProgressFile(str(tmp_path))
    a.add(files=2, failed=0, windows=30)
    b.add(files=0, failed=1, windows=0)
    b.add(bytes=5_000_000, shards=1)
    assert progress.read_totals(str(tmp_path)) == {
        "files": 2,
        "failed": 1,
        "windows": 30,
        "bytes": 5_000_000,
        "shards": 1,
    }
    stream = _Terminal()
    with progress.ProgressReporter(str(tmp_path), total_files=10, stream=stream):
        _wait_for(lambda: stream.getvalue().count("\r") >= 2)  # rendered at least twice
    text = stream.getvalue()
    assert "\rfiles 3/10 (1 failed) | 30 windows | 5.0 MB written" in text
    assert text.count("\n") == 1  # one live line, rewritten in place


def test_off_a_terminal_progress_is_periodic_log_lines(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.1)
    progress.ProgressFile(str(tmp_path)).add(files=1, windows=4)  # first add always flushes

    def lines() -> list[str]:
        return [r.getMessage() for r in list(caplog.records) if r.getMessage().startswith("prog")]

    stream = io.StringIO()
    with caplog.at_level(logging.INFO, logger="audiorecords"):
        with progress.ProgressReporter(str(tmp_path), total_files=1, stream=stream):
            _wait_for(lambda: len(lines()) >= 2)  # periodic: a second line follows the first
    assert "files 1/1" in lines()[0] and "ETA writing" in lines()[0]
    assert stream.getvalue() == ""  # no live line off a terminal


def test_eta_format():
    line = progress.format_line({"files": 10, "windows": 100}, total_files=40, elapsed=10.0)
    assert line.endswith("10 windows/s | ETA 0:00:30")
