"""runners/: runner names, flag checks, fail-fast probes, thread limits, and the documented recipes.

Nothing here runs a pipeline (see test_runners_pipeline.py and test_dataflow.py).
"""

from __future__ import annotations

import re
import shlex
import socket
import time
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import (
    DirectOptions,
    FlinkRunnerOptions,
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    SparkRunnerOptions,
    StandardOptions,
)

import runners
from pipelines import record
from runners import direct, portable, support, threads
from tests.support.docs import pages
from tests.support.record_helpers import SAMPLE_DIR

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = str(SAMPLE_DIR / "*.wav")
DOCS = pages()  # README.md and docs/*.md (the engine recipes: docs/running-at-scale.md)
# "Fails fast" means our probe answers instead of Beam's own waits, which are minutes here
# (a job server's start-up wait, gRPC's 5-minute deadline). A refused connection or a missing
# jar is seen in well under a second; 60 s is a margin no loaded CI machine reaches and still far
# below what the unprobed path would take.
FAIL_FAST_S = 60


def _configure(*argv: str, input_bytes: int = 1000) -> PipelineOptions:
    args = ["--input_pattern", SAMPLE, "--output_dir", "/tmp/unused", *argv]
    return runners.configure(PipelineOptions(args), input_bytes=input_bytes, argv=args)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (None, "DirectRunner"),
        ("direct", "DirectRunner"),
        ("flink", "FlinkRunner"),
        ("FLINKRUNNER", "FlinkRunner"),
        ("apache_beam.runners.portability.flink_runner.FlinkRunner", "FlinkRunner"),
        ("Dataflow", "DataflowRunner"),
        ("PortableRunner", "PortableRunner"),
        ("SparkRunner", "SparkRunner"),
        (direct.LOCAL_RUNNER, "DirectRunner"),
    ],
)
def test_runner_names_resolve(value, name):
    assert runners.engine_for(value).name == name


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("SparkyRunner", "unknown runner 'SparkyRunner'; known runners: DirectRunner, "),
        ("my.module.Runner", "unknown runner 'my.module.Runner'"),
        ("DaskRunner", "DaskRunner is not supported: "),
        ("apache_beam.runners.dask.dask_runner.DaskRunner", "DaskRunner is not supported"),
    ],
)
def test_unknown_and_unsupported_runners_list_the_known_ones(value, message):
    with pytest.raises(runners.RunnerError, match=re.escape(message)) as e:
        runners.engine_for(value)
    assert all(name in str(e.value) for name in runners.KNOWN_RUNNERS)


def test_misspelt_option_is_an_error_not_silently_dropped():
    with pytest.raises(runners.RunnerError, match="unknown option --max_num_worker "):
        _configure("--max_num_worker", "3")


def test_direct_runner_small_input_runs_in_memory_without_prism():
    options = _configure()
    d = options.view_as(DirectOptions)
    assert (d.direct_running_mode, d.direct_num_workers) == ("in_memory", 1)
    assert options.view_as(StandardOptions).runner == direct.LOCAL_RUNNER
    assert runners.sequential_tasks(options)  # one thread runs the tasks: the job plans one


@pytest.mark.parametrize(
    "argv",
    [
        ("--direct_num_workers", "2"),
        ("--direct_running_mode", "multi_threading"),
        ("--direct_running_mode", "in_memory", "--direct_num_workers", "2"),
    ],
)
def test_tasks_are_planned_for_parallel_workers_when_bundles_run_side_by_side(argv):
    assert not runners.sequential_tasks(_configure(*argv, input_bytes=0))


