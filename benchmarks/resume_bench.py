"""What ``--resume`` saves: a run killed at ~80% of its reads, resumed, against a full run.

    python -m benchmarks resume [--minutes 480] [--pcm16] [--repeats 1] [--kill_at 0.8]
        [--extra "--direct_num_workers 2 --direct_running_mode multi_processing"]

Issue 30's acceptance point: an 8-h corpus killed at ~80% of its reads resumes with at most 35%
of a full run's work, (resume wall - fixed) <= 0.35 x (full wall - fixed), the fixed cost being
the job on two one-second files. On the corpus of `benchmarks/corpus.py`, each step a whole
``python -m pipelines.record --win_len 16000 --features log_mel`` process (record_bench's "ours",
plus `--extra`), timed end to end (`_measure`), every output in a fresh directory:

1. fixed: the job on 2 one-second files (record_bench's ``ours_tiny`` corpus);
2. full: the job on the corpus;
3. killed + resumed: the job started in a process group of its own; the bytes of records its
   read tasks have written (its part files under ``<out>/.tmp/parts``) are polled every 20 ms and
   the whole group is SIGKILLed once they reach ``--kill_at`` x the full run's shard bytes
   (uncompressed shards are their parts' bytes; the fraction reached is printed); then the same
   command with ``--resume``, timed. Its dataset must equal the full
   run's: every shard byte-identical, schema.pbtxt, metadata/, files.jsonl and errors.jsonl
   identical, manifest.json equal but for ``created_utc`` (`tests.support.reliability`);
4. overwrite: the same command with ``--overwrite`` over the resumed directory, timed.

Before the first repeat, untimed, the corpus is read once and the job runs once on the tiny files
(the page cache warm for every timed step), and every step starts with the dirty pages of the steps
before it written to disk (`settle`: `os.sync`, untimed). Odd repeats run the steps in reverse order
(killed + resumed and overwrite, full, fixed); every dataset (later full runs, the overwritten one)
is compared with the first full run's. Prints per repeat and over repeats (best, median) the walls,
the fraction of the reads done at the kill, what the resumed run's summary line says it reused, and
the ratio (resume - fixed) / (full - fixed) against the target 0.35; a dataset that differs is
printed, not raised (the exit status is nonzero only on a usage error or a failed command). Only the
CLI and the files it writes are used, so this measures whatever ``--resume`` reuses, however fine
its commits are. `--json PATH` appends the rows to a file."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import options
from benchmarks._measure import ROOT, append_rows, host_line, run_measured
from benchmarks.corpus import corpus, corpus_stats
from benchmarks.record_bench import QUIET, RECORD_ARGS, tiny_corpus
from benchmarks.table import num, table
from tests.support.reliability import assert_same_dataset

PY = sys.executable
TARGET = 0.35  # issue 30: (resume - fixed) <= 0.35 x (full - fixed)
POLL = 0.02  # seconds between two looks at the progress files
COMMITS_DIR = ".tmp/commits"  # pipelines.resume.reuse.COMMITS_DIR


def command(inputs: Path, out: Path, extra: list[str], *flags: str) -> list[str]:
    """The record command on `inputs` into `out`: the same options for every step."""
    cmd = [PY, "-m", "pipelines.record", "--input_pattern", f"{inputs}/*.wav"]
    return [*cmd, "--output_dir", str(out), *RECORD_ARGS, *extra, *flags]


def summary(stdout: str) -> str:
    """The record command's one summary line (its last line of output)."""
    lines = stdout.strip().splitlines()
    return lines[-1] if lines else ""


def settle() -> None:
    """Untimed, before every step: the dirty pages of earlier steps written to disk (`os.sync`).

    Otherwise a step pays the writeback of the one before it: the resumed run always (the ~1.3 GB
    of parts the killed run left in the page cache; on this host's disk, ~65 MB/s, up to 20 s of
    its wall under load), the full run only after the overwrite (odd repeats)."""
    os.sync()


def timed(cmd: list[str]) -> tuple[float, str]:
    """(wall seconds, summary line) of one whole record process, started settled (`settle`)."""
    settle()
    m = run_measured(cmd, env=QUIET)
    return m.wall, summary(m.stdout)


def part_bytes(out: Path) -> int:
    """The bytes of records the job's read tasks have written so far (its part files under
    ``.tmp/parts``, summed): read progress to the write, unlike the progress files' 2-s period."""
    total = 0
    for path in (out / ".tmp" / "parts").rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except OSError:  # renamed or deleted meanwhile
            continue
    return total


