"""``--resume`` (issue 30) in the other execution modes: the DirectRunner's multi_processing
workers, the portable runner (a job service and our worker pool), a Flink session cluster, and
a dataset on an object store (gs://, the emulator of tests/pipeline/test_reads_gcs.py); a run
planned in the job resumed in the job, on worker processes and on a Spark standalone cluster.

Each test runs a record killed once a read task has committed and before the job can finish,
then resumes it: the dataset must equal the uninterrupted reference (`assert_same_dataset`) and
the resumed run must have reused committed work (``reused_windows > 0``: how many tasks were
committed when the job was killed is not fixed). The reference is the in-memory DirectRunner's
with two workers (the same four read tasks), recorded once per test process on a read-only
corpus the tests resume in place (`resume_runs`, tests/conftest.py): every runner records the
DirectRunner's bytes (tests/engines/test_engines.py, test_runners_pipeline.py), and a dataset
on gs:// the local one's (tests/pipeline/test_reads_gcs.py).

The read tasks of these modes do not run in the launcher, so `tests.support.pause_points`
cannot stop them; `tests.support.resume_hold` holds the job instead, from inside its read tasks
wherever they run (a test subclass of the read DoFn, pickled with the job): once a task has
committed, no task reads any more and the job cannot finish. The kill then lands in the same
state every time, whatever the machine's speed; the tests wait only for the hold. The killed
launchers (and the ``gs://`` test's resumed one) are processes of their own in process groups of
their own, forked from one that imported Beam and TensorFlow once (`tests.support.forked`),
but on Spark and Flink, whose launchers need the cluster's environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines import record
from tests.engines import clusters
from tests.support import reliability
from tests.support.forked import ForkedProcess, Forker
from tests.support.reliability import ROOT, assert_same_dataset, cli, kill

pytestmark = pytest.mark.slow

WIN_LEN = reliability.RESUME_WIN_LEN
FILES = reliability.RESUME_FILES
WINDOWS = reliability.RESUME_WINDOWS  # per file: 240 windows, read tasks of 64: 4 tasks
HOLD_TIMEOUT_S = 300.0  # only stops a hung test: whether the hold is reached is not timing
MULTI = ("--direct_running_mode", "multi_processing", "--direct_num_workers", "2")
IN_MEMORY = ("--direct_running_mode", "in_memory", "--direct_num_workers", "2")
# the summary line of a resumed run (pipelines.record.summary_line): its reused windows
RESUMED = re.compile(r"; resumed: (\d+) windows reused")


def _args(pattern: str, out: Path | str, *extra: str) -> list[str]:
    return reliability.resume_args(pattern, out, *extra)


def _wait_for_hold(hold: Path, alive) -> str:
    """Waits until a read task of the job holds it (``hold/held``); returns what it wrote.
    `alive()`: whether the job is still running (it must not end before the hold)."""
    start = time.monotonic()
    while not (hold / "held").exists():
        assert alive(), "the job ended before any read task committed and held it"
        assert time.monotonic() - start < HOLD_TIMEOUT_S, "no read task held the job (hung?)"
        time.sleep(0.05)
    return (hold / "held").read_text()


def _held_run(forker: Forker, hold: Path, *argv: str, log: Path) -> ForkedProcess:
    """``python -m tests.support.resume_hold hold argv`` started by `forker`, output to `log`."""
    return forker.start(["-m", "tests.support.resume_hold", str(hold), *argv], stdout=log)


def _commits(out: Path) -> list[Path]:
    return sorted((out / ".tmp" / "commits").glob("*.json"))


def _assert_unfinished_with_commits(out: Path) -> None:
    assert not (out / "manifest.json").exists(), "the killed run finished: nothing to resume"
    assert _commits(out), "the killed run committed nothing"


def _reused_windows(summary: str) -> int:
    """The windows a resumed run reused, from the record command's summary line."""
    found = RESUMED.search(summary)
    assert found, f"the resumed run reused nothing: {summary[-2000:]}"
    return int(found.group(1))


