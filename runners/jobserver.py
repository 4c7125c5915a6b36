"""Beam's Flink and Spark job servers, assembled from Maven Central with Maven.

Beam's Python FlinkRunner/SparkRunner download a single "job-server" jar (a shaded build of the
Java runner) the first time they run. Where that jar is not served (the Maven Central this
project's machines reach serves none of Beam's ``*-job-server`` jars, and no Beam Java 2.77
artifacts at all), the same job server can be put together from the artifacts it is built from:
the Java runner (which holds the job-server main class), Beam's job service, and the engine's own
jars, all resolved by ``mvn dependency:copy-dependencies`` into a cache directory. A small jar
whose manifest names the main class and lists those jars (``Class-Path``) then starts it with
``java -jar``, exactly as Beam starts its own jar, so ``--flink_job_server_jar PATH`` (or
``--spark_job_server_jar PATH``) is all the runner needs.

The same jars run a Flink session cluster (``flink-runtime`` holds the JobManager and
TaskManager entry points), which is how the engine tests start one without a Flink download.

Versions: Beam Java 2.62.0 is the newest release whose Flink runner, Spark runner and job
service are all served here; the portable protocol lets the 2.77 Python SDK submit to it (the
record job's shards are byte-identical to the DirectRunner's: tests/engines/). Its Flink runner
is built for Flink 1.19 (one of the versions Beam 2.77's Python SDK publishes), its Spark runner
for Spark 3.5.

    python -m runners.jobserver flink   # prints the jar to pass as --flink_job_server_jar
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

BEAM_JAVA_VERSION = "2.62.0"
FLINK_VERSION = "1.19"  # the Flink of beam-runners-flink-1.19 (its jars: 1.19.0)
SPARK_VERSION = "3.5.0"
SLF4J_VERSION = "1.7.30"  # the slf4j-api Beam 2.62 depends on: its simple binding logs to stderr
CACHE_ENV = "AUDIORECORDS_JAR_CACHE"
MAVEN_TIMEOUT_S = 1800.0
STAMP = "artifacts.txt"  # in the lib directory: what it was resolved from

# Java 17 closes the JDK internals that Spark 3.5 and Flink 1.19 reach into (their own launch
# scripts pass these as --add-opens); a main jar's manifest may open them for `java -jar`.
_OPENS = (
    "java.base/java.lang java.base/java.lang.invoke java.base/java.lang.reflect "
    "java.base/java.io java.base/java.net java.base/java.nio java.base/java.util "
    "java.base/java.util.concurrent java.base/java.util.concurrent.atomic java.base/java.text "
    "java.base/java.time java.base/sun.nio.ch java.base/sun.nio.cs java.base/sun.security.action "
    "java.base/sun.util.calendar java.base/jdk.internal.misc"
)


@dataclasses.dataclass(frozen=True)
class JobServer:
    """One engine's job server: what Maven resolves and which class starts it.

    Attributes:
      engine: "flink" or "spark".
      main_class: the job-server driver in the Java runner.
      artifacts: ``group:artifact:version`` Maven resolves with their runtime dependencies.
    """

    engine: str
    main_class: str
    artifacts: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"beam-{self.engine}-job-server-{BEAM_JAVA_VERSION}"


JOB_SERVERS = {
    "flink": JobServer(
        "flink",
        "org.apache.beam.runners.flink.FlinkJobServerDriver",
        (
            f"org.apache.beam:beam-runners-flink-{FLINK_VERSION}:{BEAM_JAVA_VERSION}",
            f"org.slf4j:slf4j-simple:{SLF4J_VERSION}",
        ),
    ),
    "spark": JobServer(
        "spark",
        "org.apache.beam.runners.spark.SparkJobServerDriver",
        (
            f"org.apache.beam:beam-runners-spark-3:{BEAM_JAVA_VERSION}",
            # provided-scope dependencies of Beam's Spark runner: the job server bundles them
            f"org.apache.spark:spark-core_2.12:{SPARK_VERSION}",
            f"org.apache.spark:spark-streaming_2.12:{SPARK_VERSION}",
            # Spark's log4j binding needs slf4j 2 (Beam's 1.7 would win: Spark would log nothing)
            "org.slf4j:slf4j-api:2.0.7",
        ),
    ),
}


class FetchError(RuntimeError):
    """Maven could not assemble a job server (the message ends with Maven's last error lines)."""


def cache_dir() -> Path:
    """Where assembled job servers live: $AUDIORECORDS_JAR_CACHE or ~/.cache/audiorecords/jars."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "audiorecords" / "jars")


def jar_path(engine: str) -> Path:
    """The launcher jar of `engine`'s job server (it may not exist yet: see `fetch`)."""
    return cache_dir() / f"{JOB_SERVERS[engine].name}.jar"


def lib_dir(engine: str) -> Path:
    """The jars the launcher jar lists (also the classpath of a Flink session cluster)."""
    return cache_dir() / f"{JOB_SERVERS[engine].name}-lib"


def cached(engine: str) -> Path | None:
    """The launcher jar if it was assembled before from today's artifacts, else None."""
    jar, stamp = jar_path(engine), lib_dir(engine) / STAMP
    wanted = "\n".join(JOB_SERVERS[engine].artifacts)
    return jar if jar.is_file() and stamp.is_file() and stamp.read_text() == wanted else None


def fetch(engine: str, *, mvn: str = "mvn", timeout_s: float = MAVEN_TIMEOUT_S) -> Path:
    """Assembles `engine`'s job server in `cache_dir` with Maven, once; returns the launcher jar.

    Raises:
      FetchError: Maven is missing, fails or takes longer than `timeout_s`.
    """
    found = cached(engine)
    if found is not None:
        return found
    server = JOB_SERVERS[engine]
    if shutil.which(mvn) is None:
        raise FetchError(f"cannot assemble {server.name}: no `{mvn}` (Maven) on PATH")
    cache_dir().mkdir(parents=True, exist_ok=True)
    with _exclusive(cache_dir() / f"{server.name}.lock"):
        found = cached(engine)  # another process assembled it while this one waited
        return found if found is not None else _assemble(engine, mvn=mvn, timeout_s=timeout_s)


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on `path` (created if missing): one assembler at a time, so that
    processes starting together (parallel test workers, two launchers) never replace a lib/
    another one's JVM is reading."""
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _assemble(engine: str, *, mvn: str, timeout_s: float) -> Path:
    """Resolves `engine`'s job server jars with Maven into its lib/; writes its launcher jar."""
    server = JOB_SERVERS[engine]
    with tempfile.TemporaryDirectory(prefix=f"{server.name}-", dir=cache_dir()) as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(server))
        staged = Path(work) / "lib"
        command = [mvn, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies"]
        command += [f"-DoutputDirectory={staged}", "-DincludeScope=runtime"]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            message = f"Maven did not assemble {server.name} within {timeout_s:g} s"
            raise FetchError(message) from None
        if done.returncode != 0:
            errors = [ln for ln in done.stdout.splitlines() if ln.startswith("[ERROR]")]
            raise FetchError(f"Maven failed to assemble {server.name}: {' '.join(errors[:2])}")
        jars = sorted(p.name for p in staged.glob("*.jar"))
        (staged / STAMP).write_text("\n".join(server.artifacts))
        lib = lib_dir(engine)
        shutil.rmtree(lib, ignore_errors=True)
        os.replace(staged, lib)
        launcher = Path(work) / "launcher.jar"
        _write_launcher(launcher, server.main_class, [f"{lib.name}/{j}" for j in jars])
        os.replace(launcher, jar_path(engine))  # last: a jar present means a complete lib/
    return jar_path(engine)


def _pom(server: JobServer) -> str:
    deps = []
    for coordinates in server.artifacts:
        group, artifact, version = coordinates.split(":")
        deps.append(
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>audiorecords.local</groupId><artifactId>{server.name}</artifactId>"
        "<version>1</version><packaging>pom</packaging>"
        f"<dependencies>{''.join(deps)}</dependencies></project>\n"
    )


def _write_launcher(path: Path, main_class: str, class_path: list[str]) -> None:
    """A jar with only a manifest: `java -jar` runs `main_class` on `class_path` (relative)."""
    attributes = {
        "Manifest-Version": "1.0",
        "Main-Class": main_class,
        "Class-Path": " ".join(class_path),
        "Add-Opens": _OPENS,
    }
    lines = []
    for key, value in attributes.items():
        raw = f"{key}: {value}".encode()
        lines.append(raw[:72])  # the manifest format wraps at 72 bytes, continuations start " "
        lines += [b" " + raw[i : i + 71] for i in range(72, len(raw), 71)]
    with zipfile.ZipFile(path, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", b"\r\n".join(lines) + b"\r\n\r\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m runners.jobserver flink|spark``: assembles the job server, prints its jar."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in JOB_SERVERS:
        print(f"usage: python -m runners.jobserver {{{','.join(JOB_SERVERS)}}}", file=sys.stderr)
        return 2
    try:
        print(fetch(args[0]))
    except FetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
