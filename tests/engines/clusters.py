"""Real engines for the engine tests: Flink session clusters, worker pools, job-server jars.

Every process listens on 127.0.0.1 only, on free ports, with bounded start-up waits; each is
started in its own process group and killed by pid at teardown. Logs go to files in the test's
directory (pytest keeps the last runs' tmp directories), and a process that fails to start
fails the test with the tail of its log.

The Flink cluster is a JobManager and a TaskManager JVM started from the jars Maven resolved for
Beam's Flink job server (`runners.jobserver`: ``flink-runtime`` holds both entry points), as
``bin/jobmanager.sh`` / ``bin/taskmanager.sh`` of a Flink distribution would start them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.forked import Forker

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0  # a JVM or a Python process on 2 busy cores, to listen on its port
JM_HEAP = "-Xmx384m"
TM_HEAP = ("-Xmx448m", "-Xms448m", "-XX:MaxDirectMemorySize=640m", "-XX:MaxMetaspaceSize=256m")
# Every test JVM runs seconds to minutes on a few MB: the client compiler alone and the serial
# collector cut the CPU its start-up and warm-up take from two shared cores (C2's and G1's
# threads), not what it computes.
QUICK_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# the same for the JVMs Beam starts (a launcher's job server), which take no flags from us
QUICK_JVM_ENV = {"JAVA_TOOL_OPTIONS": " ".join(QUICK_JVM)}
# Beam releases a job's SDK worker after each fused stage unless told to keep it: the record
# job then starts one worker per stage, one after the other (Spark: ~45), each importing Beam
# and TensorFlow. Kept for the job (Spark; a Flink session cluster loading the job's classes
# parent-first, `FlinkCluster`), its stages still run on the pool's workers, not in the launcher;
# a new job (another Spark application, another Flink job) starts workers of its own.
KEEP_WORKERS = ("--environment_cache_millis", "60000")
FLINK_JM = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint"
FLINK_TM = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"
# What Flink 1.19's launch scripts open to Flink on Java 17 (env.java.opts.all)
JAVA17_OPENS = tuple(
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in (
        "java.lang",
        "java.net",
        "java.io",
        "java.nio",
        "sun.nio.ch",
        "java.lang.reflect",
        "java.text",
        "java.time",
        "java.util",
        "java.util.concurrent",
        "java.util.concurrent.atomic",
        "java.util.concurrent.locks",
    )
)


def job_server_jar(engine: str) -> Path:
    """`engine`'s job-server launcher jar, assembled by Maven into the cache once.

    Skips the test with one line when `java` is missing, or when the jar is not cached and
    `mvn` is missing or cannot assemble it.
    """
    from runners import jobserver

    if shutil.which("java") is None:
        pytest.skip("engine tests need `java` on PATH (Java 11+)")
    try:
        return jobserver.fetch(engine)
    except jobserver.FetchError as e:
        pytest.skip(f"engine tests: {e}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """A started process with its log; `stop` kills its whole process group by pid."""

    def __init__(self, name: str, command: list[str], log: Path, *, env: dict | None = None):
        self.name, self.log = name, log
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env={**os.environ, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, with the workers it starts
            )

    @classmethod
    def forked(
        cls, name: str, forker: Forker, argv: list[str], log: Path, *, env: dict | None = None
    ) -> Process:
        """``python <argv>`` started by `forker` (`Forker.start`: in ROOT, in a process group of
        its own, its output to `log`), `env` added for what it starts (a job server's)."""
        process = cls.__new__(cls)
        process.name, process.log = name, log
        process.proc = forker.start(argv, stdout=log, env=env)
        return process

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def wait_listening(self, port: int, *, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.25)
        pytest.fail(f"{self.name} did not listen on {port} within {timeout_s:g} s:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL to the process alone (a crash), not its group."""
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 20)):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait_s)
                if sig == signal.SIGTERM:  # the leader is gone; make sure its group is too
                    os.killpg(self.pid, signal.SIGKILL)
                return
            except (subprocess.TimeoutExpired, ProcessLookupError):
                continue


def start_worker_pool(
    directory: Path, *, timeout_s: float = START_TIMEOUT_S
) -> tuple[Process, int]:
    """``python -m runners.worker_pool`` on 127.0.0.1 (our interpreter, not PATH's python)."""
    port = free_port()
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    pool = Process(
        "worker pool",
        [sys.executable, "-m", "runners.worker_pool", "--service_port", str(port)]
        + ["--bind_host", "127.0.0.1"],
        directory / "worker_pool.log",
        env=env,
    )
    pool.wait_listening(port, timeout_s=timeout_s)
    return pool, port