def test_multi_processing_killed_after_a_commit_resumes_byte_identical(
    resume_runs, forker, tmp_path
):
    """Workers in subprocesses of the launcher (its process group): SIGKILL to the group kills
    the launcher and both workers while one holds after its commit."""
    pattern, want = resume_runs.pattern, resume_runs.reference(*IN_MEMORY)
    out, hold = tmp_path / "out", tmp_path / "hold"

    hold.mkdir()
    proc = _held_run(forker, hold, *_args(pattern, out, *MULTI), log=tmp_path / "killed.log")
    try:
        held = _wait_for_hold(hold, lambda: proc.poll() is None)
        assert int(held.split()[0]) != proc.pid, "the read task ran in the launcher, not a worker"
        _assert_unfinished_with_commits(out)
    finally:
        kill(proc)  # SIGKILL to the launcher's process group: launcher and workers
        (hold / "release").touch()
    assert not (out / "manifest.json").exists()

    result = record.run(_args(pattern, out, *MULTI, "--resume"))
    assert 0 < result.reused_windows < FILES * WINDOWS, result
    assert result.num_examples == FILES * WINDOWS
    assert_same_dataset(out, want)
    assert not (out / ".tmp").exists()


def _assert_resumed_in_the_job(result) -> None:
    """The resumed run was planned in the job: its plan step read every header (the launcher
    reads none) and its tasks' reuse was decided there (the job's counters)."""
    assert result.counters.get("headers_read") == FILES, result.counters
    assert 0 < result.counters.get("reused_windows", 0) == result.reused_windows < FILES * WINDOWS
    assert result.num_examples == FILES * WINDOWS


def test_planned_in_the_job_multi_processing_killed_after_a_commit_resumes_in_the_job(
    resume_runs, forker, tmp_path
):
    """A run planned in the job on worker processes, killed once a task committed, resumes in
    the job (the launcher compares the fingerprint made from the listing; each task reads its
    own commit records where it runs) to the uninterrupted dataset byte for byte."""
    pattern, want = resume_runs.pattern, resume_runs.reference(*IN_MEMORY)
    out, hold = tmp_path / "out", tmp_path / "hold"

    hold.mkdir()
    argv = ("--in_job", *_args(pattern, out, *MULTI))
    proc = _held_run(forker, hold, *argv, log=tmp_path / "killed.log")
    try:
        _wait_for_hold(hold, lambda: proc.poll() is None)
        _assert_unfinished_with_commits(out)
    finally:
        kill(proc)
        (hold / "release").touch()
    assert json.loads((out / ".tmp" / "resume.json").read_text())["planned_in"] == "job"

    result = record.run(_args(pattern, out, *MULTI, "--resume"))
    _assert_resumed_in_the_job(result)
    assert_same_dataset(out, want)
    assert not (out / ".tmp").exists()


def test_planned_in_the_job_on_a_spark_cluster_killed_after_a_commit_resumes_in_the_job(
    resume_runs, tmp_path
):
    """The same on a Spark standalone cluster with our SDK workers: the killed launcher takes
    its job server (the Spark driver) with it; the resume is a new Spark job whose plan step
    and reuse run on the cluster's workers. Each job keeps one SDK worker per executor for all
    its stages (`clusters.KEEP_WORKERS`): the killed job's die with its executors, so the resume
    (a new Spark application, new executors) starts its own."""
    from runners import jobserver

    clusters.job_server_jar("spark")
    pattern, want = resume_runs.pattern, resume_runs.reference(*IN_MEMORY)
    out, hold = tmp_path / "out", tmp_path / "hold"
    cluster = clusters.SparkCluster(tmp_path / "spark", jobserver.lib_dir("spark"))
    try:
        with _worker_pool(tmp_path) as pool:
            spark = ("--runner", "SparkRunner", "--spark_master_url", cluster.url)
            spark += ("--spark_job_server_jar", str(jobserver.jar_path("spark")))
            spark += ("--environment_type", "EXTERNAL")
            spark += ("--environment_config", f"127.0.0.1:{pool}", *clusters.KEEP_WORKERS)
            hold.mkdir()
            argv = (str(hold), "--in_job", *_args(pattern, out, *spark))
            proc = cli(
                *argv,
                log=tmp_path / "killed.log",
                module="tests.support.resume_hold",
                env=cluster.env,
            )
            try:
                _wait_for_hold(hold, lambda: proc.poll() is None)
                _assert_unfinished_with_commits(out)
            finally:
                kill(proc)  # the launcher and its job server, the Spark application's driver
                (hold / "release").touch()
            with pytest.MonkeyPatch.context() as env:
                for key, value in cluster.env.items():
                    env.setenv(key, value)
                result = record.run(_args(pattern, out, *spark, "--resume"))
    finally:
        cluster.stop()
    _assert_resumed_in_the_job(result)
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