@pytest.mark.parametrize(
    ("cores", "input_bytes", "mode", "workers"),
    [  # the documented rule, as literals: worker processes from 4 cores and 1 GiB of input
        (8, 1 << 30, "multi_processing", 8),
        (4, 1 << 30, "multi_processing", 4),
        (8, (1 << 30) - 1, "in_memory", 1),
        (3, 1 << 40, "in_memory", 1),
        (2, 10 << 30, "in_memory", 1),
        (1, 0, "in_memory", 1),
    ],
)
def test_direct_runner_follows_the_measured_policy(monkeypatch, cores, input_bytes, mode, workers):
    monkeypatch.setattr(direct.os, "cpu_count", lambda: cores)
    d = _configure(input_bytes=input_bytes).view_as(DirectOptions)
    assert (d.direct_running_mode, d.direct_num_workers) == (mode, workers)


def test_direct_runner_keeps_user_choices_and_plugs_in_the_thread_limit():
    options = _configure("--direct_num_workers", "2", input_bytes=0)
    d = options.view_as(DirectOptions)
    assert (d.direct_running_mode, d.direct_num_workers) == ("multi_processing", 2)
    assert support.WORKER_PLUGIN in options.view_as(SetupOptions).beam_plugins
    d = _configure("--direct_running_mode", "multi_threading").view_as(DirectOptions)
    assert d.direct_running_mode == "multi_threading" and d.direct_num_workers >= 1
    d = _configure("--direct_running_mode", "in_memory", input_bytes=1 << 40).view_as(DirectOptions)
    assert (d.direct_running_mode, d.direct_num_workers) == ("in_memory", 1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--runner", "PortableRunner"], "PortableRunner needs --job_endpoint"),
        (
            ["--runner", "PortableRunner", "--job_endpoint", "embed", "--environment_type", "X"],
            "--environment_type must be one of LOOPBACK, EXTERNAL, DOCKER, PROCESS",
        ),
        (
            ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=EXTERNAL"],
            "EXTERNAL needs --environment_config HOST:PORT",
        ),
        (["--runner", "FlinkRunner", "--parallelism", "0"], "--parallelism must be >= 1"),
        (["--runner", "DataflowRunner"], "DataflowRunner needs --project; DataflowRunner needs"),
        (
            ["--runner", "DataflowRunner", "--project", "p", "--region", "r"]
            + ["--temp_location", "/tmp/t"],
            "--temp_location must be a gs:// path",
        ),
        (
            ["--runner", "DataflowRunner", "--project", "p", "--region", "r"]
            + ["--temp_location", "gs://b/t"],
            f"--input_pattern {SAMPLE} is local: Dataflow workers only see cloud storage",
        ),
        (["--direct_num_workers", "-1"], "--direct_num_workers must be >= 0"),
    ],
)
def test_static_checks_name_the_flag(argv, message):
    with pytest.raises(runners.RunnerError, match=re.escape(message)):
        _configure(*argv)


def test_portable_embed_defaults_to_loopback_and_a_dead_job_service_fails_fast():
    options = _configure("--runner", "PortableRunner", "--job_endpoint", "embed")
    assert options.view_as(PortableOptions).environment_type == "LOOPBACK"
    port = _closed_port()
    start = time.monotonic()
    with pytest.raises(runners.RunnerError, match=f"--job_endpoint localhost:{port}: nothing"):
        _configure("--runner", "PortableRunner", "--job_endpoint", f"localhost:{port}")
    assert time.monotonic() - start < FAIL_FAST_S


def test_docker_environment_stages_our_package():
    options = _configure(
        "--runner", "PortableRunner", "--job_endpoint", "embed", "--environment_type", "DOCKER"
    )
    setup = options.view_as(SetupOptions)
    assert setup.setup_file == str(ROOT / "setup.py")
    assert support.WORKER_PLUGIN in setup.beam_plugins


def test_flink_with_an_unreachable_master_fails_in_seconds_with_one_line(capsys, tmp_path):
    port = _closed_port()
    start = time.monotonic()
    code = record.main(
        ["--input_pattern", SAMPLE, "--output_dir", str(tmp_path / "o")]
        + ["--runner", "FlinkRunner", "--flink_master", f"localhost:{port}"]
    )
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0] == (
        f"error: --flink_master localhost:{port}: nothing answers at localhost:{port} "
        "(Connection refused)"
    )
    assert elapsed < FAIL_FAST_S, elapsed
    assert not (tmp_path / "o").exists()


