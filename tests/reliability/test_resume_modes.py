"""``--resume`` (issue 30) in the other execution modes: the DirectRunner's multi_processing
workers, the portable runner (a job service and our worker pool), a Flink session cluster, and
a dataset on an object store (gs://, the emulator of tests/pipeline/test_gcs.py).

Each test records an uninterrupted reference run, then a run killed once a read task has
committed and before the job can finish, then resumes it: the dataset must equal the reference
(`assert_same_dataset`) and the resumed run must have reused committed work
(``reused_windows > 0``: how many tasks were committed when the job was killed is not fixed).

The read tasks of these modes do not run in the launcher, so `tests.support.pause_points`
cannot stop them; `tests.support.resume_hold` holds the job instead, from inside its read tasks
wherever they run (a test subclass of the read DoFn, pickled with the job): once a task has
committed, no task reads any more and the job cannot finish. The kill then lands in the same
state every time, whatever the machine's speed; the tests wait only for the hold.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines import record
from tests.engines import clusters
from tests.support import wavgen
from tests.support.reliability import assert_same_dataset, cli, kill

pytestmark = pytest.mark.slow

WIN_LEN = 1024
FILES = 6
WINDOWS = 40  # per file: 240 windows, read tasks of 64 (pipelines.plan.MIN_TASK_ROWS): 4 tasks
HOLD_TIMEOUT_S = 300.0  # only stops a hung test: whether the hold is reached is not timing
MULTI = ("--direct_running_mode", "multi_processing", "--direct_num_workers", "2")
RESUMED = re.compile(r"; resumed: (\d+) of (\d+) read tasks \((\d+) windows\) reused")


def _corpus(directory: Path) -> str:
    directory.mkdir(parents=True)
    for i in range(FILES):
        samples = wavgen.synth(WINDOWS * WIN_LEN + 5, seed=i)
        wavgen.write_wav(
            directory / f"f{i}_{'ab'[i % 2]}.wav", samples, sample_rate=16000, subtype="PCM_16"
        )
    return str(directory / "*.wav")


def _args(pattern: str, out: Path | str, *extra: str) -> list[str]:
    return [
        "--input_pattern",
        pattern,
        "--output_dir",
        str(out),
        "--win_len",
        str(WIN_LEN),
        "--num_shards",
        "3",
        *extra,
    ]


def _wait_for_hold(hold: Path, alive) -> str:
    """Waits until a read task of the job holds it (``hold/held``); returns what it wrote.
    `alive()`: whether the job is still running (it must not end before the hold)."""
    start = time.monotonic()
    while not (hold / "held").exists():
        assert alive(), "the job ended before any read task committed and held it"
        assert time.monotonic() - start < HOLD_TIMEOUT_S, "no read task held the job (hung?)"
        time.sleep(0.05)
    time.sleep(0.2)  # the holder writes its pid right after creating the file
    return (hold / "held").read_text()


def _commits(out: Path) -> list[Path]:
    return sorted((out / ".tmp" / "commits").glob("*.json"))


def _assert_unfinished_with_commits(out: Path) -> None:
    assert not (out / "manifest.json").exists(), "the killed run finished: nothing to resume"
    assert _commits(out), "the killed run committed nothing"


def _reused(summary: str) -> tuple[int, int, int]:
    """(reused tasks, total tasks, reused windows) from the record command's summary line."""
    found = RESUMED.search(summary)
    assert found, f"the resumed run reused nothing: {summary[-2000:]}"
    return tuple(int(n) for n in found.groups())


