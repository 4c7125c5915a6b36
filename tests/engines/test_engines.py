"""The record job on real Apache Flink and Apache Spark gives the DirectRunner's dataset.

Each run is the user's command line (``python -m pipelines.record``) against a real engine on
this machine: Flink embedded in Beam's Flink job server, a Flink session cluster of separate
JVMs, and a Spark standalone cluster (master, worker and executor JVMs), the clusters with our
SDK workers from ``python -m runners.worker_pool``. Shards, schema and manifest (apart from
``created_utc``) must be byte-identical to an in-memory DirectRunner run of the same input.
On the session cluster a
TaskManager is killed (SIGKILL) in the middle of the job: Flink restarts the job on the other
TaskManager and the dataset must still be exact. On the Spark cluster the job is also run
planned in the job (`run_job(plan_in_job=True)`): its plan step reads the headers on the
separate SDK workers.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from runners import jobserver
from tests.engines import clusters
from tests.engines.conftest import ARGS
from tests.support.forked import Forker
from tests.support.record_helpers import SAMPLE_DIR
from tests.support.reliability import assert_same_dataset

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 1200.0  # only stops a hung run; nothing is asserted about time
KEEP_WORKERS = clusters.KEEP_WORKERS  # one SDK worker per executor / TaskManager for the job


def _argv(out: Path) -> list[str]:
    return ["--input_pattern", str(SAMPLE_DIR / "*.wav"), "--output_dir", str(out), *ARGS]


def _record(forker: Forker, out: Path, log: Path, *engine: str) -> clusters.Process:
    """The record command (forked: `forker`), with the environment of `_local_engines`."""
    argv = ["-m", "pipelines.record", *_argv(out), *engine]
    return clusters.Process.forked("record job", forker, argv, log, env=_local_engines(out.parent))


def _local_engines(directory: Path) -> dict[str, str]:
    """Environment that keeps the job servers' embedded Flink and Spark on 127.0.0.1."""
    conf = directory / "flink-conf"  # Beam's Flink job server reads $FLINK_CONF_DIR
    conf.mkdir(exist_ok=True)
    binds = ("jobmanager.bind-host", "taskmanager.bind-host", "taskmanager.host", "rest.address")
    text = "".join(f"{key}: 127.0.0.1\n" for key in (*binds, "rest.bind-address"))
    (conf / "flink-conf.yaml").write_text(text)
    return {"FLINK_CONF_DIR": str(conf), "SPARK_LOCAL_IP": "127.0.0.1", **clusters.QUICK_JVM_ENV}


def _finish(job: clusters.Process) -> str:
    """Waits for the launcher; then stops its process group (the job server it started)."""
    try:
        job.proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        job.stop()
    text = job.log.read_text(errors="replace")
    assert job.proc.returncode == 0, text[-4000:]
    return text


def _flink(jar: Path, master: str) -> tuple[str, ...]:
    return (
        "--runner", "FlinkRunner", "--flink_master", master, "--parallelism", "2",
        "--flink_version", jobserver.FLINK_VERSION, "--flink_job_server_jar", str(jar),
    )  # fmt: skip


def test_flink_embedded_gives_the_direct_runners_dataset(flink_jar, reference, forker, tmp_path):
    out, log = tmp_path / "out", tmp_path / "record.log"
    text = _finish(_record(forker, out, log, *_flink(flink_jar, "[local]")))
    assert "recorded 18 windows from 6 files (0 failed) into 2 " in text
    assert_same_dataset(out, reference)


