"""Replay on clips: `replay_dataset` vs Hugging Face `datasets`, ordered and shuffled (issue 28).

    python -m benchmarks replay_clips [--clips 10240] [--repeats 2] [--epochs 5]
        [--hf_python /path/to/venv-with-datasets/bin/python] [--buffer 10000]

The corpus of clips_bench.py (``--clips`` one-second 16 kHz clips in 10 class folders) recorded
once by each system and cached under ``--dir`` (``--rerecord``: again): ours with
``python -m pipelines.record --label_source dirname --win_len 16000 --features log_mel``, Hugging
Face's with hf_baseline.py (``audiofolder`` -> log-mel ``map`` -> ``save_to_disk``). Both hold
per window ``signal`` (int16 [16000]), ``log_mel`` (float32 [98, 64]), the class index
(``target`` / ``label``) and ``filepath``; each reader reads exactly these four keys, in batches
of 64, each variant in a process of its own (the reader imported and the dataset built before
the clock, as a training script would), one after the other in this run:

- ``ours``: ``replay_dataset(path, batch_size=64, features=[4 keys])``;
- ``ours_autotune``: the same with tf.data's autotune back on (as before issue 28);
- ``ours_shuffle``: ``shuffle_buffer=--buffer`` (default block_length: 64 at 10,000);
- ``ours_shuffle_b1``: the same with ``block_length=1`` (the default block before issue 28);
- ``ours_global``: ``order=GlobalOrder(seed=epoch, global_batch_size=64)`` (the defaults: records
  read by id through `replay.records`, issue 51), a new seed each epoch as HF's: a dataset
  built each epoch;
- ``ours_global_run``: one ``GlobalOrder(seed=0, global_batch_size=64)`` dataset with
  ``repeat=True`` read epoch after epoch from one iterator, as a training run reads it (each
  epoch is a new permutation of the order's own);
- ``ours_global_blocks``: the same order read by the block path
  (``replay.global_dataset.random_access`` patched to False while the dataset is built: what
  GZIP shards and the tf.data service read by), with ``block_length=4, window_blocks=256`` (its
  defaults before issue 51);
- ``hf``: ``load_from_disk(path).select_columns([4 keys]).with_format("numpy").iter(64)``;
- ``hf_shuffle``: the same after ``.shuffle(seed=epoch)`` (a full permutation, read by random
  access into the memory-mapped Arrow files).

Each epoch is timed from ``iter()`` to the iterator's deletion (a training loop pays both, once
an epoch); windows/s is the median of the warm epochs (all but each process's first) pooled over
repeats. Shuffle quality, from one epoch of each shuffled variant (untimed) and a numpy
permutation, against the dataset's recorded order (ours: its shards read one after the other;
HF: its rows): ``same class``, the fraction of consecutive elements with the same class (the
clips are recorded class folder by class folder; a true permutation gives ~0.1 with 10 classes);
``gap``, the distance in recorded order between consecutive elements as a fraction of the
epoch (median and 10th percentile; a permutation: 0.29 and 0.05); ``moved``, the median distance
of an element from its recorded position (a permutation: 0.29). Every clip is one window, so
consecutive windows of one file cannot occur here.
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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks import options
from benchmarks._measure import (
    ROOT,
    append_rows,
    host_line,
    last_json,
    mib,
    module_cmd,
    run_measured,
)
from benchmarks.clips_bench import HF_ENV, PY, QUIET, RECORD_ARGS, clips_corpus
from benchmarks.table import ratio, table

BATCH = 64
OURS_KEYS = ("signal", "log_mel", "target", "filepath")
HF_KEYS = ("signal", "log_mel", "label", "filepath")
VARIANTS = (
    "ours",
    "hf",
    "ours_shuffle",
    "hf_shuffle",
    "ours_global",
    "ours_global_blocks",
    "ours_global_run",
    "ours_shuffle_b1",
    "ours_autotune",
)


def clip_key(path: str | bytes) -> str:
    """``<class>/<clip>.wav`` of a stored file path (both systems store the path they read)."""
    path = path.decode() if isinstance(path, bytes) else path
    return "/".join(path.replace("\\", "/").split("/")[-2:])


def _epochs(make_iter, count, epochs: int) -> tuple[float, list[float]]:
    """(first epoch s, warm windows/s): each epoch timed from iter() to the iterator's end."""
    seconds, rates = [], []
    for _ in range(epochs + 1):
        start, n = time.perf_counter(), 0
        it = make_iter()
        for batch in it:
            n += count(batch)
        del it
        took = time.perf_counter() - start
        seconds.append(took)
        rates.append(n / took)
    return seconds[0], rates[1:]