class FlinkCluster:
    """A Flink session cluster: one JobManager JVM and TaskManager JVMs (2 slots each)."""

    def __init__(self, directory: Path, lib: Path, *, taskmanagers: int = 1):
        self.directory, self.lib = directory, lib
        self.rest_port = free_port()
        self.conf = directory / "conf"
        self.conf.mkdir(parents=True, exist_ok=True)
        settings = {
            "jobmanager.rpc.address": "127.0.0.1",
            "jobmanager.rpc.port": free_port(),
            "jobmanager.bind-host": "127.0.0.1",
            "jobmanager.memory.process.size": "768m",
            "rest.address": "127.0.0.1",
            "rest.bind-address": "127.0.0.1",
            "rest.port": self.rest_port,
            "blob.server.port": free_port(),
            "taskmanager.host": "127.0.0.1",
            "taskmanager.bind-host": "127.0.0.1",
            "taskmanager.rpc.port": "0",
            "taskmanager.data.port": "0",
            "taskmanager.numberOfTaskSlots": 2,
            # what bin/taskmanager.sh computes from taskmanager.memory.process.size and passes on
            "taskmanager.cpu.cores": 2,
            "taskmanager.memory.framework.heap.size": "128m",
            "taskmanager.memory.task.heap.size": "320m",
            "taskmanager.memory.framework.off-heap.size": "128m",
            "taskmanager.memory.task.off-heap.size": "0m",
            # the record job is ~300 Beam transforms, all pipelined: many small buffers
            "taskmanager.memory.network.min": "512m",
            "taskmanager.memory.network.max": "512m",
            "taskmanager.memory.segment-size": "8kb",
            "taskmanager.memory.managed.size": "256m",
            "taskmanager.memory.jvm-metaspace.size": "256m",
            "taskmanager.memory.jvm-overhead.min": "192m",
            "taskmanager.memory.jvm-overhead.max": "192m",
            "parallelism.default": 2,
            "cluster.evenly-spread-out-slots": "true",  # each TaskManager runs part of the job
            # a lost TaskManager is noticed within seconds, not Flink's default 50 s
            "heartbeat.interval": 2000,
            "heartbeat.timeout": 8000,
            # failed tasks are retried: their pipelined region (with Beam on Flink: most of the job)
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 100,  # each task a kill fails counts one
            "restart-strategy.fixed-delay.delay": "2 s",
            # the job's classes from the cluster's classpath (the same jars as the job's): then
            # a job run with --environment_cache_millis keeps its SDK workers from stage to
            # stage; Beam releases them after each stage when its classes are the job's own
            "classloader.resolve-order": "parent-first",
        }
        text = "".join(f"{key}: {value}\n" for key, value in settings.items())
        (self.conf / "flink-conf.yaml").write_text(text)
        self.jobmanager = self._start("jobmanager", FLINK_JM, JM_HEAP)
        self.jobmanager.wait_listening(self.rest_port)
        self.taskmanagers = [
            self._start(f"taskmanager{i}", FLINK_TM, *TM_HEAP) for i in range(taskmanagers)
        ]
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.registered_taskmanagers() < taskmanagers:
            dead = [tm for tm in self.taskmanagers if tm.proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"Flink TaskManagers did not register:\n{self.taskmanagers[0].tail()}")
            time.sleep(0.5)

    @property
    def master(self) -> str:
        return f"127.0.0.1:{self.rest_port}"

    def _start(self, name: str, main_class: str, *jvm: str) -> Process:
        command = ["java", *jvm, *QUICK_JVM, *JAVA17_OPENS, "-cp", f"{self.lib}/*", main_class]
        command += ["--configDir", str(self.conf)]
        return Process(f"Flink {name}", command, self.directory / f"{name}.log")

    def registered_taskmanagers(self) -> int:
        import json

        url = f"http://{self.master}/taskmanagers"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return len(json.load(response)["taskmanagers"])
        except OSError:
            return 0

    def stop(self) -> None:
        for process in [*self.taskmanagers, self.jobmanager]:
            process.stop()


class SparkCluster:
    """A Spark standalone cluster: a master and a worker JVM (2 cores, 1 GiB for executors).

    Started from the jars Maven resolved for Beam's Spark job server, as ``sbin/start-master.sh``
    and ``sbin/start-worker.sh`` would; the worker starts each executor as a JVM of its own,
    which finds Spark's jars under ``$SPARK_HOME/jars`` (here: a link to those jars).
    """

    def __init__(self, directory: Path, lib: Path):
        home = directory / "spark-home"
        home.mkdir(parents=True, exist_ok=True)
        (home / "jars").symlink_to(lib, target_is_directory=True)
        self.env = {
            "SPARK_HOME": str(home),
            "SPARK_SCALA_VERSION": "2.12",  # else Spark's launcher looks for a source build
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_EXECUTOR_OPTS": " ".join((*QUICK_JVM, *JAVA17_OPENS)),
            **QUICK_JVM_ENV,  # the job server (the Spark driver) a launcher starts
        }
        self.port = free_port()
        classpath = ("-cp", f"{lib}/*")
        master = ("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1")
        master += ("--port", str(self.port), "--webui-port", str(free_port()))
        self.master = Process(
            "Spark master",
            ["java", "-Xmx256m", *QUICK_JVM, *JAVA17_OPENS, *classpath, *master],
            directory / "spark-master.log",
            env=self.env,
        )
        self.master.wait_listening(self.port)
        worker = ("org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2")
        worker += ("--memory", "1g", "--webui-port", str(free_port()))
        worker += ("--work-dir", str(directory / "spark-work"), self.url)
        self.worker = Process(
            "Spark worker",
            ["java", "-Xmx256m", *QUICK_JVM, *JAVA17_OPENS, *classpath, *worker],
            directory / "spark-worker.log",
            env=self.env,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Successfully registered with master" not in self.worker.tail(100_000):
            if self.worker.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"Spark worker did not register:\n{self.worker.tail()}")
            time.sleep(0.5)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def stop(self) -> None:
        for process in (getattr(self, "worker", None), self.master):
            if process is not None:
                process.stop()
