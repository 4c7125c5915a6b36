"""Run a command and measure it: wall time and peak memory of its whole process tree.

Memory is sampled from /proc every `interval` seconds (Linux only) over the process and all its
descendants (Beam's multi-processing SDK workers, tf.data threads are in-process):

- ``peak_rss_tree``: peak of the summed RSS of the tree (double-counts shared pages);
- ``peak_pss_tree``: peak of the summed PSS (shared pages split between sharers: the honest
  "how much RAM does this job take" number);
- ``peak_rss_root``: peak RSS of the launched process alone (the Beam launcher, where the
  DirectRunner's FnApiRunner keeps PCollections between stages).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclasses.dataclass
class Measured:
    """What `run_measured` observed."""

    wall: float
    returncode: int
    stdout: str
    stderr: str
    peak_rss_tree: int = 0
    peak_pss_tree: int = 0
    peak_rss_root: int = 0
    peak_processes: int = 0


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    kids = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def rss(pid: int) -> int:
    """Resident set size of `pid` in bytes (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def pss(pid: int) -> int:
    """Proportional set size of `pid` in bytes (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def run_measured(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    interval: float = 0.25,
    timeout: float | None = None,
) -> Measured:
    """Runs `cmd` (cwd: the repository root) and samples its process tree's memory."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(cmd), cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    result = Measured(wall=0.0, returncode=0, stdout="", stderr="")
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            pids = tree(proc.pid)
            result.peak_processes = max(result.peak_processes, len(pids))
            result.peak_rss_tree = max(result.peak_rss_tree, sum(rss(p) for p in pids))
            result.peak_pss_tree = max(result.peak_pss_tree, sum(pss(p) for p in pids))
            result.peak_rss_root = max(result.peak_rss_root, rss(proc.pid))
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        result.wall = time.perf_counter() - start
        done.set()
        sampler.join()
    result.returncode, result.stdout, result.stderr = proc.returncode, out, err
    if proc.returncode != 0:
        sys.stderr.write(err[-4000:])
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    return result


def module_cmd(python: str, module: str, *args: str) -> list[str]:
    """The command running ``benchmarks.<module>`` with the interpreter `python`.

    Its working directory (or PYTHONPATH) must be the repository root, as `run_measured` runs
    commands.
    """
    return [python, "-m", f"benchmarks.{module}", *args]


def last_json(text: str) -> dict:
    """The last line of `text` that parses as a JSON object."""
    import json

    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise ValueError(f"no JSON line in output: {text[-500:]!r}")


_SPIN = (
    "import time\nt = time.perf_counter()\nx = 0\nfor i in range({loops}): x += i\n"
    "print(time.perf_counter() - t)"
)


def free_cores(processes: int = 2, *, loops: int = 5_000_000) -> float:
    """The CPU capacity this shared machine gives now, in cores: `processes` CPU-bound Python
    processes run at once, each timed against one run alone (2.0 for 2 processes on 2 idle
    cores; a busy host or shared physical cores give less). Takes ~1-2 s.

    Printed beside the benchmarks' ratios: wall-time ratios between systems that use one core
    and systems that use two depend on it.
    """
    code = _SPIN.format(loops=loops)

    def run(n: int) -> list[float]:
        procs = [
            subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            for _ in range(n)
        ]
        return [float(p.communicate()[0]) for p in procs]

    alone = run(1)[0]
    return sum(alone / t for t in run(processes))


def host_line() -> str:
    """One line on the machine's state: load average and free cores (`free_cores`)."""
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    return f"host: {free_cores():.2f} of {os.cpu_count()} cores free, load average {load}"


def mib(n: float) -> str:
    return f"{n / (1 << 20):.0f}"


def append_rows(path: str | None, rows: list[dict]) -> None:
    """Appends `rows` to the JSON list in the file `path` (made if missing); no path, nothing."""
    if not path:
        return
    import json
    from pathlib import Path

    previous = json.loads(Path(path).read_text()) if Path(path).exists() else []
    Path(path).write_text(json.dumps(previous + rows, indent=1))