def child_ours(variant: str, path: str, epochs: int, buffer: int) -> dict:
    import tensorflow as tf

    sys.path.insert(0, ROOT)
    from replay import replay_dataset

    kwargs: dict = {"batch_size": BATCH, "features": list(OURS_KEYS)}
    if variant.startswith("ours_global"):
        return child_global(variant, path, epochs)
    if variant.startswith("ours_shuffle"):
        kwargs["shuffle_buffer"] = buffer
    if variant == "ours_shuffle_b1":
        kwargs["block_length"] = 1
    ds = replay_dataset(path, **kwargs)
    if variant == "ours_autotune":
        options = tf.data.Options()
        options.autotune.enabled = True
        ds = ds.with_options(options)
    first, rates = _epochs(lambda: iter(ds), lambda b: int(b["target"].shape[0]), epochs)
    out = {"first": first, "rates": rates, "block_length": None}
    if variant.startswith("ours_shuffle"):
        from replay.info import load_info

        info = load_info(path)
        files = [s.path for s in info.shard_list(None)]
        key = {"filepath": tf.io.FixedLenFeature([], tf.string)}
        plain = tf.data.TFRecordDataset(files).map(lambda r: tf.io.parse_single_example(r, key))
        out["recorded"] = [clip_key(e["filepath"]) for e in plain.as_numpy_iterator()]
        kwargs.update(features=["filepath"], batch_size=None)
        shuffled = replay_dataset(path, **kwargs)
        out["order"] = [clip_key(e["filepath"]) for e in shuffled.as_numpy_iterator()]
    return out


def child_global(variant: str, path: str, epochs: int) -> dict:
    """``ours_global`` / ``ours_global_blocks`` (module docstring): a new seed each epoch."""
    sys.path.insert(0, ROOT)
    from replay import GlobalOrder, global_dataset, replay_dataset

    if variant == "ours_global_run":
        return child_global_run(path, epochs)
    blocks = variant == "ours_global_blocks"
    size = {"block_length": 4, "window_blocks": 256} if blocks else {}
    epoch = [0]

    def make_iter():
        epoch[0] += 1
        order = GlobalOrder(seed=epoch[0], global_batch_size=BATCH, **size)
        saved = global_dataset.random_access
        if blocks:
            global_dataset.random_access = lambda info, served: False
        try:
            ds = replay_dataset(path, batch_size=BATCH, features=list(OURS_KEYS), order=order)
        finally:
            global_dataset.random_access = saved
        return iter(ds)

    first, rates = _epochs(make_iter, lambda b: int(b["target"].shape[0]), epochs)
    return {"first": first, "rates": rates, "block_length": size.get("block_length", 1)}


def child_global_run(path: str, epochs: int) -> dict:
    """``ours_global_run`` (module docstring): epochs of one repeated global-order dataset."""
    import itertools

    sys.path.insert(0, ROOT)
    from replay import GlobalOrder, load_info, replay_dataset

    per_epoch = load_info(path).num_examples() // BATCH
    order = GlobalOrder(seed=0, global_batch_size=BATCH)
    ds = replay_dataset(path, batch_size=BATCH, features=list(OURS_KEYS), order=order, repeat=True)
    run: list = []

    def make_iter():
        if not run:
            run.append(iter(ds))
        return itertools.islice(run[0], per_epoch)

    first, rates = _epochs(make_iter, lambda b: int(b["target"].shape[0]), epochs)
    return {"first": first, "rates": rates, "block_length": 1}


