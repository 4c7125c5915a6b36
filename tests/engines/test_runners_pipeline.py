"""The record job gives the same records on every local path a cluster uses.

One in-memory run is the reference; the DirectRunner with two worker processes, and the portable
path a Flink cluster runs (a Beam job service + an EXTERNAL worker pool, both started here as
subprocesses on free loopback ports) must write byte-identical shards and the same manifest.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines import clusters
from tests.support.record_helpers import SAMPLE_DIR, load_manifest, record, without_times

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ARGS = ("--win_len", "16000", "--features", "log_mel,mfcc", "--num_shards", "2")
START_TIMEOUT_S = 90.0


def _comparable(output_dir: Path) -> dict:
    manifest = without_times(load_manifest(output_dir))
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


def test_direct_runner_multi_processing_gives_the_same_records(reference, forker, tmp_path):
    # The real command line (forked: `forker`, run as __main__): DoFns and lambdas pickled from
    # __main__, two SDK worker processes.
    out = tmp_path / "mp"
    command = ["-m", "pipelines.record", "--output_dir", str(out), *ARGS]
    command += ["--input_pattern", str(SAMPLE_DIR / "*.wav")]
    command += ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
    done = forker.run(command, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "recorded 18 windows" in done.stdout
    _assert_same_records(reference, out)


@pytest.fixture
def job_service(tmp_path) -> Iterator[tuple[int, int]]:
    """(job service port, worker pool port): both running until the test ends."""
    started: list[clusters.Process] = []
    try:
        port = clusters.free_port()
        service = clusters.Process(
            "job service",
            [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main"]
            + ["--port", str(port)],
            tmp_path / "job_service.log",
        )
        started.append(service)
        service.wait_listening(port, timeout_s=START_TIMEOUT_S)
        pool, pool_port = clusters.start_worker_pool(tmp_path, timeout_s=START_TIMEOUT_S)
        started.append(pool)
        yield port, pool_port
    finally:
        for process in reversed(started):
            process.stop()


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
    assert summary.num_examples == 18
    _assert_same_records(reference, out)
