"""Commands run as fresh processes forked from one that has imported Beam and TensorFlow once.

A fresh ``python -m pipelines.record`` pays ~5 s of CPU importing Beam, TensorFlow and TFT
before it does anything; a test module that runs dozens of jobs and readers against a server
pays that for each. `Forker` starts one server process with the environment the commands need;
it imports the heavy modules (`PRELOAD`) and, for each command, forks a child that runs it as
``python -m <module> args`` or ``python -c <code> args`` would: ``__main__`` (`runpy`), its own
``sys.argv``, stdin from /dev/null, stdout and stderr (every file descriptor 1 and 2 write, the
native libraries' too) captured, its exit code; at its end it waits for its non-daemon threads,
runs its atexit handlers and flushes, as an interpreter's exit does, then leaves without tearing
every module down (in a forked child that would copy the whole preloaded heap: ~7 s a command).

The server only imports: it opens no file, no connection and no file system client before it
forks, so each child starts with every client (TensorFlow's GCS file system and its caches,
Beam's, google-auth's credentials) as a fresh process has it, and what a child does (requests,
caches, a crash) stays in that child. The environment is fixed when the server starts (the
clients read some of it when TensorFlow loads): one `Forker` per environment. A command may add
variables that only what it starts reads (`env`: a job server's ``FLINK_CONF_DIR``, a JVM's
options), set in the child before the command runs.

`Forker.run` runs a command to its end (`subprocess.run`); `Forker.start` starts one in a
process group of its own and returns (`subprocess.Popen`): for a run a test holds at a pause
point and kills, or runs at the same time as another.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# What the record job, its readers and the tools import (none of them opens anything at import).
# Not a module a command runs with ``-m``: run as __main__, it would be a second copy of itself
# (the record job's options, a PipelineOptions subclass, then defined twice: Beam refuses).
PRELOAD = (
    "pipelines.job",
    "pipelines.config",
    "pipelines.result",
    "replay",
    "tensorflow",
    "tensorflow_transform",
    "apache_beam.io.gcp.gcsfilesystem",
)

SERVER = r"""
import atexit, builtins, gc, json, os, runpy, sys, threading, traceback

for name in sys.argv[1:]:
    __import__(name)
gc.freeze()  # the preloaded objects: never collected, so a child's collections leave them alone
commands, replies = sys.stdin.buffer.raw, sys.stdout


def run(command):
    flag, target, *args = command["argv"]
    if flag == "-m":  # as `python -m`: the module run as __main__, sys.path[0] the cwd
        sys.argv = [target, *args]
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:  # as `python -c`
        sys.argv = ["-c", *args]
        code = compile(target, "<string>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": builtins})


def exit_code(exit):
    if exit.code is None or isinstance(exit.code, int):
        return exit.code or 0
    print(exit.code, file=sys.stderr)
    return 1


