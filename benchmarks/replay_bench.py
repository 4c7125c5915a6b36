"""Replay benchmark: `replay_dataset` vs raw TFRecord parsing, Dataset.load and online features.

    python benchmarks/replay_bench.py --minutes 60 [--repeats 2] [--epochs 5]
    python benchmarks/replay_bench.py --minutes 5                     # quick run

Needs two datasets of the corpus (`benchmarks/corpus.py`), made on first use and cached under
$AUDIORECORDS_BENCH_DIR/work: ours (``python -m pipelines.record --win_len 16000 --features
log_mel``) and the ``tf.data.Dataset.save(compression="GZIP")`` of `baselines.tf_dataset`.

Variants, all batch 64 over every key of the element, each in its own process (so its peak
memory is its own) and run one after the other in this run (order rotated between repeats):

- ``ours``: ``replay_dataset(path, batch_size=64)``;
- ``ours_shuffle``: the same with ``shuffle_buffer=10_000``;
- ``raw``: the limit (a): ``TFRecordDataset(our shards, num_parallel_reads=AUTOTUNE)``, batch,
  ``tf.io.parse_example`` + ``decode_raw`` of the signal (no count check, no interleave logic);
- ``load``: (b) ``tf.data.Dataset.load`` of the Dataset.save output, batched;
- ``online``: (c) `baselines.tf_dataset`: decode the WAV files + log-mel in tf.data, batched.

Each child iterates one warm-up epoch and then `--epochs` timed epochs; the table shows the median
timed epoch over all repeats (single epochs of ~0.5 s vary 2x on a shared machine; the median of
10 does not) and the median first epoch. Prints windows/s, MB/s
(bytes on disk read per second: shards, snapshot files or WAV files), the peak PSS of the
process, and the ratios of ours to each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _measure import last_json, mib, run_measured  # noqa: E402
from corpus import DEFAULT_DIR, corpus  # noqa: E402

VARIANTS = ("ours", "ours_shuffle", "raw", "load", "online")
BATCH = 64
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def prepare(minutes: float, root: str, record_args: str = "") -> dict[str, Path]:
    """The corpus and both recorded datasets (made once, reused while present)."""
    src = corpus(minutes, root=root)
    work = Path(root) / "work"
    tag = "".join(c if c.isalnum() else "-" for c in record_args.strip())
    ours = work / f"replay-ours-{minutes:g}min{'-' + tag if tag else ''}"
    saved = work / f"replay-save-{minutes:g}min"
    if not (ours / "manifest.json").exists():
        cmd = [sys.executable, "-m", "pipelines.record", "--input_pattern", f"{src}/*.wav"]
        cmd += ["--output_dir", str(ours), "--overwrite", "--win_len", "16000"]
        run_measured([*cmd, "--features", "log_mel", *record_args.split()], env=QUIET)
    if not (saved / "snapshot.metadata").exists():
        tmp = Path(f"{saved}.tmp")
        script = os.path.join(HERE, "baselines.py")
        run_measured([sys.executable, script, "save", "--input_dir", str(src), "--output_dir",
                      str(tmp)], env=QUIET)  # fmt: skip
        tmp.rename(saved)
    return {"corpus": src, "ours": ours, "save": saved}


def build(variant: str, paths: dict[str, Path]):
    """(dataset of batches, bytes on disk one epoch reads)."""
    import tensorflow as tf

    from replay import load_info, replay_dataset

    if variant in ("ours", "ours_shuffle"):
        shuffle = 10_000 if variant == "ours_shuffle" else 0
        ds = replay_dataset(paths["ours"], batch_size=BATCH, shuffle_buffer=shuffle, seed=None)
        return ds, _du_shards(paths["ours"])
    if variant == "raw":
        info = load_info(paths["ours"])
        spec, raw_keys = {}, {}
        for key, e in info.elements.items():
            if e.encoding == "raw":
                spec[key] = tf.io.FixedLenFeature([], tf.string)
                raw_keys[key] = (tf.as_dtype(e.dtype), e.shape)
            else:
                dtype = tf.string if e.dtype == "string" else tf.as_dtype(e.dtype)
                spec[key] = tf.io.FixedLenFeature(e.shape, dtype)

        def parse(records):
            out = tf.io.parse_example(records, spec)
            for key, (dtype, shape) in raw_keys.items():
                out[key] = tf.reshape(tf.io.decode_raw(out[key], dtype), [-1, *shape])
            return out

        files = [s.path for s in info.shard_list(None)]
        ds = tf.data.TFRecordDataset(
            files, compression_type=info.compression_type, num_parallel_reads=tf.data.AUTOTUNE
        )
        ds = ds.batch(BATCH).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.prefetch(tf.data.AUTOTUNE), _du_shards(paths["ours"])
    if variant == "load":
        ds = tf.data.Dataset.load(str(paths["save"]), compression="GZIP")
        return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE), _du(paths["save"])
    if variant == "online":
        from baselines import tf_dataset

        ds = tf_dataset(str(paths["corpus"])).batch(BATCH).prefetch(tf.data.AUTOTUNE)
        wavs = sum(os.path.getsize(os.path.realpath(p)) for p in paths["corpus"].glob("*.wav"))
        return ds, wavs
    raise ValueError(variant)


def _du_shards(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).glob("*.tfrecord-*"))


def child(variant: str, paths: dict[str, Path], epochs: int) -> dict:
    """Runs in the subprocess: one warm-up epoch, then `epochs` timed epochs."""
    ds, nbytes = build(variant, paths)
    times, windows = [], 0
    for _ in range(epochs + 1):
        start = time.perf_counter()
        windows = 0
        for batch in ds:
            windows += int(next(iter(batch.values())).shape[0])
        times.append(time.perf_counter() - start)
    return {"variant": variant, "windows": windows, "first": times[0], "epochs": times[1:],
            "bytes": nbytes}  # fmt: skip


def report(rows: list[dict]) -> str:
    """Table (median timed epoch over all repeats per variant) and ratios."""
    merged: dict[str, dict] = {}
    for r in rows:
        m = merged.setdefault(r["variant"], dict(r, epochs=[], firsts=[], pss=0))
        m["epochs"] += r["epochs"]
        m["firsts"].append(r.get("first", r["epochs"][0]))
        m["pss"] = max(m["pss"], r["pss"])
    for m in merged.values():
        m["seconds"] = statistics.median(m["epochs"])
    head = f"{'variant':13} {'windows/s':>9} {'MB/s':>7} {'epoch s':>8} {'1st epoch s':>11}"
    lines = [f"{head} {'peak PSS MiB':>12}"]
    for v in VARIANTS:
        if v in merged:
            m = merged[v]
            lines.append(
                f"{v:13} {m['windows'] / m['seconds']:9.0f} {m['bytes'] / 1e6 / m['seconds']:7.0f}"
                f" {m['seconds']:8.2f} {statistics.median(m['firsts']):11.2f} {mib(m['pss']):>12}"
            )
    if "ours" in merged:
        targets = {"raw": ">= 0.9", "load": ">= 1.5", "online": ">= 10"}
        for v, target in targets.items():
            if v in merged:
                ratio = merged[v]["seconds"] / merged["ours"]["seconds"]
                lines.append(f"ours / {v}: {ratio:.2f}x (target {target})")
        if "ours_shuffle" in merged and "raw" in merged:
            ratio = merged["raw"]["seconds"] / merged["ours_shuffle"]["seconds"]
            lines.append(f"ours_shuffle / raw: {ratio:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs after a warm-up")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--record_args", default="", help="extra flags for our dataset")
    parser.add_argument("--json", default=None, help="append the rows to this JSON file")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    paths = prepare(args.minutes, args.dir, args.record_args)
    if args.child:
        print(json.dumps(child(args.child, paths, args.epochs)))
        return
    variants = args.variants.split(",")
    rows = []
    for rep in range(args.repeats):
        for v in variants[rep % len(variants) :] + variants[: rep % len(variants)]:
            cmd = [sys.executable, __file__, "--minutes", str(args.minutes), "--dir", args.dir]
            cmd.append(f"--record_args={args.record_args}")
            try:
                m = run_measured([*cmd, "--epochs", str(args.epochs), "--child", v], env=QUIET)
            except (RuntimeError, subprocess.SubprocessError) as e:
                print(f"{v}: failed: {e}", flush=True)
                continue
            row = dict(last_json(m.stdout), pss=m.peak_pss_tree, rss=m.peak_rss_tree, repeat=rep)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        previous = json.loads(Path(args.json).read_text()) if Path(args.json).exists() else []
        Path(args.json).write_text(json.dumps(previous + rows, indent=1))
    print(report(rows))


if __name__ == "__main__":
    main()