def child_hf(variant: str, path: str, epochs: int) -> dict:
    import datasets

    ds = datasets.load_from_disk(path).select_columns(list(HF_KEYS))
    epoch = [0]

    def make_iter():
        epoch[0] += 1
        d = ds.shuffle(seed=epoch[0]) if variant == "hf_shuffle" else ds
        return d.with_format("numpy").iter(BATCH)

    first, rates = _epochs(make_iter, lambda b: len(b["label"]), epochs)
    out = {"first": first, "rates": rates, "datasets": datasets.__version__}
    if variant == "hf_shuffle":
        out["recorded"] = [clip_key(p) for p in ds["filepath"]]
        out["order"] = [clip_key(p) for p in ds.shuffle(seed=0)["filepath"]]
    return out


def quality(order: list[str], recorded: list[str]) -> dict:
    """Shuffle figures of `order` (module docstring) against `recorded`."""
    where = {key: i for i, key in enumerate(recorded)}
    if len(where) != len(recorded) or sorted(order) != sorted(recorded):
        raise SystemExit("shuffle check: the epoch is not a permutation of the recorded windows")
    pos = np.array([where[key] for key in order])
    n = len(pos)
    gap = np.abs(np.diff(pos)) / n
    classes = [key.split("/")[0] for key in order]
    same = np.mean([a == b for a, b in zip(classes[:-1], classes[1:], strict=True)])
    return {
        "same_class": float(same),
        "gap_median": float(np.median(gap)),
        "gap_p10": float(np.quantile(gap, 0.1)),
        "moved_median": float(np.median(np.abs(pos - np.arange(n))) / n),
    }


def prepare(args: argparse.Namespace) -> dict[str, Path]:
    """The clips and both recorded datasets (cached)."""
    corpus_dir = clips_corpus(args.clips, root=args.dir)
    clips, work = corpus_dir / "clips", Path(args.dir) / "work" / f"replay-clips-{args.clips}"
    paths = {"ours": work / "ours", "hf": work / "hf"}
    if args.rerecord:
        shutil.rmtree(work, ignore_errors=True)
    if not (paths["ours"] / "manifest.json").exists():
        cmd = [PY, "-m", "pipelines.record", "--input_pattern", f"{clips}/*/*.wav"]
        cmd += ["--output_dir", str(paths["ours"]), "--label_source", "dirname", *RECORD_ARGS]
        subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, **QUIET})
    if not (paths["hf"] / "dataset_info.json").exists():
        home = work / "hf-home"
        env = {**os.environ, **QUIET, **HF_ENV, "HF_HOME": str(home)}
        cmd = module_cmd(args.hf_python, "hf_baseline", "--data_dir", str(clips))
        subprocess.run([*cmd, "--output_dir", str(paths["hf"])], check=True, cwd=ROOT, env=env)
        shutil.rmtree(home, ignore_errors=True)
    return paths


