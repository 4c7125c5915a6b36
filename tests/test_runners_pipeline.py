"""The record job gives the same records on every local path a cluster uses.

One in-memory run is the reference; the DirectRunner with two worker processes, and the portable
path a Flink cluster runs (a Beam job service + an EXTERNAL worker pool, both started here as
subprocesses on free loopback ports) must write byte-identical shards and the same manifest.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.record_helpers import SAMPLE_DIR, load_manifest, record

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ARGS = ("--win_len", "16000", "--features", "log_mel,mfcc", "--num_shards", "2")
START_TIMEOUT_S = 90.0


def _comparable(output_dir: Path) -> dict:
    manifest = load_manifest(output_dir)
    manifest.pop("created_utc")
    manifest.pop("params")
    return manifest


def _assert_same_records(reference: Path, other: Path) -> None:
    want, got = _comparable(reference), _comparable(other)
    assert got == want
    shards = [s["filename"] for split in want["splits"].values() for s in split["shards"]]
    assert len(shards) == 2 and want["num_examples"] == 18
    for name in shards:
        assert (other / name).read_bytes() == (reference / name).read_bytes(), name


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("in_memory") / "out"
    record(str(SAMPLE_DIR / "*.wav"), out, *ARGS, "--direct_running_mode", "in_memory")
    return out


def test_direct_runner_multi_processing_gives_the_same_records(reference, tmp_path):
    # The real command line: DoFns and lambdas pickled from __main__, two SDK worker processes.
    out = tmp_path / "mp"
    command = [sys.executable, "-m", "pipelines.record", "--output_dir", str(out), *ARGS]
    command += ["--input_pattern", str(SAMPLE_DIR / "*.wav")]
    command += ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "recorded 18 windows" in done.stdout
    _assert_same_records(reference, out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{proc.args} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"{proc.args} did not listen on {port} within {START_TIMEOUT_S} s")


def _stop(proc: subprocess.Popen) -> None:
    """Stops `proc` and the workers it started (its own process group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
    else:  # the leader is gone; its workers may not be
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def job_service(tmp_path) -> Iterator[tuple[int, int]]:
    """(job service port, worker pool port): both running until the test ends."""
    env = dict(os.environ)
    # The pool starts SDK workers as `python -c ...`: make that our interpreter.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    procs = []
    try:
        ports = []
        for name, command in (
            ("job_service", ["apache_beam.runners.portability.local_job_service_main", "--port"]),
            ("worker_pool", ["runners.worker_pool", "--service_port"]),
        ):
            port = _free_port()
            log = tmp_path / f"{name}.log"
            with open(log, "wb") as fh:
                proc = subprocess.Popen(
                    [sys.executable, "-m", *command, str(port)],
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stopped with its workers
                )
            procs.append(proc)
            _wait_for_port(port, proc, log)
            ports.append(port)
        yield ports[0], ports[1]
    finally:
        for proc in reversed(procs):
            _stop(proc)


def test_portable_job_service_with_external_workers_gives_the_same_records(
    reference, tmp_path, job_service
):
    job_port, pool_port = job_service
    out = tmp_path / "portable"
    summary = record(
        str(SAMPLE_DIR / "*.wav"),
        out,
        *ARGS,
        "--runner",
        "PortableRunner",
        "--job_endpoint",
        f"localhost:{job_port}",
        "--environment_type",
        "EXTERNAL",
        "--environment_config",
        f"localhost:{pool_port}",
    )
    assert summary["windows"] == 18
    _assert_same_records(reference, out)
