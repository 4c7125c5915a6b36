"""Where the per-file time goes (issue 42): py-spy's GIL samples of our record job on N one-second
clips against the same audio in 10 long files, as microseconds per extra file.

    pip install py-spy                                         # once (PyPI)
    python benchmarks/per_file_profile.py [--clips 10240] [--rate 100]
    python benchmarks/per_file_profile.py --frames run_job,ReadTaskFn._read_task,file_rows

The corpus is `clips_bench`'s (``clips-2727-<N>/``: ``clips/<class>/*.wav`` and the same audio
joined into ``long/<class>.wav``). Each system runs as `clips_bench` runs ours and ours_long,
under ``py-spy record --gil --threads`` (only the thread holding the GIL is sampled: a record
run of clips holds the GIL ~80% of its wall time, so GIL time per file is close to wall time
per file). Printed, as (clips - long) / (N - 10) in us per file: the GIL time of each thread
group, the functions with the most own time, and the children of each `--frames` frame (its
cumulative time split by the frame it calls next). The raw stacks stay in ``--out`` (default
``$AUDIORECORDS_BENCH_DIR/work/per_file/``) for other cuts; one run each: repeat when the host
is shared (`host_line` is printed before and after).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _measure import host_line  # noqa: E402
from clips_bench import QUIET, RECORD_ARGS, clips_corpus  # noqa: E402
from corpus import DEFAULT_DIR  # noqa: E402

FRAMES = "run_job,ReadTaskFn._read_task,ReadTaskFn._write,_Opened._open_wav,file_rows,scan_inputs"
_LINE = re.compile(r":\d+\)$")
_PREFIX = re.compile(r" \((.*/)?(site-packages/|python3\.\d+/)?")


def profile(pattern: str, label_source: str, out: Path, raw: Path, rate: int) -> None:
    """One record run under py-spy (GIL samples, every thread) into `raw` (collapsed stacks)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["py-spy", "record", "--gil", "--threads", "-r", str(rate), "-f", "raw", "-o", str(raw)]
    cmd += ["--", sys.executable, "-m", "pipelines.record", "--input_pattern", pattern]
    cmd += ["--output_dir", str(out), "--label_source", label_source, *RECORD_ARGS]
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, **QUIET, "PYTHONPATH": str(root)}
    subprocess.run(cmd, check=True, cwd=root, env=env, capture_output=True)
    shutil.rmtree(out, ignore_errors=True)


def stacks(raw: Path) -> list[tuple[str, list[str], int]]:
    """(thread group, frames root first as ``function (file)``, samples) per collapsed line."""
    out = []
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        parts = stack.split(";")
        threads = [p for p in parts if p.startswith("thread")]
        group = re.sub(r"\d+", "N", threads[0].split(": ", 1)[-1]) if threads else "?"
        frames = [p for p in parts if not p.startswith(("thread", "process"))]
        out.append((group, [_PREFIX.sub(" (", _LINE.sub(")", f)) for f in frames], int(n)))
    return out


def totals(rows: list[tuple[str, list[str], int]], frame: str | None = None) -> collections.Counter:
    """Samples per thread group (no `frame`), per own frame ("<self>" = ""), or per child of
    the first `frame` in each stack."""
    c: collections.Counter = collections.Counter()
    for group, frames, n in rows:
        if frame is None:
            c[group] += n
        elif frame == "":
            c[frames[-1] if frames else "?"] += n
        else:
            at = [i for i, f in enumerate(frames) if f.startswith(frame + " ")]
            if at:
                i = at[0]
                c[frames[i + 1] if i + 1 < len(frames) else "<self>"] += n
    return c


def diff_lines(a: collections.Counter, b: collections.Counter, scale: float, top: int) -> list:
    keys = sorted(set(a) | set(b), key=lambda k: -(a[k] - b[k]))[:top]
    return [f"  {(a[k] - b[k]) * scale:7.1f}  ({a[k]} vs {b[k]} samples)  {k}" for k in keys]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=int, default=10240, help="one-second clips")
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--frames", default=FRAMES, help="comma list: frames to split")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--dir", default=DEFAULT_DIR, help="corpus and output cache dir")
    parser.add_argument("--out", default=None, help="where the raw stacks go")
    args = parser.parse_args(argv)
    if shutil.which("py-spy") is None:
        raise SystemExit("py-spy is not installed: pip install py-spy")
    corpus_dir = clips_corpus(args.clips, root=args.dir)
    work = Path(args.out or Path(args.dir) / "work" / "per_file")
    work.mkdir(parents=True, exist_ok=True)
    print(host_line(), flush=True)
    profile(f"{corpus_dir}/clips/*/*.wav", "dirname", work / "out", work / "clips.txt", args.rate)
    profile(f"{corpus_dir}/long/*.wav", "filename", work / "out", work / "long.txt", args.rate)
    print(f"after the runs: {host_line()}")
    clips, long = stacks(work / "clips.txt"), stacks(work / "long.txt")
    scale = 1e6 / args.rate / (args.clips - 10)  # samples -> us per extra file
    total_a, total_b = sum(n for *_, n in clips), sum(n for *_, n in long)
    print(
        f"GIL time: clips {total_a / args.rate:.2f} s, long files {total_b / args.rate:.2f} s: "
        f"{(total_a - total_b) * scale:.0f} us per extra file (stacks: {work})"
    )
    print("by thread (us/file):")
    print("\n".join(diff_lines(totals(clips), totals(long), scale, 8)))
    print("own time (us/file):")
    print("\n".join(diff_lines(totals(clips, ""), totals(long, ""), scale, args.top)))
    for frame in [f for f in args.frames.split(",") if f]:
        a, b = totals(clips, frame), totals(long, frame)
        print(f"{frame}: {(sum(a.values()) - sum(b.values())) * scale:.0f} us/file, by child:")
        print("\n".join(diff_lines(a, b, scale, args.top)))


if __name__ == "__main__":
    main()