def test_multi_processing_killed_after_a_commit_resumes_byte_identical(tmp_path):
    """Workers in subprocesses of the launcher (its process group): SIGKILL to the group kills
    the launcher and both workers while one holds after its commit."""
    pattern = _corpus(tmp_path / "corpus")
    want, out, hold = tmp_path / "uninterrupted", tmp_path / "out", tmp_path / "hold"
    record.run(_args(pattern, want, *MULTI))

    hold.mkdir()
    proc = cli(
        str(hold),
        *_args(pattern, out, *MULTI),
        log=tmp_path / "killed.log",
        module="tests.support.resume_hold",
    )
    try:
        held = _wait_for_hold(hold, lambda: proc.poll() is None)
        assert int(held.split()[0]) != proc.pid, "the read task ran in the launcher, not a worker"
        _assert_unfinished_with_commits(out)
    finally:
        kill(proc)  # SIGKILL to the launcher's process group: launcher and workers
        (hold / "release").touch()
    assert not (out / "manifest.json").exists()

    result = record.run(_args(pattern, out, *MULTI, "--resume"))
    assert result.total_tasks == 4 and 0 < result.reused_tasks < 4, result
    assert 0 < result.reused_windows < FILES * WINDOWS, result
    assert result.num_examples == FILES * WINDOWS
    assert_same_dataset(out, want)
    assert not (out / ".tmp").exists()


def _job_service(directory: Path, name: str) -> tuple[clusters.Process, int]:
    """Beam's local job service (`local_job_service_main`: runs the job's stages, handing bundles
    to the EXTERNAL worker pool) on 127.0.0.1, in its own process group."""
    port = clusters.free_port()
    command = [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main"]
    service = clusters.Process(
        f"job service ({name})", [*command, "--port", str(port)], directory / f"{name}.log"
    )
    service.wait_listening(port)
    return service, port


def _sigkill(process: clusters.Process) -> None:
    """SIGKILL to `process`'s process group (a crash); reaped."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.proc.wait(timeout=30)


@contextlib.contextmanager
def _worker_pool(directory: Path) -> Iterator[int]:
    """``python -m runners.worker_pool`` (tests/engines' fixture, which this package cannot
    use): yields its port."""
    pool, port = clusters.start_worker_pool(directory)
    try:
        yield port
    finally:
        pool.stop()


def _portable(job_port: int, pool_port: int) -> tuple[str, ...]:
    return (
        "--runner", "PortableRunner", "--job_endpoint", f"localhost:{job_port}",
        "--environment_type", "EXTERNAL", "--environment_config", f"localhost:{pool_port}",
    )  # fmt: skip


def test_portable_runner_killed_after_a_commit_resumes_byte_identical(tmp_path):
    """A local job service runs the job, our worker pool its bundles: the kill is SIGKILL to the
    launcher and to the job service (which runs the job: the job dies with it; the pool's
    workers, a cluster's, outlive it); the resume goes to a new job service, same pool."""
    pattern = _corpus(tmp_path / "corpus")
    want, out, hold = tmp_path / "uninterrupted", tmp_path / "out", tmp_path / "hold"
    with _worker_pool(tmp_path) as pool:
        service, port = _job_service(tmp_path, "job_service_1")
        try:
            record.run(_args(pattern, want, *_portable(port, pool)))
            hold.mkdir()
            proc = cli(
                str(hold),
                *_args(pattern, out, *_portable(port, pool)),
                log=tmp_path / "killed.log",
                module="tests.support.resume_hold",
            )
            try:
                held = _wait_for_hold(hold, lambda: proc.poll() is None)
                assert int(held.split()[0]) != proc.pid, "a read task ran in the launcher"
                _assert_unfinished_with_commits(out)
            finally:
                kill(proc)  # the launcher's process group
        finally:
            _sigkill(service)  # the job service, and with it the job
            service.stop()
            (hold / "release").touch()
        assert not (out / "manifest.json").exists()

        service, port = _job_service(tmp_path, "job_service_2")
        try:
            result = record.run(_args(pattern, out, *_portable(port, pool), "--resume"))
        finally:
            service.stop()
    assert result.total_tasks == 4 and 0 < result.reused_tasks < 4, result
    assert 0 < result.reused_windows < FILES * WINDOWS, result
    assert result.num_examples == FILES * WINDOWS
    assert_same_dataset(out, want)
    assert not (out / ".tmp").exists()