def test_flink_without_the_job_server_jar_fails_in_seconds_with_the_fix(
    capsys, tmp_path, monkeypatch
):
    from apache_beam.utils import subprocess_server

    monkeypatch.setattr(subprocess_server.JavaJarServer, "JAR_CACHE", str(tmp_path / "jars"))
    monkeypatch.setenv("AUDIORECORDS_JAR_CACHE", str(tmp_path / "assembled"))  # none assembled
    monkeypatch.setattr(portable, "_maven_reachable", lambda url: False)  # offline, everywhere
    start = time.monotonic()
    code = record.main(
        ["--input_pattern", SAMPLE, "--output_dir", str(tmp_path / "o"), "--runner", "flink"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: FlinkRunner needs Beam's job-server jar beam-runners-flink-")
    assert "pass --flink_job_server_jar PATH" in err[0] and "--job_endpoint HOST:8099" in err[0]
    assert "assemble one with `python -m runners.jobserver flink` (Maven;" in err[0]
    assert "PATH with --flink_version 1.19" in err[0]
    assert time.monotonic() - start < FAIL_FAST_S


def _assembled(tmp_path, monkeypatch, engine: str) -> Path:
    """A job server as `python -m runners.jobserver ENGINE` leaves it (a stand-in jar file and
    the stamp of its artifacts), with no Beam jar cached and Maven never asked."""
    from apache_beam.utils import subprocess_server

    from runners import jobserver

    monkeypatch.setattr(subprocess_server.JavaJarServer, "JAR_CACHE", str(tmp_path / "beam"))
    monkeypatch.setenv(jobserver.CACHE_ENV, str(tmp_path / "assembled"))

    def no_maven(url):
        raise AssertionError(f"Maven asked for {url}: the assembled jar was not used")

    monkeypatch.setattr(portable, "_maven_reachable", no_maven)
    jar = jobserver.jar_path(engine)
    jobserver.lib_dir(engine).mkdir(parents=True)
    (jobserver.lib_dir(engine) / jobserver.STAMP).write_text(
        "\n".join(jobserver.JOB_SERVERS[engine].artifacts)
    )
    jar.write_bytes(b"PK")
    assert jobserver.cached(engine) == jar
    return jar


def test_flink_uses_the_assembled_job_server_and_says_so(tmp_path, monkeypatch, caplog):
    from runners import jobserver

    jar = _assembled(tmp_path, monkeypatch, "flink")
    with caplog.at_level("INFO", logger="audiorecords"):
        options = _configure("--runner", "FlinkRunner")
    flink = options.view_as(FlinkRunnerOptions)
    assert (flink.flink_job_server_jar, flink.flink_version) == (str(jar), jobserver.FLINK_VERSION)
    lines = [r.getMessage() for r in caplog.records if "job-server jar" in r.getMessage()]
    assert lines == [
        f"FlinkRunner: using the job-server jar `python -m runners.jobserver flink` assembled: "
        f"{jar}"
    ]


def test_flink_of_another_version_does_not_take_the_assembled_jar(tmp_path, monkeypatch):
    _assembled(tmp_path, monkeypatch, "flink")
    monkeypatch.setattr(portable, "_maven_reachable", lambda url: False)
    with pytest.raises(runners.RunnerError, match="pass --flink_job_server_jar .* with --flink_v"):
        _configure("--runner", "FlinkRunner", "--flink_version", "1.20")


def test_a_job_server_assembled_from_other_artifacts_is_named_not_used(tmp_path, monkeypatch):
    """A jar an older `python -m runners.jobserver` left (its stamp lists other artifacts): the
    stop names it and the command that assembles it again."""
    from runners import jobserver

    jar = _assembled(tmp_path, monkeypatch, "spark")
    (jobserver.lib_dir("spark") / jobserver.STAMP).write_text("org.apache.beam:older:2.61.0")
    monkeypatch.setattr(portable, "_maven_reachable", lambda url: False)
    with pytest.raises(runners.RunnerError) as stop:
        _configure("--runner", "SparkRunner")
    assert (
        f"{jar} was assembled from other artifacts than this version uses: run "
        "`python -m runners.jobserver spark` (Maven; later runs use it by themselves) again, or "
        "pass --spark_job_server_jar PATH"
    ) in str(stop.value)


def test_spark_uses_the_assembled_job_server(tmp_path, monkeypatch):
    jar = _assembled(tmp_path, monkeypatch, "spark")
    options = _configure("--runner", "SparkRunner")
    assert options.view_as(SparkRunnerOptions).spark_job_server_jar == str(jar)


def test_flink_job_server_jar_must_exist_and_java_must_be_there(tmp_path, monkeypatch):
    with pytest.raises(runners.RunnerError, match="--flink_job_server_jar /no/such.jar: no such"):
        _configure("--runner", "FlinkRunner", "--flink_job_server_jar", "/no/such.jar")
    jar = tmp_path / "beam-runners-flink-job-server.jar"
    jar.write_bytes(b"PK")
    monkeypatch.setattr(portable.shutil, "which", lambda name: None)
    with pytest.raises(runners.RunnerError, match="no `java` is on PATH"):
        _configure("--runner", "FlinkRunner", "--flink_job_server_jar", str(jar))
    monkeypatch.setattr(portable.shutil, "which", lambda name: "/usr/bin/java")
    options = _configure("--runner", "FlinkRunner", "--flink_job_server_jar", str(jar))
    assert options.view_as(PortableOptions).environment_type == "LOOPBACK"  # embedded Flink
    assert options.view_as(StandardOptions).runner.endswith("flink_runner.FlinkRunner")


def test_unreachable_probe_is_bounded():
    start = time.monotonic()
    assert support.unreachable("localhost", _closed_port()) == "Connection refused"
    assert support.unreachable("no-such-host.invalid", 80)
    assert time.monotonic() - start < FAIL_FAST_S


def test_single_threaded_limits_blas_and_restores_it():
    import numpy  # noqa: F401 - loads numpy's OpenBLAS

    before = threads.blas_threads()
    if not before:
        pytest.skip("no OpenBLAS loaded (numpy built against another BLAS)")
    with threads.single_threaded():
        assert set(threads.blas_threads()) == {1}
    assert threads.blas_threads() == before


def _documented_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every `python -m pipelines.record ...` in the docs' code blocks."""
    found = []
    for doc in DOCS:
        for block in re.findall(r"```[a-z]*\n(.*?)```", doc.read_text(), flags=re.S):
            text = block.replace("\\\n", " ")
            for line in text.splitlines():
                line = line.strip().removeprefix("$ ")
                if "python -m pipelines.record" not in line:
                    continue
                words = shlex.split(line.split("python -m pipelines.record", 1)[1], comments=True)
                argv = []
                for word in words:
                    if word in ("&&", "||", "|", ";", ">", "2>&1"):
                        break
                    argv.append(word)
                found.append((f"{doc.name}: {line[:60]}", argv))
    return found


def test_docs_have_recipes_for_every_engine():
    text = " ".join(" ".join(argv) for _, argv in _documented_commands())
    for runner in ("DataflowRunner", "FlinkRunner", "PortableRunner"):
        assert f"--runner {runner}" in text or f"--runner={runner}" in text, runner


@pytest.mark.parametrize(("where", "argv"), _documented_commands(), ids=lambda v: str(v)[:50])
def test_documented_commands_parse_with_our_options(where, argv):
    options = PipelineOptions(argv)
    opts = options.view_as(record.RecordOptions)  # argparse exits on a bad value
    assert opts.input_pattern and opts.output_dir, where
    runners.check(options, argv=argv)  # unknown runner or option, missing/invalid runner flags