def test_portable_runner_killed_after_a_commit_resumes_byte_identical(
    resume_runs, forker, tmp_path
):
    """A local job service runs the job, our worker pool its bundles: the kill is SIGKILL to the
    launcher and to the job service (which runs the job: the job dies with it; the pool's
    workers, a cluster's, outlive it); the resume goes to a new job service, same pool."""
    pattern, want = resume_runs.pattern, resume_runs.reference(*IN_MEMORY)
    out, hold = tmp_path / "out", tmp_path / "hold"
    with _worker_pool(tmp_path) as pool:
        service, port = _job_service(tmp_path, "job_service_1")
        try:
            hold.mkdir()
            argv = _args(pattern, out, *_portable(port, pool))
            proc = _held_run(forker, hold, *argv, log=tmp_path / "killed.log")
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
    assert 0 < result.reused_windows < FILES * WINDOWS, result
    assert result.num_examples == FILES * WINDOWS
    assert_same_dataset(out, want)
    assert not (out / ".tmp").exists()


@pytest.fixture
def flink_cluster(tmp_path, monkeypatch) -> Iterator[clusters.FlinkCluster]:
    """tests/engines' session cluster (a JobManager and two TaskManager JVMs on 127.0.0.1),
    made here with the same settings: that fixture is not visible from this package. The job
    servers the test's launchers start get the cluster's quick-start JVM flags."""
    from runners import jobserver

    clusters.job_server_jar("flink")  # skips without java / the jar, as the engine tests do
    for key, value in clusters.QUICK_JVM_ENV.items():
        monkeypatch.setenv(key, value)
    cluster = clusters.FlinkCluster(tmp_path / "flink", jobserver.lib_dir("flink"), taskmanagers=2)
    try:
        yield cluster
    finally:
        cluster.stop()


def _flink(master: str, pool_port: int) -> tuple[str, ...]:
    from runners import jobserver

    return (
        "--runner", "FlinkRunner", "--flink_master", master, "--parallelism", "2",
        "--flink_version", jobserver.FLINK_VERSION,
        "--flink_job_server_jar", str(jobserver.jar_path("flink")),
        "--environment_type", "EXTERNAL", "--environment_config", f"127.0.0.1:{pool_port}",
    )  # fmt: skip


