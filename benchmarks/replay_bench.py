"""Replay benchmark: `replay_dataset` vs the seed-style script, (a), Dataset.load, raw parsing.

    python -m benchmarks replay --minutes 30 --pcm16 [--repeats 2] [--epochs 4]
    python -m benchmarks replay --minutes 5                     # quick run

Needs the corpus (`benchmarks/corpus.py`) and four datasets of it, made on first use and cached
under $AUDIORECORDS_BENCH_DIR/work (``--rerecord``: record ours again, e.g. after a format
change): ours (``python -m pipelines.record --win_len 16000 --features log_mel``), the
seed-style script's and (a)'s TFRecords and (b)'s ``Dataset.save(compression="GZIP")``
(`baselines.py`).

Protocol (issue 18): each variant in its own process (so its peak memory is its own); TensorFlow
and the reader imported and the dataset built before the clock; batch 64, no shuffle; the first
epoch, then `--epochs` warm epochs (median). Variants run one after the other in this run (order
rotated between repeats):

- ``ours``: ``replay_dataset(path, batch_size=64)``, every key; ``ours_same``: signal + log_mel;
  ``ours_same_norm``: signal + log_mel + log_mel_norm; ``ours_norm_target``: log_mel_norm +
  target (the `features` argument); ``ours_shuffle``: every key, ``shuffle_buffer=10_000``;
  ``ours_r1`` / ``ours_r2`` / ``ours_r8``: every key, ``num_parallel_reads`` 1 / 2 / 8 (the
  default is AUTOTUNE);
- ``seed``: the seed-style script's reader (`baselines.seed_replay`: parse_single_example +
  parse_tensor per record), every key it stores (signal, log_mel, class, target);
  ``seed_same``: signal + log_mel; ``seed_same_norm``: + log_mel_norm from its own statistics;
- ``tfdata``: (a)'s reader (`baselines.tfdata_replay`), every key;
- ``load``: (b) ``tf.data.Dataset.load`` of the Dataset.save output, every key, batched;
  ``load_same``: the same, keeping signal + log_mel;
- ``raw``: ``TFRecordDataset(our shards)`` + one ``parse_example`` per batch + ``decode_raw``
  of the stored keys (no count check, no interleave logic, no computed keys): what reading
  our shards costs at least;
- ``online``: `baselines.tf_dataset`: decode the WAV files + log-mel in tf.data, batched.

Prints windows/s (median warm epoch over all repeats), MB/s (bytes on disk per second), the
median first epoch, the peak PSS of the process, bytes per window of each dataset, and the
ratios of ours to each peer, every key and same keys. The load average is noted with each row.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import options
from benchmarks._measure import append_rows, host_line, last_json, mib, module_cmd, run_measured
from benchmarks.baselines import BATCH, SEED_KEYS
from benchmarks.corpus import corpus
from benchmarks.table import ratio, spread, table

SAME = ("signal", "log_mel")  # the keys every system stores
# variant -> (dataset, keys; None: every key the dataset has)
VARIANTS = {  # in run order: each of ours next to its peers (the machine's load drifts)
    "ours": ("ours", None),
    "seed": ("seed", SEED_KEYS),
    "tfdata": ("tfdata", None),
    "raw": ("ours", None),
    "read": ("ours", None),
    "load": ("save", None),
    "ours_same": ("ours", SAME),
    "seed_same": ("seed", SAME),
    "load_same": ("save", SAME),
    "ours_same_norm": ("ours", (*SAME, "log_mel_norm")),
    "seed_same_norm": ("seed", (*SAME, "log_mel_norm")),
    "ours_norm_target": ("ours", ("log_mel_norm", "target")),
    "ours_shuffle": ("ours", None),
    "ours_r1": ("ours", None),
    "ours_r2": ("ours", None),
    "ours_r8": ("ours", None),
    "online": ("corpus", None),
}
READERS = {"ours_r1": 1, "ours_r2": 2, "ours_r8": 8}  # num_parallel_reads (default: AUTOTUNE)
DEFAULT = [v for v in VARIANTS if v not in ("ours_shuffle", "online", *READERS)]
# (ours, peer) pairs whose ratios are printed: every key, then the same keys
PAIRS = [("ours", "seed"), ("ours", "load"), ("ours", "tfdata"), ("ours", "raw"),
         ("ours", "online"), ("ours_same", "seed_same"), ("ours_same", "load_same"),
         ("ours_same_norm", "seed_same_norm"), ("ours_norm_target", "seed"),
         ("raw", "seed"), ("read", "seed")]  # fmt: skip
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def prepare(
    minutes: float, root: str, record_args: str = "", *, pcm16: bool = False, rerecord: bool = False
) -> dict[str, Path]:
    """The corpus and the recorded datasets (made once, reused while present)."""
    src = corpus(minutes, root=root, pcm16=pcm16)
    work = Path(root) / "work"
    tag = "".join(c if c.isalnum() else "-" for c in record_args.strip())
    ours = work / f"replay-ours-{src.name}{'-' + tag if tag else ''}"
    paths = {"corpus": src, "ours": ours}
    if rerecord and ours.exists():
        shutil.rmtree(ours)
    if not (ours / "manifest.json").exists():
        cmd = [sys.executable, "-m", "pipelines.record", "--input_pattern", f"{src}/*.wav"]
        cmd += ["--output_dir", str(ours), "--overwrite", "--win_len", "16000"]
        run_measured([*cmd, "--features", "log_mel", *record_args.split()], env=QUIET)
    done_file = {"save": "snapshot.metadata", "seed": "meta.json", "tfdata": "meta.json"}
    for name, done in done_file.items():
        out = paths[name] = work / f"replay-{name}-{src.name}"
        if not (out / done).exists():
            tmp = Path(f"{out}.tmp")
            if tmp.exists():
                shutil.rmtree(tmp)
            cmd = module_cmd(sys.executable, "baselines", name, "--input_dir", str(src))
            run_measured([*cmd, "--output_dir", str(tmp)], env=QUIET)
            tmp.rename(out)
    return paths


def build(variant: str, paths: dict[str, Path]):
    """(dataset of batches, bytes on disk one epoch reads)."""
    import tensorflow as tf

    from replay import load_info, replay_dataset

    dataset, keys = VARIANTS[variant]
    if variant.startswith("ours"):
        shuffle = 10_000 if variant == "ours_shuffle" else 0
        ds = replay_dataset(
            paths["ours"],
            features=keys,
            batch_size=BATCH,
            shuffle_buffer=shuffle,
            seed=None,
            num_parallel_reads=READERS.get(variant, tf.data.AUTOTUNE),
        )
        return ds, _du_shards(paths["ours"])
    if variant.startswith("seed"):
        from baselines import seed_replay

        return seed_replay(str(paths["seed"]), keys), _du(paths["seed"])
    if variant == "tfdata":
        from baselines import tfdata_replay

        return tfdata_replay(str(paths["tfdata"])), _du(paths["tfdata"])
    if variant == "read":
        batches = _our_records(load_info(paths["ours"])).batch(BATCH)
        return batches.prefetch(tf.data.AUTOTUNE), _du_shards(paths["ours"])
    if variant == "raw":
        info = load_info(paths["ours"])
        spec, raw_keys = {}, {}
        for key, e in info.elements.items():
            if not getattr(e, "stored", True):
                continue  # format 2's z_score keys: computed when read, not in the records
            if e.encoding == "raw":
                spec[key] = tf.io.FixedLenFeature([], tf.string)
                stored = getattr(e, "stored_dtype", None) or e.dtype
                raw_keys[key] = (tf.as_dtype(stored), tf.as_dtype(e.dtype), e.shape)
            else:
                dtype = tf.string if e.dtype == "string" else tf.as_dtype(e.dtype)
                spec[key] = tf.io.FixedLenFeature(e.shape, dtype)

        def parse(records):
            out = tf.io.parse_example(records, spec)
            for key, (stored, dtype, shape) in raw_keys.items():
                values = tf.io.decode_raw(out[key], stored)
                out[key] = tf.reshape(tf.cast(values, dtype), [-1, *shape])
            return out

        ds = _our_records(info).batch(BATCH).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.prefetch(tf.data.AUTOTUNE), _du_shards(paths["ours"])
    if variant.startswith("load"):
        ds = tf.data.Dataset.load(str(paths["save"]), compression="GZIP")
        if keys:
            ds = ds.map(lambda e: {k: e[k] for k in keys})
        return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE), _du(paths["save"])
    if variant == "online":
        from baselines import tf_dataset

        ds = tf_dataset(str(paths["corpus"])).batch(BATCH).prefetch(tf.data.AUTOTUNE)
        wavs = sum(os.path.getsize(os.path.realpath(p)) for p in paths["corpus"].glob("*.wav"))
        return ds, wavs
    raise ValueError(variant)


def _our_records(info):
    """Every record of our shards: a plain `TFRecordDataset`, files read in parallel."""
    import tensorflow as tf

    files = [s.path for s in info.shard_list(None)]
    return tf.data.TFRecordDataset(
        files, compression_type=info.compression_type, num_parallel_reads=tf.data.AUTOTUNE
    )


def _du_shards(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).glob("*.tfrecord-*"))


def child(variant: str, paths: dict[str, Path], epochs: int) -> dict:
    """Runs in the subprocess: dataset built, then the first epoch and `epochs` warm epochs."""
    ds, nbytes = build(variant, paths)
    times, windows = [], 0
    for _ in range(epochs + 1):
        start = time.perf_counter()
        windows = 0
        for batch in ds:
            first = batch if not isinstance(batch, dict) else next(iter(batch.values()))
            windows += int(first.shape[0])
        times.append(time.perf_counter() - start)
    return {"variant": variant, "windows": windows, "first": times[0], "epochs": times[1:],
            "bytes": nbytes}  # fmt: skip


def content_bytes(path: Path, keys, *, limit: int = 1000) -> tuple[int, int]:
    """(bytes, records) of our first `limit` records re-encoded with only `keys`, framing included.

    Our records hold keys the seed-style script does not store (filepath, index, ...): this is
    what ours would take for the seed-style script's content.
    """
    import tensorflow as tf

    files = sorted(str(p) for p in Path(path).glob("*.tfrecord-*"))
    total, count = 0, 0
    for record in tf.data.TFRecordDataset(files).take(limit).as_numpy_iterator():
        example = tf.train.Example.FromString(record)
        for key in list(example.features.feature):
            if key not in keys:
                del example.features.feature[key]
        total += len(example.SerializeToString()) + 16  # TFRecord: length, 2 CRCs
        count += 1
    return total, count


def dataset_bytes(paths: dict[str, Path]) -> dict[str, tuple[int, int]]:
    """(bytes on disk, windows) of each recorded dataset."""
    manifest = json.loads((paths["ours"] / "manifest.json").read_text())
    windows = manifest["num_examples"]
    return {
        "ours, same content as seed-style (1000 records)": content_bytes(paths["ours"], SEED_KEYS),
        "ours (shards)": (_du_shards(paths["ours"]), windows),
        "ours (directory)": (_du(paths["ours"]), windows),
        "seed-style": (_du(paths["seed"]), windows),
        "(a) tfdata": (_du(paths["tfdata"]), windows),
        "(b) Dataset.save GZIP": (_du(paths["save"]), windows),
    }


def report(rows: list[dict], sizes: dict[str, tuple[int, int]] | None = None) -> str:
    """Table (median warm epoch over all repeats per variant, median first epoch) and ratios."""
    merged: dict[str, dict] = {}
    for r in rows:
        m = merged.setdefault(r["variant"], dict(r, epochs=[], firsts=[], pss=0, loads=[]))
        m["epochs"] += r["epochs"]
        m["firsts"].append(r.get("first", r["epochs"][0]))
        m["pss"] = max(m["pss"], r["pss"])
        m["loads"].append(r.get("load", 0.0))
    for m in merged.values():
        m["seconds"] = statistics.median(m["epochs"])
        m["first"] = statistics.median(m["firsts"])
    header = ("variant", "windows/s", "MB/s", "warm s", "1st epoch s", "peak PSS MiB", "load")
    cells = []
    for v in VARIANTS:
        if v in merged:
            m = merged[v]
            cells.append(
                (v, f"{m['windows'] / m['seconds']:.0f}", f"{m['bytes'] / 1e6 / m['seconds']:.0f}",
                 f"{m['seconds']:.3f}", f"{m['first']:.3f}", mib(m["pss"]),
                 "/".join(f"{x:.1f}" for x in m["loads"]))
            )  # fmt: skip
    lines = [table(header, cells), ""]
    warm_of = {(r["variant"], r["repeat"]): statistics.median(r["epochs"]) for r in rows}
    for ours, peer in PAIRS:
        if ours in merged and peer in merged:
            warm = ratio(merged[peer]["seconds"], merged[ours]["seconds"])
            first = ratio(merged[peer]["first"], merged[ours]["first"])
            lines.append(f"{ours} / {peer}: warm {warm}, first epoch {first} (>1: ours)")
            pairs = [
                warm_of[peer, rep] / warm_of[ours, rep]
                for (v, rep) in warm_of
                if v == ours and (peer, rep) in warm_of
            ]
            if len(pairs) > 1:  # the machine's load drifts: each repeat's own ratio too
                lines.append(f"  warm per repeat: {spread(pairs, unit='x')}")
    if "ours_shuffle" in merged and "ours" in merged:
        shown = ratio(merged["ours"]["seconds"], merged["ours_shuffle"]["seconds"])
        lines.append(f"ours_shuffle / ours: {shown}")
    for name, (nbytes, windows) in (sizes or {}).items():
        per_window = nbytes / windows / 1e3
        lines.append(f"bytes/window {name}: {per_window:.1f} KB ({nbytes / 1e6:.0f} MB)")
    if sizes:
        ours = sizes["ours (shards)"][0]
        for name in ("seed-style", "(a) tfdata", "(b) Dataset.save GZIP"):
            lines.append(f"ours shards bytes / {name}: {ratio(ours, sizes[name][0])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = options.parser(__doc__)
    options.common(parser, minutes=30.0, pcm16=True, repeats=2, epochs=4)
    parser.add_argument("--variants", default=",".join(DEFAULT), help=f"of {','.join(VARIANTS)}")
    parser.add_argument("--record_args", default="", help="extra flags for our dataset")
    parser.add_argument("--rerecord", action="store_true", help="record our dataset again")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rerecord = args.rerecord and not args.child
    paths = prepare(args.minutes, args.dir, args.record_args, pcm16=args.pcm16, rerecord=rerecord)
    if args.child:
        print(json.dumps(child(args.child, paths, args.epochs)))
        return
    variants = args.variants.split(",")
    print(host_line(), flush=True)  # before and after: wall-time ratios depend on free cores
    rows = []
    for rep in range(args.repeats):
        for v in variants[rep % len(variants) :] + variants[: rep % len(variants)]:
            cmd = module_cmd(sys.executable, "replay_bench", "--minutes", str(args.minutes))
            cmd += ["--dir", args.dir]
            cmd += [f"--record_args={args.record_args}", *(["--pcm16"] if args.pcm16 else [])]
            load = float(Path("/proc/loadavg").read_text().split()[0])
            try:
                m = run_measured([*cmd, "--epochs", str(args.epochs), "--child", v], env=QUIET)
            except (RuntimeError, subprocess.SubprocessError) as e:
                print(f"{v}: failed: {e}", flush=True)
                continue
            row = dict(last_json(m.stdout), pss=m.peak_pss_tree, rss=m.peak_rss_tree, repeat=rep)
            row["load"] = load
            rows.append(row)
            print(json.dumps(row), flush=True)
    append_rows(args.json, rows)
    print(f"after the runs: {host_line()}")
    print(report(rows, dataset_bytes(paths)))


if __name__ == "__main__":
    main()