def child(command):
    if command["session"]:  # its own process group, which a test can kill whole
        os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    opened = {}
    for fd, path in ((1, command["stdout"]), (2, command["stderr"])):
        if path not in opened:  # one file for both: one offset, as 2>&1
            opened[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(opened[path], fd)
    for descriptor in opened.values():
        os.close(descriptor)
    os.environ.update(command["env"])  # read after the fork only (a started process's)
    buffering = 1 if command["unbuffered"] else -1  # as PYTHONUNBUFFERED: every line written
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", buffering=buffering, closefd=False)
    sys.stderr = open(2, "w", buffering=buffering, closefd=False, errors="backslashreplace")
    try:
        run(command)
        code = 0
    except SystemExit as exit:
        code = exit_code(exit)
    except BaseException:
        traceback.print_exc()
        code = 1
    # what the interpreter's exit does that a program can see: wait for its non-daemon threads,
    # run its atexit handlers, flush; not the tear-down of every module, which in a forked
    # child copies the whole preloaded heap (seconds) for nothing a command leaves behind
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def reply(**fields):
    replies.write(json.dumps(fields) + "\n")
    replies.flush()


while line := commands.readline():
    command = json.loads(line)
    if command["op"] == "wait":  # a started child's end (a test has seen it end)
        _, status = os.waitpid(command["pid"], 0)
        reply(code=os.waitstatus_to_exitcode(status))
        continue
    replies.flush()
    pid = os.fork()
    if pid == 0:
        child(command)  # ends the child (os._exit): it never loops
    reply(pid=pid)
    if command["op"] == "run":
        _, status = os.waitpid(pid, 0)
        reply(code=os.waitstatus_to_exitcode(status))
replies.flush()
os._exit(0)  # stdin closed: done (tearing the preloaded modules down takes seconds, for nothing)
"""


class Forker:
    """A server process (`SERVER`) started in `cwd` with `env`; `run` runs one command."""

    def __init__(self, env: dict[str, str], cwd: Path, preload: tuple[str, ...] = PRELOAD) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="forked-"))
        self._log = open(self._dir / "server.log", "wb")  # noqa: SIM115 - closed in `close`
        self._proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, *preload],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            bufsize=0,
        )
        self._count = 0

    def _reply(self, deadline: float, argv: list[str]) -> dict:
        out = self._proc.stdout
        assert out is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                raise subprocess.TimeoutExpired([sys.executable, *argv], 0)
            line = out.readline()  # unbuffered: reads up to the newline, no further
            if not line:
                log = (self._dir / "server.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the fork server ended (rc={self._proc.poll()}):\n{log}")
            return json.loads(line)

    def _send(self, **command: object) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write((json.dumps(command) + "\n").encode())

    def start(
        self,
        argv: list[str],
        *,
        stdout: Path,
        stderr: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> ForkedProcess:
        """Starts ``python <argv>`` in a forked child in a session (process group) of its own,
        unbuffered, its output to `stdout` (and `stderr`, or the same file), as
        ``subprocess.Popen(..., start_new_session=True)`` with ``PYTHONUNBUFFERED=1`` would;
        returns at once. `env`: variables added for what the command starts (module docstring)."""
        stderr = stdout if stderr is None else stderr
        self._send(op="start", argv=list(argv), stdout=str(stdout), stderr=str(stderr),
                   session=True, unbuffered=True, env=env or {})  # fmt: skip
        pid = self._reply(time.monotonic() + 60, argv)["pid"]
        return ForkedProcess(self, pid, [sys.executable, *argv])

    def reap(self, pid: int) -> int:
        """The exit code of started child `pid`, which has ended (a zombie: no wait)."""
        self._send(op="wait", pid=pid)
        return self._reply(time.monotonic() + 60, [str(pid)])["code"]

    def run(
        self, argv: list[str], *, timeout: float, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Runs ``python <argv>`` (``-m module ...`` or ``-c code ...``) in a forked child:
        what `subprocess.run` with ``capture_output=True, text=True`` would return. `env`:
        variables added for what the command starts (module docstring)."""
        self._count += 1
        stdout, stderr = self._dir / f"{self._count}.out", self._dir / f"{self._count}.err"
        self._send(op="run", argv=list(argv), stdout=str(stdout), stderr=str(stderr),
                   session=False, unbuffered=False, env=env or {})  # fmt: skip
        deadline = time.monotonic() + timeout
        pid = self._reply(deadline, argv)["pid"]
        try:
            code = self._reply(deadline, argv)["code"]
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            self._reply(time.monotonic() + 60, argv)
            raise
        texts = [p.read_text(errors="replace") for p in (stdout, stderr)]
        for path in (stdout, stderr):
            path.unlink()
        return subprocess.CompletedProcess([sys.executable, *argv], code, *texts)

    def close(self) -> None:
        """Ends the server (its stdin closed: it leaves its loop) and removes its files."""
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.close()
        for path in self._dir.iterdir():
            path.unlink()
        self._dir.rmdir()


class ForkedProcess:
    """A child `Forker.start` started: the part of `subprocess.Popen` the tests use (`pid`,
    `poll`, `wait`, `returncode`). The server is its parent: it is seen to end by its state in
    ``/proc`` (a zombie), then reaped by the server."""

    def __init__(self, forker: Forker, pid: int, args: list[str]) -> None:
        self.forker, self.pid, self.args = forker, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Its exit code once it has ended, else None."""
        if self.returncode is None:
            try:
                stat = Path(f"/proc/{self.pid}/stat").read_text()
                ended = stat[stat.rindex(")") + 2] in "ZX"
            except FileNotFoundError:
                ended = True
            if ended:
                self.returncode = self.forker.reap(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Waits until it ends (at most `timeout` seconds): its exit code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.01)
        return self.returncode
