"""Benchmark the two feature paths of `transforms.audio.features`: numpy/scipy vs tf.signal.

    python -m benchmarks features [--windows 2000] [--repeats 3]

Prints windows/s of `compute_features_numpy` and `compute_features_tf` for log_mel alone and for
all three features, with the windows passed in calls of `--windows` (one call), 256 and 16
windows, and the numpy/tf ratio. Each thread setting runs in its own subprocess so the
environment takes effect before numpy / BLAS / tensorflow start:

- single: OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1 and tf.config.threading
  intra=inter=1, as in a Beam multi-process worker (one worker process per core);
- default: no limits (BLAS and TF use every core);
- 2procs: two default processes at once, like a 2-worker Beam pool whose environment sets no
  thread limits (per-process windows/s, averaged).

Each number is the best of `--repeats` timed passes over all windows after one warm-up call (tf
graph tracing and constant caches are not timed), as windows per wall-clock second and per CPU
second of the process (all its threads): on a shared machine the CPU figure is the stable one,
and with one thread per worker it is the throughput a Beam worker gets from a core. The workload
is synthetic speech-like audio: a few harmonics with random pitch plus noise at random levels,
1 window in 20 silent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from benchmarks.table import ratio, table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SINGLE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SETTINGS = {"single": 1, "default": 1, "2procs": 2}  # setting -> concurrent worker processes
FEATURE_SETS = {"log_mel": ("log_mel",), "all3": ("spectrogram", "log_mel", "mfcc")}


def _workload(*, windows: int, win_len: int, sample_rate: int, seed: int = 0):
    """float32 [windows, win_len] in [-1, 1): harmonics + noise, some silent windows."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(win_len) / sample_rate
    pitch = rng.uniform(80.0, 400.0, size=(windows, 1))
    x = np.zeros((windows, win_len))
    for harmonic in range(1, 6):
        phase = rng.uniform(0, 2 * np.pi, (windows, 1))
        x += np.sin(2 * np.pi * harmonic * pitch * t + phase) / harmonic
    x += rng.standard_normal((windows, win_len)) * rng.uniform(0.01, 0.3, (windows, 1))
    x *= rng.uniform(0.05, 0.5, (windows, 1)) / np.maximum(np.abs(x).max(axis=1, keepdims=True), 1)
    x[::20] = 0.0
    return x.astype(np.float32)


def _worker(args: argparse.Namespace) -> None:
    """Runs in the subprocess: time both paths, print one JSON line of results."""
    sys.path.insert(0, ROOT)
    import tensorflow as tf

    if args.setting == "single":
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    from transforms.audio import features, features_tf

    if args.block_frames:
        features._BLOCK_FRAMES = args.block_frames
    waveforms = _workload(windows=args.windows, win_len=args.win_len, sample_rate=args.sample_rate)
    paths = {"numpy": features.compute_features_numpy, "tf": features_tf.compute_features_tf}
    results = []
    for set_name, names in FEATURE_SETS.items():
        config = features.FeatureConfig(names=names, num_mel_bins=64)
        for batch in (args.windows, 256, 16):
            wall = {path: float("inf") for path in paths}
            cpu = dict(wall)
            for fn in paths.values():  # warm-up: traces the tf graph, caches constants
                fn(waveforms[:batch], sample_rate=args.sample_rate, config=config)
            for _ in range(args.repeats):
                for path, fn in paths.items():  # interleaved, so drift hits both paths alike
                    start, start_cpu = time.perf_counter(), time.process_time()
                    for i in range(0, args.windows, batch):
                        fn(waveforms[i : i + batch], sample_rate=args.sample_rate, config=config)
                    wall[path] = min(wall[path], time.perf_counter() - start)
                    cpu[path] = min(cpu[path], time.process_time() - start_cpu)
            row = {"setting": args.setting, "features": set_name, "batch": batch}
            row.update({path: args.windows / seconds for path, seconds in wall.items()})
            row.update({f"{path}_cpu": args.windows / seconds for path, seconds in cpu.items()})
            results.append(row)
    print(json.dumps(results))


def _run_setting(setting: str, argv: list[str]) -> list[dict]:
    """Run the worker(s) of one setting; rows averaged over its concurrent processes."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    for key in SINGLE_THREAD_ENV:
        env.pop(key, None)
    if setting == "single":
        env.update(SINGLE_THREAD_ENV)
    cmd = [sys.executable, "-m", "benchmarks.features_numpy_vs_tf", *argv, "--setting", setting]
    procs = [
        subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(SETTINGS[setting])
    ]
    runs = []
    for proc in procs:
        stdout, stderr = proc.communicate()
        if proc.returncode:
            sys.exit(f"worker {setting} failed:\n{stderr}")
        runs.append(json.loads(stdout.strip().splitlines()[-1]))
    rows = runs[0]
    for row, *others in zip(*runs, strict=True):
        for path in ("numpy", "tf", "numpy_cpu", "tf_cpu"):
            row[path] = sum(r[path] for r in (row, *others)) / len(runs)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, default=2000)
    parser.add_argument("--win_len", type=int, default=16000)
    parser.add_argument("--sample_rate", type=int, default=16000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--block_frames", type=int, default=0, help="override numpy _BLOCK_FRAMES")
    parser.add_argument("--setting", help=argparse.SUPPRESS)  # set in the worker subprocess
    args = parser.parse_args(argv)
    if args.setting:
        _worker(args)
        return

    print(
        f"{args.windows} windows x {args.win_len} samples at {args.sample_rate} Hz, "
        f"frames 400/160, fft 512, 64 mel bins, 13 mfccs; best of {args.repeats}; "
        f"{os.cpu_count()} cores; win/s per process"
    )
    header = ("setting", "features", "batch", "numpy win/s", "tf win/s", "numpy / tf")
    header += ("numpy win/CPU-s", "tf win/CPU-s", "numpy / tf (CPU)")
    rows = []
    for setting in args.settings:
        for row in _run_setting(setting, sys.argv[1:] if argv is None else list(argv)):
            rows.append(
                (setting, row["features"], row["batch"], f"{row['numpy']:.0f}",
                 f"{row['tf']:.0f}", ratio(row["numpy"], row["tf"]), f"{row['numpy_cpu']:.0f}",
                 f"{row['tf_cpu']:.0f}", ratio(row["numpy_cpu"], row["tf_cpu"]))
            )  # fmt: skip
    print(table(header, rows, align="llr" + "r" * 6))


if __name__ == "__main__":
    main()