def group_alive(pgid: int) -> bool:
    """Whether any process of process group `pgid` is still there (zombies aside)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def run_and_kill(cmd: list[str], out: Path, kill_bytes: int, log: Path) -> dict:
    """Runs `cmd` in a new process group and SIGKILLs the group once its part files hold
    `kill_bytes` bytes. Returns what was seen: part bytes at the kill (None: the run ended
    first), its wall time until then, the commit records left."""
    env = {**os.environ, **QUIET}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    settle()
    start = time.perf_counter()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
    killed = False
    try:
        while proc.poll() is None:
            if part_bytes(out) >= kill_bytes:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(POLL)
        wall = time.perf_counter() - start
    finally:
        if not killed and proc.poll() is None:  # interrupted: leave nothing running
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 60
    while group_alive(proc.pid) and time.monotonic() < deadline:  # workers die with it
        time.sleep(POLL)
    if not killed and proc.returncode != 0:
        sys.stderr.write(log.read_text(errors="replace")[-4000:])
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    return {
        "bytes": part_bytes(out) if killed else None,  # after the kill: what was written
        "wall": wall,
        "commits": len(list((out / COMMITS_DIR).glob("*.json"))),
    }


def same_dataset(got: Path, want: Path) -> str:
    """What differs between the datasets in `got` and `want` ("" if nothing)."""
    try:
        assert_same_dataset(got, want)
        a, b = got / "metadata", want / "metadata"
        names = sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file())
        assert names == sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
        for name in names:
            assert (a / name).read_bytes() == (b / name).read_bytes(), f"metadata/{name}"
    except AssertionError as e:
        return str(e) or "differs"
    return ""


def reuse(line: str) -> str:
    """What a summary line says was reused (``resumed: ...``), or that nothing was."""
    found = re.search(r"resumed: .*", line)
    return found.group(0) if found else "nothing reused (no 'resumed:' in the summary)"


def warm_up(source: Path, tiny: Path, work: Path, extra: list[str]) -> None:
    """Untimed: the corpus read once and the job run once on the tiny files, so that the first
    timed step does not pay the cold page cache the others do not."""
    for path in sorted(source.glob("*.wav")):
        with open(path, "rb") as fh:
            while fh.read(1 << 24):
                pass
    timed(command(tiny, work / "warm-up", extra))
    shutil.rmtree(work / "warm-up")


def one_repeat(rep: int, source: Path, tiny: Path, work: Path, args) -> dict:
    """The steps of one repeat (reverse order on odd ones); a result row. Every dataset is
    compared with ``work/reference``, the first full run's, kept until the end."""
    extra = shlex.split(args.extra)
    reference, full, killed = work / "reference", work / "full", work / "resumed"
    row: dict = {"repeat": rep}

    def fixed() -> None:
        out = work / "tiny"
        row["fixed"], _ = timed(command(tiny, out, extra))
        shutil.rmtree(out)

    def full_run() -> None:
        row["full"], line = timed(command(source, full, extra))
        row["windows"] = json.loads((full / "manifest.json").read_text())["num_examples"]
        print(f"  full: {row['full']:.1f} s | {line}", flush=True)
        if reference.exists():
            row["full_differs"] = same_dataset(full, reference)
            shutil.rmtree(full)
        else:
            full.rename(reference)

    def kill_resume_overwrite() -> None:
        total = record_bytes(reference)
        kill_bytes = max(1, round(args.kill_at * total))
        seen = run_and_kill(command(source, killed, extra), killed, kill_bytes, work / "kill.log")
        row["killed_wall"], row["commits"] = seen["wall"], seen["commits"]
        if seen["bytes"] is None:
            row["kill_fraction"] = None
            print(f"  not killed: the run ended before {kill_bytes} bytes of records", flush=True)
        else:
            row["kill_fraction"] = seen["bytes"] / total
            print(
                f"  killed at {seen['wall']:.1f} s: {seen['bytes'] / 1e6:.0f} of {total / 1e6:.0f}"
                f" MB of records written ({row['kill_fraction']:.0%}, asked {args.kill_at:.0%}), "
                f"{seen['commits']} commit record(s)",
                flush=True,
            )
        row["resume"], line = timed(command(source, killed, extra, "--resume"))
        row["reused"] = reuse(line)
        row["resumed_differs"] = same_dataset(killed, reference)
        print(f"  resumed: {row['resume']:.1f} s | {line}", flush=True)
        row["overwrite"], line = timed(command(source, killed, extra, "--overwrite"))
        row["overwrite_differs"] = same_dataset(killed, reference)
        print(f"  overwrite: {row['overwrite']:.1f} s | {line}", flush=True)
        shutil.rmtree(killed)

    steps = [fixed, full_run, kill_resume_overwrite]
    if rep % 2:  # alternate (the reference exists from repeat 0 on)
        steps.reverse()
    for step in steps:
        step()
    row["ratio"] = ratio(row["resume"], row["full"], row["fixed"])
    row["overwrite_ratio"] = ratio(row["overwrite"], row["full"], row["fixed"])
    return row


def record_bytes(dataset: Path) -> int:
    """The bytes of records a run of `dataset` writes to its part files: its shards' bytes
    (uncompressed shards are their parts' bytes).

    Raises: SystemExit for a compressed dataset (its parts are not its shards' size)."""
    manifest = json.loads((dataset / "manifest.json").read_text())
    if manifest["compression"] != "NONE":
        raise SystemExit(f"{dataset}: {manifest['compression']} shards; run with NONE shards")
    return sum(s["num_bytes"] for split in manifest["splits"].values() for s in split["shards"])


