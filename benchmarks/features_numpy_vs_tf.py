"""Benchmark the two feature paths of `transforms.features`: numpy/scipy vs tf.signal.

    python benchmarks/features_numpy_vs_tf.py [--windows 2000] [--repeats 3]

Prints windows/s of `compute_features_numpy` and `compute_features_tf` for log_mel alone and for
all three features, with the windows passed in calls of `--windows` (one call), 256 and 16
windows, and the numpy/tf ratio. Each thread setting runs in its own subprocess so the
environment takes effect before numpy / BLAS / tensorflow start:

- single: OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1 and tf.config.threading
  intra=inter=1, as in a Beam multi-process worker (one worker process per core);
- default: no limits (BLAS and TF use every core).

Each number is the best of `--repeats` timed passes over all windows after one warm-up call (tf
graph tracing and constant caches are not timed). The workload is synthetic speech-like audio:
a few harmonics with random pitch plus noise at random levels, 1 window in 20 silent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = {
    "single": {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    "default": {},
}
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
    from transforms import features

    if args.block_frames:
        features._BLOCK_FRAMES = args.block_frames
    waveforms = _workload(windows=args.windows, win_len=args.win_len, sample_rate=args.sample_rate)
    paths = {"numpy": features.compute_features_numpy, "tf": features.compute_features_tf}
    results = []
    for set_name, names in FEATURE_SETS.items():
        config = features.FeatureConfig(names=names, num_mel_bins=64)
        for batch in (args.windows, 256, 16):
            best = {path: float("inf") for path in paths}
            for fn in paths.values():  # warm-up: traces the tf graph, caches constants
                fn(waveforms[:batch], sample_rate=args.sample_rate, config=config)
            for _ in range(args.repeats):
                for path, fn in paths.items():  # interleaved, so drift hits both paths alike
                    start = time.perf_counter()
                    for i in range(0, args.windows, batch):
                        fn(waveforms[i : i + batch], sample_rate=args.sample_rate, config=config)
                    best[path] = min(best[path], time.perf_counter() - start)
            row = {"setting": args.setting, "features": set_name, "batch": batch}
            row.update({path: args.windows / seconds for path, seconds in best.items()})
            results.append(row)
    print(json.dumps(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, default=2000)
    parser.add_argument("--win_len", type=int, default=16000)
    parser.add_argument("--sample_rate", type=int, default=16000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--block_frames", type=int, default=0, help="override numpy _BLOCK_FRAMES")
    parser.add_argument("--setting", help=argparse.SUPPRESS)  # set in the worker subprocess
    args = parser.parse_args()
    if args.setting:
        _worker(args)
        return

    print(
        f"{args.windows} windows x {args.win_len} samples at {args.sample_rate} Hz, "
        f"frames 400/160, fft 512, 64 mel bins, 13 mfccs; best of {args.repeats}; "
        f"{os.cpu_count()} cores"
    )
    print(f"{'setting':8} {'features':8} {'batch':>5} {'numpy win/s':>12} {'tf win/s':>9} ratio")
    for setting in args.settings:
        env = {**os.environ, **SETTINGS[setting], "TF_CPP_MIN_LOG_LEVEL": "3"}
        for key in SETTINGS["single"]:
            if key not in SETTINGS[setting]:
                env.pop(key, None)
        cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--setting", setting]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode:
            sys.exit(f"worker {setting} failed:\n{proc.stderr}")
        for row in json.loads(proc.stdout.strip().splitlines()[-1]):
            print(
                f"{row['setting']:8} {row['features']:8} {row['batch']:>5} {row['numpy']:>12.0f} "
                f"{row['tf']:>9.0f} {row['numpy'] / row['tf']:5.2f}"
            )


if __name__ == "__main__":
    main()
