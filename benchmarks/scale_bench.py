"""Many short clips at scale (issue 27): does the launcher's cost stay flat from 1,000 to 100,000?

    python -m benchmarks scale [--sizes 1000,100000] [--long]
    python -m benchmarks scale --sizes 2000 --keep /tmp/out   # keep the dataset (diffs)

Workload (made once into $AUDIORECORDS_BENCH_DIR, default /tmp/audiorecords-bench,
``scale-<seed>-<N>/``): N clips of 0.25 s (16 kHz mono 16-bit) ``clips/<class>/clipNNNNNN.wav``
in 10 class folders (clip i: class i mod 10, a tone with noise, a function of the seed and i
only, written with the stdlib `wave`); with ``--long`` also the same audio joined into 10 long
files ``long/<class>.wav`` (a class's clips in index order).

Each size runs ours as a whole process (`_measure.run_measured`: wall time, peak RSS / PSS of its
process tree, sampled every 0.25 s)::

    python -m pipelines.record --input_pattern '<dir>/clips/*/*.wav' --label_source dirname
        --features log_mel --win_len 4000 --overwrite

(one window per clip), and ``--long`` the long files with ``--label_source filename``. Seen from
outside, while it runs: `plan s`, when the run marker appears in the output directory (planning
done: it is written just after; includes the interpreter's imports), and `1st window s`, when
the first part file appears (the launcher's time before the first window is written). After the
run: manifest.json and files.jsonl bytes, `load_info` (best of 3, in this process) and, before
it, Beam's `FileSystems.match` on the pattern alone (listing cost, in this process).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
import wave
from pathlib import Path

import numpy as np

from benchmarks import options
from benchmarks._measure import ROOT, host_line, mib, run_measured
from benchmarks.clips_bench import CLASSES, code_line
from benchmarks.corpus import DEFAULT_DIR, RATE
from benchmarks.table import num, table

PY = sys.executable
SEED = 2728
CLIP = RATE // 4  # 0.25 s
RECORD_ARGS = ["--features", "log_mel", "--win_len", str(CLIP), "--overwrite"]
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}


def clip_samples(index: int, seed: int = SEED) -> np.ndarray:
    """int16 [CLIP] samples of clip `index`: a tone (class-dependent pitch) in white noise."""
    rng = np.random.default_rng([seed, index])
    t = np.arange(CLIP) / RATE
    f0 = 200.0 * (1 + index % len(CLASSES)) * rng.uniform(0.9, 1.1)
    x = np.sin(2 * np.pi * f0 * t) + 0.3 * rng.standard_normal(CLIP)
    return np.rint(x * rng.uniform(1000, 8000)).clip(-32768, 32767).astype("<i2")


def _write_wav(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(samples.tobytes())


def scale_corpus(n: int, *, root: str = DEFAULT_DIR, seed: int = SEED, long: bool = False) -> Path:
    """``<root>/scale-<seed>-<n>``: ``clips/<class>/clipNNNNNN.wav`` (and ``long/<class>.wav``
    with `long`), each made once (in a temporary directory renamed into place)."""
    out = Path(root) / f"scale-{seed}-{n}"
    if not (out / "clips").exists():
        tmp = Path(f"{out}.tmp{os.getpid()}")
        for name in CLASSES:
            (tmp / "clips" / name).mkdir(parents=True)
        for i in range(n):
            path = tmp / "clips" / CLASSES[i % len(CLASSES)] / f"clip{i:06d}.wav"
            _write_wav(path, clip_samples(i, seed))
        out.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / "clips", out / "clips")
        shutil.rmtree(tmp)
    if long and not (out / "long").exists():
        tmp = Path(f"{out}/long.tmp{os.getpid()}")
        tmp.mkdir(parents=True)
        for c, name in enumerate(CLASSES):
            idx = range(c, n, len(CLASSES))
            _write_wav(tmp / f"{name}.wav", np.concatenate([clip_samples(i, seed) for i in idx]))
        os.replace(tmp, out / "long")
    return out


class Watch:
    """Seconds from now until each of `paths` exists (polled every 20 ms in a thread)."""

    def __init__(self, paths: dict[str, Path]):
        self.seen: dict[str, float] = {}
        self._paths, self._start = paths, time.perf_counter()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._done.is_set() and len(self.seen) < len(self._paths):
            for key, path in self._paths.items():
                if key not in self.seen and _exists(path):
                    self.seen[key] = time.perf_counter() - self._start
            self._done.wait(0.02)

    def stop(self) -> dict[str, float]:
        self._done.set()
        self._thread.join()
        return self.seen


def _exists(path: Path) -> bool:
    """`path` exists; a directory: and holds a file somewhere below it."""
    if not path.is_dir():
        return path.exists()
    return any(files for _, _, files in os.walk(path))


def run_one(pattern: str, label_source: str, out: Path) -> dict:
    """One measured record run on `pattern`; a result row."""
    from apache_beam.io.filesystems import FileSystems

    import replay

    shutil.rmtree(out, ignore_errors=True)
    cmd = [PY, "-m", "pipelines.record", "--input_pattern", pattern, "--output_dir", str(out)]
    cmd += ["--label_source", label_source, *RECORD_ARGS]
    watch = Watch({"plan": out / ".audiorecords-run", "first": out / ".tmp" / "parts"})
    m = run_measured(cmd, env=QUIET)
    seen = watch.stop()
    start = time.perf_counter()
    matched = sum(len(r.metadata_list) for r in FileSystems.match([pattern]))
    match_s = time.perf_counter() - start
    load = []
    for _ in range(3):
        start = time.perf_counter()
        info = replay.load_info(str(out))
        load.append(time.perf_counter() - start)
    return {
        "files": matched,
        "windows": info.num_examples(),
        "wall": m.wall,
        "plan": seen.get("plan"),
        "first": seen.get("first"),
        "rss_tree": m.peak_rss_tree,
        "pss_tree": m.peak_pss_tree,
        "rss_root": m.peak_rss_root,
        "manifest": (out / "manifest.json").stat().st_size,
        "files_jsonl": (out / "files.jsonl").stat().st_size,
        "load_info": min(load),
        "match": match_s,
    }


def runs_table(rows: list[tuple[str, dict]]) -> str:
    """The markdown table of the runs."""
    header = ("run", "files", "windows", "wall s", "plan s", "1st window s", "RSS tree MiB")
    header += ("PSS tree MiB", "RSS launcher MiB", "manifest B", "files.jsonl B")
    header += ("load_info ms", "match s")
    cells = [
        (name, f"{r['files']:,}", f"{r['windows']:,}", num(r["wall"], 1), num(r["plan"], 1),
         num(r["first"], 1), mib(r["rss_tree"]), mib(r["pss_tree"]), mib(r["rss_root"]),
         f"{r['manifest']:,}", f"{r['files_jsonl']:,}", num(r["load_info"] * 1e3),
         num(r["match"]))
        for name, r in rows
    ]  # fmt: skip
    return table(header, cells)


def main(argv: list[str] | None = None) -> None:
    parser = options.common(options.parser(__doc__), json=False)
    parser.add_argument("--sizes", default="1000,100000", help="comma list of clip counts")
    parser.add_argument("--long", action="store_true", help="also the audio in 10 long files")
    parser.add_argument("--keep", default=None, help="keep the datasets under this dir")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    work = Path(args.keep or Path(args.dir) / "work" / "scale")
    print(code_line(), flush=True)
    print(host_line(), flush=True)
    rows = []
    for n in sizes:
        start = time.perf_counter()
        corpus_dir = scale_corpus(n, root=args.dir, long=args.long)
        print(f"corpus {corpus_dir}: {time.perf_counter() - start:.1f} s", flush=True)
        runs = [(f"{n:,} clips", f"{corpus_dir}/clips/*/*.wav", "dirname")]
        if args.long:
            runs.append((f"{n:,} clips as 10 long", f"{corpus_dir}/long/*.wav", "filename"))
        for name, pattern, label_source in runs:
            out = work / f"{n}-{label_source}"
            row = run_one(pattern, label_source, out)
            rows.append((name, row))
            print(name, {k: v for k, v in row.items()}, flush=True)
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
    print(f"after the runs: {host_line()}")
    print(f"code at {ROOT}")
    print(runs_table(rows))


if __name__ == "__main__":
    main()
