"""Large inputs: one 2-hour 48 kHz 16-bit mono file, and 10,000 tiny files; peak memory of each.

    python -m benchmarks large_inputs [--case long|many|both] [--workdir DIR] [--hours 2]
        [--files 10000] [-- extra record flags]

Writes the inputs once under --workdir (default /tmp/audiorecords-large; ~0.7 GB for the long
file, ~80 MB for the tiny ones), runs ``python -m pipelines.record`` on each with default
options (the runner picks in_memory or multi_processing by input size), samples the memory of
the whole process tree from /proc (benchmarks/_measure.py) and prints one JSON line per case:
wall seconds, windows, output MB, peak RSS / PSS of the tree and of the launcher alone.

tests/reliability/test_reliability_large.py runs it as a test with a memory bound: in CI at a
quarter of the size (a 30-minute file, 2,000 tiny files), and at full size with
``AUDIORECORDS_LARGE=1``. Figures are in docs/guarantees.md (guarantee 7).
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

from benchmarks._measure import run_measured

MB = 1 << 20


def _header(frames: int, rate: int) -> bytes:
    data = frames * 2
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data)
        + b"WAVEfmt \x10\0\0\0"
        + fmt
        + (b"data" + struct.pack("<I", data))
    )


def _signal(start: int, frames: int, rate: int, seed: int) -> np.ndarray:
    """A tone sweep plus noise, int16 (cheap: no need for realism, only for non-constant data)."""
    t = (start + np.arange(frames)) / rate
    rng = np.random.default_rng(seed + start)
    tone = 0.3 * np.sin(2 * np.pi * (200 + 50 * np.sin(t / 7)) * t)
    x = tone + 0.05 * rng.standard_normal(frames)
    return (x * 32767).astype("<i2")


def make_long_file(path: Path, *, hours: float, rate: int = 48000) -> Path:
    """One mono 16-bit file of `hours`, written in 60 s pieces (never all in memory)."""
    frames = int(hours * 3600 * rate)
    if path.exists() and path.stat().st_size == 44 + 2 * frames:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(_header(frames, rate))
        for start in range(0, frames, 60 * rate):
            fh.write(_signal(start, min(60 * rate, frames - start), rate, seed=0).tobytes())
    return path


def make_many_files(directory: Path, *, count: int, frames: int = 4000, rate: int = 16000) -> Path:
    """`count` tiny mono 16-bit files of `frames` frames, 4 classes (by file name)."""
    done = directory / ".complete"
    if done.exists() and done.read_text() == f"{count} {frames}":
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    header = _header(frames, rate)
    for i in range(count):
        label = ("dog", "cat", "bird", "rain")[i % 4]
        sub = directory / f"{i // 1000:02d}"
        sub.mkdir(exist_ok=True)
        (sub / f"clip{i:05d}_{label}.wav").write_bytes(
            header + _signal(0, frames, rate, seed=i).tobytes()
        )
    done.write_text(f"{count} {frames}")
    return directory


def measure(name: str, pattern: str, out: Path, extra: list[str]) -> dict:
    """Runs the record CLI on `pattern` and returns its figures."""
    cmd = [
        sys.executable,
        "-m",
        "pipelines.record",
        "--input_pattern",
        pattern,
        "--output_dir",
        str(out),
        "--overwrite",
        *extra,
    ]
    m = run_measured(cmd, interval=0.5)
    manifest = json.loads((out / "manifest.json").read_text())
    shards = [s for sp in manifest["splits"].values() for s in sp["shards"]]
    return {
        "case": name,
        "input_mb": round(sum(p.stat().st_size for p in _matched(pattern)) / MB, 1),
        "files": manifest["num_files"],
        "windows": manifest["num_examples"],
        "output_mb": round(sum(s["num_bytes"] for s in shards) / MB, 1),
        "shards": len(shards),
        "wall_s": round(m.wall, 1),
        "peak_rss_tree_mb": round(m.peak_rss_tree / MB),
        "peak_pss_tree_mb": round(m.peak_pss_tree / MB),
        "peak_rss_launcher_mb": round(m.peak_rss_root / MB),
        "processes": m.peak_processes,
        "summary": m.stdout.strip().splitlines()[-1] if m.stdout.strip() else "",
    }


def _matched(pattern: str) -> list[Path]:
    import glob

    return [Path(p) for p in glob.glob(pattern, recursive=True)]


def run(argv: list[str] | None = None) -> list[dict]:
    """Parses `argv`, makes the inputs, measures the chosen cases; returns their figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("long", "many", "both"), default="both")
    parser.add_argument("--workdir", default="/tmp/audiorecords-large")
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--files", type=int, default=10_000)
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    work = Path(args.workdir)
    results = []
    if args.case in ("long", "both"):
        path = make_long_file(work / "long" / "two_hours_talk.wav", hours=args.hours)
        results.append(measure("long", str(path), work / "out-long", extra))
        print(json.dumps(results[-1]), flush=True)
    if args.case in ("many", "both"):
        directory = make_many_files(work / "many", count=args.files)
        pattern = str(directory / "**" / "*.wav")
        results.append(measure("many", pattern, work / "out-many", ["--win_len", "4000", *extra]))
        print(json.dumps(results[-1]), flush=True)
    return results


if __name__ == "__main__":
    run()
