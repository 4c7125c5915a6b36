"""Portable runners: a Beam job service (PortableRunner), Flink and Spark.

All three submit the same portable pipeline to a job service, which hands bundles to SDK
workers in one of Beam's environments:

- ``LOOPBACK``: workers run inside the launching process (``--job_endpoint embed`` or a local
  job service; the default with an embedded job service).
- ``EXTERNAL``: a worker pool already running next to the runner
  (``python -m runners.worker_pool --service_port 50000``; our package installed there).
- ``DOCKER`` / ``PROCESS``: the runner starts workers that install the staged files: our
  package is staged from setup.py automatically.

Flink and Spark need Beam's job-server jar, which Beam downloads from Maven Central on first
use. Without it (offline clusters) the job fails here within seconds with the flag to pass,
instead of after a download attempt with a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import urllib.request
from urllib.parse import urlparse

from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    PipelineOptions,
    PortableOptions,
    SparkRunnerOptions,
)

from runners import threads
from runners.external import ExternalWorkerOptions, check_worker_pool
from runners.support import (
    PROBE_TIMEOUT_S,
    RunnerError,
    add_plugin,
    host_port,
    stage_project,
    unreachable,
)

ENVIRONMENT_TYPES = ("LOOPBACK", "EXTERNAL", "DOCKER", "PROCESS")
FLINK_MAGIC_MASTERS = ("[auto]", "[local]")
FLINK_REST_PORT = 8081
SPARK_MASTER_PORT = 7077
JOB_SERVICE_PORT = 8099


def check_environment(options: PipelineOptions) -> list[str]:
    """Problems with --environment_type / --environment_config (static)."""
    portable = options.view_as(PortableOptions)
    kind = (portable.environment_type or "").upper()
    if not kind or ":" in kind:  # unset (runner default) or a raw environment URN
        return []
    if kind not in ENVIRONMENT_TYPES:
        return [f"--environment_type must be one of {', '.join(ENVIRONMENT_TYPES)}, got {kind}"]
    config = portable.environment_config
    if kind == "EXTERNAL":
        if not config:
            return [
                "--environment_type EXTERNAL needs --environment_config HOST:PORT of a worker "
                "pool (python -m runners.worker_pool --service_port PORT)"
            ]
        try:
            if not config.lstrip().startswith("{"):  # else Beam's JSON form {"url": ...}
                host_port(config, 0)
        except ValueError as e:
            return [f"--environment_config: {e}"]
    options_list = portable.environment_options or []
    if (
        kind == "PROCESS"
        and not config
        and not any(o.startswith("process_command=") for o in options_list)
    ):
        return [
            "--environment_type PROCESS needs --environment_config '{\"command\": PATH}' "
            "(the SDK harness boot executable)"
        ]
    return []


def check_portable(options: PipelineOptions, given: set[str]) -> list[str]:
    """PortableRunner: a job service address is required."""
    del given
    problems = []
    if not options.view_as(PortableOptions).job_endpoint:
        problems.append(
            "PortableRunner needs --job_endpoint HOST:PORT of a running Beam job service "
            "(a Flink/Spark job server, or python -m "
            "apache_beam.runners.portability.local_job_service_main --port 8099), or "
            "--job_endpoint embed to run one in this process"
        )
    return problems + check_environment(options)


def check_flink(options: PipelineOptions, given: set[str]) -> list[str]:
    """FlinkRunner: parallelism and environment flags."""
    del given
    flink = options.view_as(FlinkRunnerOptions)
    problems = []
    for flag in ("parallelism", "max_parallelism"):
        value = getattr(flink, flag)
        if value is not None and value != -1 and value < 1:
            problems.append(f"--{flag} must be >= 1 (or -1: Flink's default), got {value}")
    return problems + check_environment(options)


def check_spark(options: PipelineOptions, given: set[str]) -> list[str]:
    """SparkRunner: uber-jar submission needs the Spark REST URL."""
    del given
    spark = options.view_as(SparkRunnerOptions)
    problems = []
    if spark.spark_submit_uber_jar and not spark.spark_rest_url:
        problems.append("--spark_submit_uber_jar needs --spark_rest_url http://HOST:6066")
    return problems + check_environment(options)


def configure_portable(options: PipelineOptions, *, given: set[str], input_bytes: int) -> None:
    """PortableRunner: embedded job service -> LOOPBACK; else the job service must answer."""
    del given, input_bytes
    portable = options.view_as(PortableOptions)
    if portable.job_endpoint == "embed":
        portable.environment_type = portable.environment_type or "LOOPBACK"
    else:
        _require_reachable(portable.job_endpoint, JOB_SERVICE_PORT, "--job_endpoint")
    _configure_environment(options)


def configure_flink(options: PipelineOptions, *, given: set[str], input_bytes: int) -> None:
    """FlinkRunner: a job service, or the job-server jar (+ Java) and a reachable master."""
    del input_bytes
    portable = options.view_as(PortableOptions)
    flink = options.view_as(FlinkRunnerOptions)
    if portable.job_endpoint:
        _require_reachable(portable.job_endpoint, JOB_SERVICE_PORT, "--job_endpoint")
    else:
        master = flink.flink_master.strip()
        if master not in FLINK_MAGIC_MASTERS:
            _require_reachable(master, FLINK_REST_PORT, "--flink_master")
        elif not portable.environment_type:
            portable.environment_type = "LOOPBACK"  # what Beam does for an embedded Flink
        assembled = _require_jar(
            flag="--flink_job_server_jar",
            value=flink.flink_job_server_jar,
            gradle_target=f":runners:flink:{flink.flink_version}:job-server:shadowJar",
            runner="FlinkRunner",
            uber_jar=flink.flink_submit_uber_jar and master not in FLINK_MAGIC_MASTERS,
            flink_version_given="flink_version" in given,
        )
        if assembled is not None:
            flink.flink_job_server_jar, flink.flink_version = assembled
    _configure_environment(options)


def configure_spark(options: PipelineOptions, *, given: set[str], input_bytes: int) -> None:
    """SparkRunner: a job service, or the job-server jar (+ Java) and a reachable master."""
    del given, input_bytes
    portable = options.view_as(PortableOptions)
    spark = options.view_as(SparkRunnerOptions)
    if portable.job_endpoint:
        _require_reachable(portable.job_endpoint, JOB_SERVICE_PORT, "--job_endpoint")
    else:
        master = spark.spark_master_url.strip()
        if master.startswith("spark://"):
            _require_reachable(master, SPARK_MASTER_PORT, "--spark_master_url")
        elif not portable.environment_type:
            portable.environment_type = "LOOPBACK"
        if spark.spark_submit_uber_jar:
            _require_reachable(spark.spark_rest_url, 6066, "--spark_rest_url")
        assembled = _require_jar(
            flag="--spark_job_server_jar",
            value=spark.spark_job_server_jar,
            gradle_target=":runners:spark:3:job-server:shadowJar",
            runner="SparkRunner",
            uber_jar=spark.spark_submit_uber_jar,
        )
        if assembled is not None:
            spark.spark_job_server_jar = assembled[0]
    _configure_environment(options)


def _configure_environment(options: PipelineOptions) -> None:
    """Per environment: where our code and the one-thread limit come from."""
    kind = (options.view_as(PortableOptions).environment_type or "DOCKER").upper()
    if kind == "LOOPBACK":
        threads.limit_blas_threads(1)  # the DoFns run in this process
    elif kind in ("DOCKER", "PROCESS"):
        stage_project(options)  # these workers pip-install the staged sdist
        add_plugin(options)
    elif kind == "EXTERNAL":  # the pool runs with our package and limits: can it start workers?
        config = options.view_as(PortableOptions).environment_config or ""
        if config.lstrip().startswith("{"):  # Beam's JSON form {"url": "HOST:PORT"}
            config = json.loads(config).get("url", "")
        timeout_s = options.view_as(ExternalWorkerOptions).worker_start_timeout_s
        check_worker_pool(config, timeout_s=timeout_s)


def _require_reachable(address: str, default_port: int, flag: str) -> None:
    try:
        host, port = host_port(address, default_port)
    except ValueError as e:
        raise RunnerError(f"{flag}: {e}") from None
    reason = unreachable(host, port)
    if reason:
        raise RunnerError(f"{flag} {address}: nothing answers at {host}:{port} ({reason})")


def beam_jar_url(gradle_target: str) -> str:
    """The Maven URL Beam downloads a job-server jar from (no network access)."""
    from apache_beam.runners.portability import job_server

    return job_server.JavaJarJobServer.path_to_beam_jar(gradle_target)


def cached_jar(url: str) -> str:
    """Where Beam caches (and looks for) a downloaded jar."""
    from apache_beam.utils import subprocess_server

    return os.path.join(subprocess_server.JavaJarServer.JAR_CACHE, os.path.basename(url))


def _require_jar(
    *,
    flag: str,
    value: str | None,
    gradle_target: str,
    runner: str,
    uber_jar: bool,
    flink_version_given: bool = False,
) -> tuple[str, str] | None:
    """The job-server jar is a local file, a URL, Beam's cached copy, ours, or downloadable now.

    Ours: the one `python -m runners.jobserver ENGINE` assembled, used when Beam has no copy of
    its own (no download then), and for Flink only when ``--flink_version`` was not set to
    another version than the one it was assembled for.

    Returns:
      (the jar, its Flink version) when ours is used: the caller sets `flag` (and
      ``--flink_version``) to them; else None (Beam finds or downloads its own).
    """
    assembled = None
    if value:
        if not urlparse(value).scheme and not os.path.isfile(value):
            raise RunnerError(f"{flag} {value}: no such file")
    else:
        url = beam_jar_url(gradle_target)
        cache = cached_jar(url)
        if not os.path.isfile(cache):
            from runners import jobserver  # here: `python -m runners.jobserver` imports runners

            engine = "flink" if "flink" in gradle_target else "spark"
            ours = jobserver.cached(engine)
            fits = (
                engine != "flink"
                or not flink_version_given
                or (f":flink:{jobserver.FLINK_VERSION}:" in gradle_target)
            )
            if ours is not None and fits:
                assembled = (str(ours), jobserver.FLINK_VERSION)
                logging.getLogger("audiorecords").info(
                    "%s: using the job-server jar `python -m runners.jobserver %s` assembled: %s",
                    runner,
                    engine,
                    ours,
                )
            elif not _maven_reachable(url):
                get = _jar_hint(flag, engine, ours)
                raise RunnerError(
                    f"{runner} needs Beam's job-server jar {os.path.basename(url)}, which Beam "
                    f"downloads from Maven Central, and it cannot be downloaded from here: {get} "
                    f"(or put Beam's jar at {cache}), or start the job server elsewhere and pass "
                    f"--job_endpoint HOST:{JOB_SERVICE_PORT}"
                )
    if not uber_jar and shutil.which("java") is None:
        raise RunnerError(
            f"{runner} starts its job-server jar with Java, and no `java` is on PATH: install a "
            f"JRE (11+), or start the job server elsewhere and pass --job_endpoint "
            f"HOST:{JOB_SERVICE_PORT}"
        )
    return assembled


def _jar_hint(flag: str, engine: str, ours) -> str:
    """What to do when neither Beam's jar nor a usable assembled one is there (the fix, named).

    `ours`: the jar `python -m runners.jobserver` assembled for these artifacts, or None.
    """
    from runners import jobserver

    version = f" with --flink_version {jobserver.FLINK_VERSION}" if engine == "flink" else ""
    if ours:  # assembled, but for another --flink_version than the one asked for
        return f"pass {flag} {ours}{version}"
    assemble = f"`python -m runners.jobserver {engine}` (Maven; later runs use it by themselves)"
    stale = jobserver.jar_path(engine)
    if stale.is_file():
        return (
            f"{stale} was assembled from other artifacts than this version uses: run "
            f"{assemble} again, or pass {flag} PATH{version}"
        )
    return f"assemble one with {assemble}, or pass {flag} PATH{version}"


def _maven_reachable(url: str) -> bool:
    """Whether Beam's download of `url` can work: Maven Central (or Beam's mirror) serves it.

    One HEAD request per address (through the configured proxy, if any), each bounded by
    `PROBE_TIMEOUT_S`; DNS included, since it runs in a daemon thread.
    """
    from apache_beam.utils import subprocess_server

    mirror = subprocess_server.JavaJarServer.GOOGLE_MAVEN_MIRROR
    urls = [url]
    if url.startswith(subprocess_server.JavaJarServer.MAVEN_CENTRAL_REPOSITORY):
        urls.append(mirror + url[len(subprocess_server.JavaJarServer.MAVEN_CENTRAL_REPOSITORY) :])
    return any(_serves(u) for u in urls)


def _serves(url: str) -> bool:
    outcome: list[bool] = []

    def head() -> None:
        request = urllib.request.Request(url, method="HEAD")
        try:
            with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as response:
                outcome.append(response.status == 200)
        except (OSError, ValueError):  # HTTPError and URLError are OSErrors
            outcome.append(False)

    thread = threading.Thread(target=head, daemon=True, name=f"probe-{url}")
    thread.start()
    thread.join(PROBE_TIMEOUT_S + 0.5)
    return bool(outcome and outcome[0])
