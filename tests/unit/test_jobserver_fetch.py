"""`runners.jobserver.fetch`: processes that start together assemble a job server once.

Parallel test workers (and two launchers on one machine) may both find the cache empty; without
a lock the second would replace the lib/ directory the first one's JVM is starting from. Maven
itself is stood in for by a script that does what `dependency:copy-dependencies` does for the
assembler (jars into ``-DoutputDirectory``) and counts its calls: a real assembly downloads
hundreds of MB, and what is tested here is the lock, not Maven.

Nothing here depends on timing. The stand-in Maven does not finish before the other process has
either found the lock held (each process's `fcntl.flock` is wrapped to say so, then takes the
real lock) or called Maven itself: so that process has found the cache empty, every time, and
without the lock (or without the check under it) Maven runs twice, every time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from runners import jobserver

ROOT = Path(__file__).resolve().parents[2]
GUARD_S = 120  # a hang guard only: the stand-in never waits this long unless a process died


def _stand_in_maven(directory: Path, calls: Path, waiting: Path) -> Path:
    """A Maven that records its call, then waits for the other process: until it is found
    waiting for the lock (`waiting` exists) or has called Maven too."""
    script = directory / "mvn"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!{sys.executable}
            import pathlib, sys, time
            calls, waiting = pathlib.Path({str(calls)!r}), pathlib.Path({str(waiting)!r})
            with open(calls, "a") as fh:
                fh.write("called\\n")
            guard = time.monotonic() + {GUARD_S}
            while not waiting.exists() and len(calls.read_text().splitlines()) < 2:
                if time.monotonic() > guard:
                    sys.exit("stand-in mvn: the other process neither waited nor called Maven")
                time.sleep(0.01)
            (out,) = [a.split("=", 1)[1] for a in sys.argv if a.startswith("-DoutputDirectory=")]
            pathlib.Path(out).mkdir(parents=True)
            pathlib.Path(out, "engine-runtime-1.0.jar").write_bytes(b"PK")
            """
        )
    )
    script.chmod(0o755)
    return script


def _fetching(mvn: Path, waiting: Path) -> str:
    """A process's code: `fetch`, its exclusive locks first tried without blocking, and when
    another process holds one, `waiting` written before blocking on it."""
    return textwrap.dedent(
        f"""\
        import fcntl, pathlib
        from runners import jobserver

        real = fcntl.flock

        def flock(fd, operation):
            if operation == fcntl.LOCK_EX:
                try:
                    return real(fd, operation | fcntl.LOCK_NB)
                except BlockingIOError:
                    pathlib.Path({str(waiting)!r}).write_text("waiting")
            return real(fd, operation)

        fcntl.flock = flock
        print(jobserver.fetch("flink", mvn={str(mvn)!r}))
        """
    )


def test_two_processes_fetching_together_assemble_the_job_server_once(tmp_path, monkeypatch):
    calls, waiting, cache = tmp_path / "calls.txt", tmp_path / "waiting", tmp_path / "cache"
    mvn = _stand_in_maven(tmp_path, calls, waiting)
    code = _fetching(mvn, waiting)
    env = {**os.environ, jobserver.CACHE_ENV: str(cache), "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=2 * GUARD_S)[0].strip() for p in procs]
    assert calls.read_text().splitlines() == ["called"]  # the second found it assembled
    assert waiting.exists()  # ... after waiting for the lock
    assert [p.returncode for p in procs] == [0, 0]
    monkeypatch.setenv(jobserver.CACHE_ENV, str(cache))
    jar = jobserver.jar_path("flink")
    assert outputs == [str(jar), str(jar)]
    assert jobserver.cached("flink") == jar
    assert (jobserver.lib_dir("flink") / "engine-runtime-1.0.jar").read_bytes() == b"PK"