def ratio(wall: float, full: float, fixed: float) -> float | None:
    """(wall - fixed) / (full - fixed): the share of a full run's work `wall` took (None when
    the full run took no longer than the fixed cost: a corpus too small for this machine's
    noise)."""
    return (wall - fixed) / (full - fixed) if full > fixed else None


def valid(rows: list[dict], key: str, pick) -> float | None:
    """`pick` (min, median) of the repeats' `key` values that are not None (None if none is)."""
    values = [r[key] for r in rows if r[key] is not None]
    return pick(values) if values else None


def report(rows: list[dict], kill_at: float) -> str:
    """The table (a row per repeat, then best and median) and the verdict."""
    header = ("repeat", "full s", "fixed s", "killed at", "resume s", "overwrite s")
    header += ("(resume - fixed) / (full - fixed)", "overwrite ratio", "resumed = full")

    def frac(x: float | None) -> str:
        return "not killed" if x is None else f"{x:.0%}"

    cells = []
    for r in rows:
        same = "yes" if not (r["resumed_differs"] or r["overwrite_differs"]) else "**NO**"
        cells.append(
            (r["repeat"], f"{r['full']:.2f}", f"{r['fixed']:.2f}", frac(r["kill_fraction"]),
             f"{r['resume']:.2f}", f"{r['overwrite']:.2f}", num(r["ratio"]),
             num(r["overwrite_ratio"]), same)
        )  # fmt: skip
    if len(rows) > 1:
        for name, pick in (("best", min), ("median", statistics.median)):
            walls = {k: pick(r[k] for r in rows) for k in ("full", "fixed", "resume", "overwrite")}
            fracs = [r["kill_fraction"] for r in rows if r["kill_fraction"] is not None]
            killed = frac(statistics.median(fracs)) if fracs and name == "median" else ""
            cells.append(
                (name, f"{walls['full']:.2f}", f"{walls['fixed']:.2f}", killed,
                 f"{walls['resume']:.2f}", f"{walls['overwrite']:.2f}",
                 num(valid(rows, "ratio", pick)), num(valid(rows, "overwrite_ratio", pick)), "")
            )  # fmt: skip
    lines = [table(header, cells, align="lrrrrrrrl"), ""]
    for r in rows:
        lines.append(f"repeat {r['repeat']}: resumed run reused: {r['reused']}")
        if not r["reused"].startswith("resumed:"):
            lines.append(
                f"repeat {r['repeat']}: nothing reused, so its ratio compares two full runs "
                "(1 +- this machine's noise)"
            )
        for key in ("full_differs", "resumed_differs", "overwrite_differs"):
            if r.get(key):
                lines.append(f"repeat {r['repeat']}: {key.split('_')[0]} dataset DIFFERS: {r[key]}")
    fracs = [r["kill_fraction"] for r in rows if r["kill_fraction"] is not None]
    if any(f >= 1 for f in fracs) or len(fracs) < len(rows):
        lines.append(
            "some kills came after every read was done (or the run ended first): use a longer "
            "corpus"
        )
    median = valid(rows, "ratio", statistics.median)
    killed = f"{statistics.median(fracs):.0%}" if fracs else "n/a (no run was killed)"
    met = "n/a" if median is None else "met" if median <= TARGET else "not met"
    if not any(r["reused"].startswith("resumed:") for r in rows):
        met += "; but nothing was reused"
    lines.append(
        f"reads done at the kill {killed} (asked {kill_at:.0%}); ratio (resume - fixed) / "
        f"(full - fixed): median "
        f"{num(median)}, best {num(valid(rows, 'ratio', min))} (target <= {TARGET}: {met})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = options.common(options.parser(__doc__), minutes=480.0, pcm16=True, repeats=1)
    parser.add_argument(
        "--kill_at",
        type=float,
        default=0.8,
        help="kill once the part files hold this fraction of the full run's record bytes",
    )
    parser.add_argument(
        "--extra", default="", help="more record flags for every run, e.g. '--direct_num_workers 2'"
    )
    args = parser.parse_args(argv)
    if not 0 < args.kill_at < 1:
        parser.error("--kill_at must be between 0 and 1 (exclusive)")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if not __debug__:
        parser.error("run without -O: the dataset comparisons are assert statements")
    taken = {"--output_dir", "--input_pattern", "--resume", "--overwrite"}
    if taken & {flag.split("=")[0] for flag in shlex.split(args.extra)}:
        parser.error(f"--extra cannot hold {sorted(taken)}: the script sets them")

    source = corpus(args.minutes, root=args.dir, pcm16=args.pcm16)
    tiny = tiny_corpus(Path(args.dir))
    print(f"corpus {source}: {corpus_stats(source)}", flush=True)
    print(host_line(), flush=True)
    work = Path(tempfile.mkdtemp(prefix="resume-bench-", dir=args.dir))
    rows = []
    try:
        warm_up(source, tiny, work, shlex.split(args.extra))
        for rep in range(args.repeats):
            print(f"repeat {rep}:", flush=True)
            rows.append(one_repeat(rep, source, tiny, work, args))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    append_rows(args.json, rows)
    print(f"after the runs: {host_line()}")
    print(report(rows, args.kill_at))


if __name__ == "__main__":
    main()
