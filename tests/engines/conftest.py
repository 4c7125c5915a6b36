"""Fixtures of the engine tests: the DirectRunner reference, job-server jars, a Flink cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines import clusters
from tests.support.record_helpers import SAMPLE_DIR, record

# Two shards: written by different workers on a parallel engine.
ARGS = ("--win_len", "16000", "--num_shards", "2")


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Path:
    """The bundled sample recorded in memory by the DirectRunner."""
    out = tmp_path_factory.mktemp("direct") / "out"
    record(str(SAMPLE_DIR / "*.wav"), out, *ARGS, "--direct_running_mode", "in_memory")
    return out


@pytest.fixture(scope="session")
def flink_jar() -> Path:
    return clusters.job_server_jar("flink")


@pytest.fixture(scope="session")
def spark_jar() -> Path:
    return clusters.job_server_jar("spark")


@pytest.fixture
def flink_cluster(tmp_path, flink_jar) -> Iterator[clusters.FlinkCluster]:
    """A JobManager and two TaskManager JVMs on 127.0.0.1, stopped by pid at teardown."""
    from runners import jobserver

    cluster = clusters.FlinkCluster(tmp_path / "flink", jobserver.lib_dir("flink"), taskmanagers=2)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory, spark_jar) -> Iterator[clusters.SparkCluster]:
    """A Spark master and worker JVM on 127.0.0.1, stopped by pid at teardown; one per test
    module (each job is an application of its own: the cluster keeps no state between them)."""
    from runners import jobserver

    directory = tmp_path_factory.mktemp("spark")
    cluster = clusters.SparkCluster(directory, jobserver.lib_dir("spark"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def worker_pool(tmp_path_factory) -> Iterator[int]:
    """``python -m runners.worker_pool`` on 127.0.0.1, one per test module: yields its port
    (each job's SDK workers are processes of their own, started on its request)."""
    pool, port = clusters.start_worker_pool(tmp_path_factory.mktemp("worker_pool"))
    try:
        yield port
    finally:
        pool.stop()