def measure(variant: str, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    system = "hf" if variant.startswith("hf") else "ours"
    python = args.hf_python if system == "hf" else PY
    cmd = module_cmd(python, "replay_clips_bench", "--child", variant, "--path", str(paths[system]))
    cmd += ["--epochs", str(args.epochs), "--buffer", str(args.buffer)]
    env = {**QUIET, **(HF_ENV if system == "hf" else {})}
    m = run_measured(cmd, env=env)
    row = {"variant": variant, "peak_pss": m.peak_pss_tree, **last_json(m.stdout)}
    if "order" in row:
        row["quality"] = quality(row.pop("order"), row.pop("recorded"))
    return row


def warm_table(
    rows: list[dict], variants: Sequence[str], bases: Sequence[str] = ()
) -> tuple[str, dict[str, float]]:
    """The table of each variant's warm windows/s (median over its processes' epochs), first
    epoch, peak PSS and its rate over each of `bases`'; and the median rates."""
    header = ("variant", "warm windows/s (median)", "epochs", "first epoch s", "peak PSS MiB")
    header += tuple(f"/ {b}" for b in bases)
    rate, cells = {}, {}
    for variant in variants:
        mine = [r for r in rows if r["variant"] == variant]
        if mine:
            rates = [x for r in mine for x in r["rates"]]
            rate[variant] = statistics.median(rates)
            first = statistics.median(r["first"] for r in mine)
            peak = max(r["peak_pss"] for r in mine)
            cells[variant] = [variant, f"{rate[variant]:,.0f}", len(rates), f"{first:.3f}"]
            cells[variant].append(mib(peak))
    for row in cells.values():
        row += [ratio(rate[row[0]], rate.get(b)) for b in bases]
    return table(header, cells.values()), rate


def report(rows: list[dict], args: argparse.Namespace) -> str:
    shown, rate = warm_table(rows, VARIANTS)
    ratios = []
    for a, b, target in (
        ("ours", "hf", ">= 1"),
        ("ours_shuffle", "hf_shuffle", ">= 2"),
        ("ours_global", "ours", ">= 0.9"),
        ("ours_global", "hf_shuffle", ">= 2"),
        ("ours_global_run", "ours", ">= 0.9"),
        ("ours_global_run", "hf_shuffle", ">= 2"),
        ("ours_global_blocks", "ours", "-"),
        ("ours_shuffle", "ours_shuffle_b1", "-"),
        ("ours", "ours_autotune", "-"),
    ):
        if a in rate and b in rate:
            ratios.append((f"{a} / {b}", ratio(rate[a], rate[b]), target))
    lines = [shown, "", table(("ratio", "value", "target"), ratios, align="lrl")]
    rng = np.random.default_rng(0)
    recorded = sorted(f"{c}/{i}" for c in "abcdefghij" for i in range(args.clips // 10))
    rows = [
        *rows,
        {
            "variant": "numpy permutation",
            "quality": quality(list(rng.permutation(recorded)), recorded),
        },
    ]
    qualities = {}
    for r in rows:
        if "quality" in r and r["variant"] not in qualities:
            q = r["quality"]
            qualities[r["variant"]] = (
                r["variant"], f"{q['same_class']:.3f}", f"{q['gap_median']:.3f}",
                f"{q['gap_p10']:.4f}", f"{q['moved_median']:.3f}",
            )  # fmt: skip
    header = ("variant", "same class", "gap median", "gap p10", "moved median")
    lines += ["", f"Shuffle quality (one epoch; buffer {args.buffer}):", ""]
    lines.append(table(header, qualities.values()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = options.common(options.parser(__doc__), repeats=2, epochs=5)
    parser.add_argument("--clips", type=int, default=10240)
    parser.add_argument("--buffer", type=int, default=10_000, help="shuffle_buffer of ours")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--hf_python", default=PY, help="interpreter with datasets (3.x)")
    parser.add_argument("--rerecord", action="store_true", help="record both datasets again")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.child.startswith("hf"):
            out = child_hf(args.child, args.path, args.epochs)
        else:
            out = child_ours(args.child, args.path, args.epochs, args.buffer)
        print(json.dumps(out))
        return
    paths = prepare(args)
    print(host_line(), flush=True)
    rows = []
    for repeat in range(args.repeats):
        for variant in args.variants.split(","):
            rows.append({**measure(variant, paths, args), "repeat": repeat})
            print(f"{variant}: {statistics.median(rows[-1]['rates']):,.0f} windows/s", flush=True)
    print(host_line())
    print(report(rows, args))
    if args.json:
        append_rows(args.json, rows)


if __name__ == "__main__":
    main()
