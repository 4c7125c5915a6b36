"""`runners.jobserver.fetch`: processes that start together assemble a job server once.

Parallel test workers (and two launchers on one machine) may both find the cache empty; without
a lock the second would replace the lib/ directory the first one's JVM is starting from. Maven
itself is stood in for by a script that does what `dependency:copy-dependencies` does for the
assembler (jars into ``-DoutputDirectory``), slowly, and counts its calls: a real assembly
downloads hundreds of MB, and what is tested here is the lock, not Maven.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from runners import jobserver

ROOT = Path(__file__).resolve().parents[2]


def _stand_in_maven(directory: Path, calls: Path) -> Path:
    script = directory / "mvn"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!{sys.executable}
            import pathlib, sys, time
            with open({str(calls)!r}, "a") as fh:
                fh.write("called\\n")
            time.sleep(1.0)  # long enough for the other process to find the cache empty
            (out,) = [a.split("=", 1)[1] for a in sys.argv if a.startswith("-DoutputDirectory=")]
            pathlib.Path(out).mkdir(parents=True)
            pathlib.Path(out, "engine-runtime-1.0.jar").write_bytes(b"PK")
            """
        )
    )
    script.chmod(0o755)
    return script


def test_two_processes_fetching_together_assemble_the_job_server_once(tmp_path, monkeypatch):
    calls, cache = tmp_path / "calls.txt", tmp_path / "cache"
    mvn = _stand_in_maven(tmp_path, calls)
    code = f"from runners import jobserver; print(jobserver.fetch('flink', mvn={str(mvn)!r}))"
    env = {**os.environ, jobserver.CACHE_ENV: str(cache), "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    monkeypatch.setenv(jobserver.CACHE_ENV, str(cache))
    jar = jobserver.jar_path("flink")
    assert outputs == [str(jar), str(jar)]
    assert calls.read_text().splitlines() == ["called"]  # the second found it assembled
    assert jobserver.cached("flink") == jar
    assert (jobserver.lib_dir("flink") / "engine-runtime-1.0.jar").read_bytes() == b"PK"