def _rest(master: str, path: str, *, method: str = "GET") -> dict:
    request = urllib.request.Request(f"http://{master}{path}", method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else {}


def _flink_jobs(master: str) -> list[dict]:
    return _rest(master, "/jobs/overview")["jobs"]


def _launch(directory: Path, name: str, module: str, *argv: str) -> clusters.Process:
    """``python -m module argv`` in its own process group (its job server joins it)."""
    return clusters.Process(name, [sys.executable, "-m", module, *argv], directory / f"{name}.log")


def test_flink_job_cancelled_after_a_commit_resumes_byte_identical(
    flink_cluster, resume_runs, tmp_path
):
    """On the session cluster the kill hits the Flink job, not a TaskManager: it is cancelled
    through Flink's REST API while held (every TaskManager stays up); the launcher, told its job
    was cancelled, exits and its job server is stopped. The resume is a new Flink job on the
    same cluster, its workers from the same pool (one per TaskManager, kept for the job:
    `clusters.KEEP_WORKERS`). That two TaskManagers' workers of one id never stop each other is
    tested on the pool itself (tests/engines/test_worker_pool.py): with the workers kept for the
    job no stop reaches the pool while the other TaskManager's worker of that id runs, so this
    test would also pass with Beam's pool. The reference is the in-memory
    DirectRunner's (two workers: the same read tasks; a third Flink job would cost minutes
    more): tests/engines/test_engines.py shows that Flink records the DirectRunner's bytes."""
    pattern, want = resume_runs.pattern, resume_runs.reference(*IN_MEMORY)
    out, hold = tmp_path / "out", tmp_path / "hold"
    master = flink_cluster.master
    with _worker_pool(tmp_path) as pool:
        hold.mkdir()
        argv = _args(pattern, out, *_flink(master, pool), *clusters.KEEP_WORKERS)
        job = _launch(tmp_path, "killed", "tests.support.resume_hold", str(hold), *argv)
        try:
            _wait_for_hold(hold, lambda: job.proc.poll() is None)
            _assert_unfinished_with_commits(out)
            (running,) = [j for j in _flink_jobs(master) if j["state"] == "RUNNING"]
            _rest(master, f"/jobs/{running['jid']}?mode=cancel", method="PATCH")
            deadline = time.monotonic() + HOLD_TIMEOUT_S
            while _rest(master, f"/jobs/{running['jid']}")["state"] != "CANCELED":
                (hold / "release").touch()  # once cancelling: held tasks end, no restart
                assert time.monotonic() < deadline, "the Flink job was not cancelled"
                time.sleep(0.2)
            job.proc.wait(timeout=120)  # the launcher sees its job cancelled
            assert job.proc.returncode != 0, job.tail()
        finally:
            job.stop()
            (hold / "release").touch()
        assert not (out / "manifest.json").exists()
        assert all(tm.proc.poll() is None for tm in flink_cluster.taskmanagers)

        resume = _args(pattern, out, *_flink(master, pool), *clusters.KEEP_WORKERS, "--resume")
        result = record.run(resume)
    assert 0 < result.reused_windows < FILES * WINDOWS, result
    assert result.num_examples == FILES * WINDOWS
    assert_same_dataset(out, want)
    assert not (out / ".tmp").exists()


@pytest.fixture
def gcs(tmp_path):
    """tests/pipeline/test_reads_gcs.py's emulator (fake-gcs-server behind its fronts), with bucket
    ``out``; no request may leave 127.0.0.1."""
    from tests.support.gcs_server import running_gcs_server

    (tmp_path / "gcs-tls").mkdir()
    with running_gcs_server(tmp_path / "gcs-tls") as server:
        server.create_bucket("out")
        yield server
        assert server.refused == [], "requests to other hosts than the emulator's"


@pytest.fixture
def gs_forker(gcs) -> Iterator[Forker]:
    """Runs commands with the emulator's environment (the test process's own clients stay
    unredirected): each a process of its own, forked from one that imported Beam and TensorFlow
    once."""
    forker = Forker({**os.environ, **gcs.env(), "TF_CPP_MIN_LOG_LEVEL": "2"}, ROOT)
    try:
        yield forker
    finally:
        forker.close()


def _gs_cli(gs_forker: Forker, *argv: str) -> str:
    """``python -m pipelines.record argv`` with the emulator's environment, which must succeed;
    its output."""
    done = gs_forker.run(["-m", "pipelines.record", *argv], timeout=600)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-4000:]
    return text


def _download(gcs, prefix: str, directory: Path) -> Path:
    """The objects under ``gs://out/<prefix>`` as files under `directory`."""
    for name in gcs.list_names("out", prefix):
        if name.endswith("/"):  # a folder placeholder
            continue
        path = directory / name.removeprefix(prefix)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gcs.read_object("out", name))
    return directory


def test_gs_output_killed_after_a_commit_resumes_byte_identical(
    gcs, gs_forker, resume_runs, tmp_path
):
    """The dataset on gs:// (the emulator), the job on the in-memory DirectRunner with two
    workers (its read tasks in the launcher's threads): SIGKILL to the launcher's process group
    while held; resumed into the same gs:// directory, which then holds the local uninterrupted
    run's dataset."""
    pattern, hold = resume_runs.pattern, tmp_path / "hold"
    gs_args = ("--no_auth", *IN_MEMORY)

    hold.mkdir()
    argv = _args(pattern, "gs://out/ds", *gs_args)
    proc = _held_run(gs_forker, hold, *argv, log=tmp_path / "killed.log")
    try:
        _wait_for_hold(hold, lambda: proc.poll() is None)
        names = gcs.list_names("out", "ds/")
        assert "ds/manifest.json" not in names, "the killed run finished: nothing to resume"
        commits = [n for n in names if n.startswith("ds/.tmp/commits/") and n.endswith(".json")]
        assert commits, names
    finally:
        kill(proc)
        (hold / "release").touch()
    assert "ds/manifest.json" not in gcs.list_names("out", "ds/")

    text = _gs_cli(gs_forker, *_args(pattern, "gs://out/ds", *gs_args, "--resume"))
    assert 0 < _reused_windows(text) < FILES * WINDOWS, text[-2000:]
    names = gcs.list_names("out", "ds/")
    assert not [n for n in names if n.startswith("ds/.tmp/")], names
    got = _download(gcs, "ds/", tmp_path / "got")
    assert_same_dataset(got, resume_runs.reference(*IN_MEMORY))
