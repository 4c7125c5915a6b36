"""``--environment_type EXTERNAL``: our worker pool starts workers, a broken pool fails in one line.

Both are the traps met when the project was served by a worker pool from a virtualenv that was
not activated: Beam's pool starts workers with the first ``python`` on PATH (without
apache_beam, they die at start), and the launcher then waited minutes for a worker that never
came. Real pools, real worker processes, real launcher check; no JVM needed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from runners import RunnerError
from runners.external import check_worker_pool
from tests.engines.clusters import Process, free_port
from tests.support.record_helpers import SAMPLE_DIR, cli_error

pytestmark = pytest.mark.slow

NO_BEAM_PYTHON = "/usr/bin/python3"  # the system interpreter: no apache_beam


def _pool(tmp_path: Path, module: str, path: str) -> tuple[Process, int]:
    port = free_port()
    pool = Process(
        module,
        [sys.executable, "-m", module, "--service_port", str(port)],
        tmp_path / f"{module}.log",
        env={"PATH": path},
    )
    pool.wait_listening(port)
    return pool, port


def test_our_pool_starts_workers_with_its_own_interpreter_whatever_path_says(tmp_path):
    # PATH's python (if any) is not this virtualenv's: Beam's pool would start workers with it.
    pool, port = _pool(tmp_path, "runners.worker_pool", "/usr/bin:/bin")
    try:
        check_worker_pool(f"127.0.0.1:{port}", timeout_s=120)
    finally:
        pool.stop()
    assert f"workers run {sys.executable}" in pool.log.read_text()


@pytest.mark.skipif(not os.path.exists(NO_BEAM_PYTHON), reason=f"needs {NO_BEAM_PYTHON}")
def test_a_pool_whose_workers_die_fails_the_launch_with_one_line(tmp_path, capsys):
    # Beam's own pool, with a `python` on PATH that has no apache_beam: every worker dies.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(NO_BEAM_PYTHON)
    pool, port = _pool(tmp_path, "apache_beam.runners.worker.worker_pool_main", str(bin_dir))
    out = tmp_path / "out"
    try:
        line = cli_error(
            capsys,
            *("--input_pattern", str(SAMPLE_DIR / "*.wav"), "--output_dir", str(out)),
            *("--runner", "PortableRunner", "--job_endpoint", "embed"),
            *("--environment_type", "EXTERNAL", "--environment_config", f"127.0.0.1:{port}"),
            *("--worker_start_timeout_s", "8"),
        )
    finally:
        pool.stop()
    assert line == (
        f"error: no SDK worker from the worker pool at 127.0.0.1:{port} (python -m "
        "runners.worker_pool) connected within 8 s: its workers fail at start or cannot reach "
        "this machine; see the pool's output (--worker_start_timeout_s 0 skips this check)"
    )
    assert "No module named 'apache_beam'" in pool.log.read_text()  # where the line points
    assert not out.exists()


def test_a_pool_that_does_not_answer_fails_with_one_line():
    port = free_port()  # nothing listens there
    with pytest.raises(RunnerError, match=f"worker pool at 127.0.0.1:{port} .* did not answer"):
        check_worker_pool(f"127.0.0.1:{port}", timeout_s=5)