def test_spark_standalone_cluster_gives_the_direct_runners_dataset(
    spark_cluster, worker_pool, reference, forker, tmp_path
):
    # `local[2]` inside the job server gives the same (docs/running-at-scale.md); this is the real
    # cluster path: the driver in the job server, executors as JVMs of their own, our SDK workers
    # from the pool.
    out, log = tmp_path / "out", tmp_path / "record.log"
    engine = ("--runner", "SparkRunner", "--spark_master_url", spark_cluster.url)
    engine += ("--spark_job_server_jar", str(jobserver.jar_path("spark")))
    external = (
        "--environment_type",
        "EXTERNAL",
        "--environment_config",
        f"127.0.0.1:{worker_pool}",
        *KEEP_WORKERS,
    )
    argv = ["-m", "pipelines.record", *_argv(out), *engine, *external]
    job = clusters.Process.forked("record job", forker, argv, log, env=spark_cluster.env)
    text = _finish(job)
    assert "recorded 18 windows from 6 files (0 failed) into 2 " in text
    assert_same_dataset(out, reference)


# the record job of `pipelines.record`'s command line, planned in the job whatever its inputs
PLANNED_IN_JOB = """
import sys
from apache_beam.options.pipeline_options import PipelineOptions
from pipelines import job
from pipelines.config import RecordConfig
from pipelines.record import RecordOptions
argv = sys.argv[1:]
config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(RecordOptions))
result = job.run_job(config, beam_argv=argv, plan_in_job=True)
print("planned in the job:", result.num_examples, "windows from", result.num_files, "files")
"""


def test_spark_cluster_plans_in_the_job_and_gives_the_direct_runners_dataset(
    spark_cluster, worker_pool, reference, forker, tmp_path
):
    # the job's plan step on separate SDK workers: they read the launcher's staged listing from
    # the output directory and the headers themselves
    out, log = tmp_path / "out", tmp_path / "record.log"
    engine = ("--runner", "SparkRunner", "--spark_master_url", spark_cluster.url)
    engine += ("--spark_job_server_jar", str(jobserver.jar_path("spark")))
    external = ("--environment_type", "EXTERNAL")
    external += ("--environment_config", f"127.0.0.1:{worker_pool}", *KEEP_WORKERS)
    argv = ["-c", PLANNED_IN_JOB, *_argv(out), *engine, *external]
    job = clusters.Process.forked(
        "record job planned in the job", forker, argv, log, env=spark_cluster.env
    )
    text = _finish(job)
    assert "planned in the job: 18 windows from 6 files" in text, text[-2000:]
    assert_same_dataset(out, reference)


def _job(master: str) -> dict | None:
    """The session cluster's one job (Flink's REST overview), or None before submission."""
    with urllib.request.urlopen(f"http://{master}/jobs/overview", timeout=10) as response:
        jobs = json.load(response)["jobs"]
    return jobs[0] if jobs else None


def test_flink_session_cluster_survives_a_killed_taskmanager(
    flink_cluster, worker_pool, reference, forker, tmp_path
):
    out, log = tmp_path / "out", tmp_path / "record.log"
    engine = _flink(jobserver.jar_path("flink"), flink_cluster.master)
    external = (
        "--environment_type",
        "EXTERNAL",
        "--environment_config",
        f"127.0.0.1:{worker_pool}",
        *KEEP_WORKERS,
    )
    job = _record(forker, out, log, *engine, *external)
    # Mid-run: some of the job's tasks have finished, others have not.
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        assert job.proc.poll() is None, job.tail(4000)
        assert time.monotonic() < deadline, "the job never got half-way"
        flink_job = _job(flink_cluster.master)
        if flink_job and 0 < flink_job["tasks"]["finished"] < flink_job["tasks"]["total"]:
            break
        time.sleep(0.5)
    victim = flink_cluster.taskmanagers[0]
    victim.kill()
    text = _finish(job)
    flink_job = _job(flink_cluster.master)
    assert flink_job["state"] == "FINISHED"
    url = f"http://{flink_cluster.master}/jobs/{flink_job['jid']}/exceptions"
    with urllib.request.urlopen(url, timeout=10) as response:
        failures = json.load(response)["exceptionHistory"]["entries"]
    assert failures, "the job finished without noticing the killed TaskManager"
    assert "recorded 18 windows from 6 files (0 failed) into 2 " in text
    assert_same_dataset(out, reference)
