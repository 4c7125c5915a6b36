"""The global read order (issue 40): shuffle quality, throughput, resume latency, GZIP.

    python -m benchmarks global_order --parts prepare          # datasets only (cached)
    python -m benchmarks global_order --parts quality [--settings 16x64@0,4x256,...]
    python -m benchmarks global_order --parts throughput [--rounds 6] [--variants ...]
    python -m benchmarks global_order --parts resume,gzip [--resume_modes global]
    python -m benchmarks global_order --parts bytes

Datasets (made once under ``$AUDIORECORDS_BENCH_DIR/work``, default /tmp/audiorecords-bench;
every one recorded by the real job, ``python -m pipelines.record``):

- ``tiny-<N>``: N windows of 16 samples (``--win_len 16 --features none --label_source dirname
  --elements_per_shard N/16``) from 10 class folders ``c0..c9`` of one WAV each (N/10 windows of
  random int16 samples), so the shards hold the windows in source order, class after class,
  16 shards cutting across the classes (shard boundaries are not class boundaries). N = 10^6
  for the quality figures, 10^4 / 10^5 / 10^6 for resume latency.
- ``replay-clips-10240/ours`` (shared with replay_clips_bench.py): clips_bench.py's 10,240
  one-second clips in 10 class folders, ``--label_source dirname --win_len 16000 --features
  log_mel``, AUTO compression; ``...-GZIP``: the same with ``--compression GZIP``.
- ``replay-ours-corpus-...-120min`` (shared with replay_bench.py): corpus.py's 2-hour corpus of
  long files, ``--win_len 16000 --features log_mel``.

Parts:

- ``quality``: one epoch of each order on tiny-10^6, reading ``index`` / ``class`` /
  ``win_start_idx`` only; the recorded order is the shards read one after the other with a
  plain TFRecordDataset. Orders: the global order for each ``--settings`` ``KxM[@seed]``
  (block_length x window_blocks, seed 1 unless given: seed 0's epoch 0 keys its block order
  (0, 0, 0)), the buffer shuffle (``replay_dataset(shuffle_buffer=B, seed=0)``) at B = k*M
  (the same records held) and at 10,000, and numpy's permutation
  (``np.random.default_rng(seed).permutation``, seeds 0..2: the reference, averaged). Metrics:
  Kendall tau against the recorded order (exact, O(n log^2 n) inversion count in numpy), the
  mean displacement |position - recorded position| / N, the per-batch class-count L1 deviation
  (batches of 64: sum over classes |count - 64 p_class|, averaged over the batches) and the
  shard-of-origin chi-square per 1% slice of the epoch (against the shards' proportions,
  averaged over the 100 slices; 15 degrees of freedom). Each metric's ratio to the permutation's
  (tau: its z-score against a permutation's null distribution instead, a ratio of two values
  near 0 being noise).
- ``throughput``: on clips and 2 h, in ONE process per dataset, every variant's dataset built
  before the clock, then ``--rounds`` rounds each timing one whole epoch of every variant in
  turn (order rotated each round; round 0 is a warm-up, dropped): windows/s from iter() to the
  iterator's deletion, median over rounds, and the median of the per-round ratios to
  ``ordered`` (``replay_dataset(path, batch_size=64)``); the process CPU time of each epoch,
  and per window against the ordered reader's (on a shared host the steadier figure). Keys:
  signal, log_mel, target, filepath (``--keys all`` in a child: every key). Variants:
  ``ordered``, ``tfr`` (the same read by TensorFlow's TFRecord reader, not by record id: as
  GZIP shards are), ``shuffle`` (``shuffle_buffer=10000, seed=0``), ``layer[:perm=1]`` (the recorded
  order, or a numpy permutation, read by record id through `replay.records`, batches of 64
  ids, then the same parse), and
  ``b:K:M`` (the same order read by the block path: ``replay.global_dataset.random_access``
  patched to False while built, as GZIP shards and the tf.data service read), and
  ``g:K:M[:rb=BYTES][:par=N][:py=1][:take=BATCHES]``: ``order=GlobalOrder(seed=0,
  global_batch_size=64, block_length=K, window_blocks=M)``, with
  ``replay.global_reader.READ_BUFFER_BYTES`` (each block read's buffer at most) set to BYTES
  while the dataset is built, the window map's num_parallel_calls N (patched in while built;
  default AUTOTUNE; the record-id path: its batch read map's), with ``py=1`` local frames read
  by records.py's Python path instead of ``replay._frames``, only the first BATCHES batches of
  an epoch timed.
- ``resume``: a fresh process per measurement, the ordered reader's first batch taken
  untimed first (imports, tf.data's first use, page cache); then the time from the
  ``replay_dataset(...,
  order=GlobalOrder(seed=0, start=P, global_batch_size=64), batch_size=64)`` call to its first
  batch (call and first ``next`` separately), /proc/self/io ``rchar`` and ``read_bytes`` deltas
  over the same span (they include what the pipeline reads ahead by then); P = N/2 rounded to
  a batch; beside the ordered reader's ``.skip(P/64)`` (what a resume without the order does).
  tiny-10^4, 10^5, 10^6 and clips (10^4 large records).
- ``gzip``: clips recorded with GZIP: the throughput part's protocol on it (ordered vs global,
  ``--gzip_variants``: the global order on part of an epoch, a whole one takes minutes);
  and one block of k records read from its offset (the reader's own block dataset,
  `replay.global_reader._WindowReader._block`) at the start and at the end of the largest
  shard, NONE vs GZIP (median of 5).

- ``bytes``: clips and 2 h, one epoch of the default global order read by each of W = 1, 2, 4
  input pipelines, the record bytes each read (the layer's counter,
  `replay.records.Records.bytes_read`, checked against the frames it returned) over the
  epoch's shard bytes.

Prints markdown tables; ``--json PATH`` appends the raw rows.
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

import numpy as np

from benchmarks._measure import ROOT, append_rows, host_line, last_json, module_cmd, run_measured
from benchmarks.clips_bench import PY, QUIET, RECORD_ARGS, clips_corpus
from benchmarks.corpus import DEFAULT_DIR, corpus
from benchmarks.table import ratio, table

BATCH = 64
KEYS = ("signal", "log_mel", "target", "filepath")
TINY_SHARDS = 16
TINY_CLASSES = 10


# ---------------------------------------------------------------- datasets


def tiny_dataset(n: int, root: str) -> Path:
    """``work/global-order/tiny-<n>``: n windows of 16 samples in class-sorted source order."""
    import soundfile as sf

    base = Path(root) / "work" / "global-order" / f"tiny-{n}"
    out = base / "rec"
    if (out / "manifest.json").exists():
        return out
    per_file = n // TINY_CLASSES
    for c in range(TINY_CLASSES):
        d = base / "wav" / f"c{c}"
        d.mkdir(parents=True, exist_ok=True)
        x = np.random.default_rng([40, c]).integers(-3000, 3000, per_file * 16, dtype=np.int16)
        sf.write(str(d / "f.wav"), x, 16000, subtype="PCM_16")
    cmd = [PY, "-m", "pipelines.record", "--input_pattern", f"{base}/wav/*/*.wav"]
    cmd += ["--output_dir", str(out), "--label_source", "dirname", "--win_len", "16"]
    cmd += ["--features", "none", "--elements_per_shard", str(n // TINY_SHARDS), "--overwrite"]
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, **QUIET})
    return out


def clips_dataset(root: str, compression: str | None = None, clips: int = 10240) -> Path:
    """clips_bench.py's clips recorded as replay_clips_bench.py does (+ ``--compression``)."""
    src = clips_corpus(clips, root=root) / "clips"
    work = Path(root) / "work" / f"replay-clips-{clips}"
    out = work / ("ours" if compression is None else f"ours-{compression}")
    if not (out / "manifest.json").exists():
        cmd = [PY, "-m", "pipelines.record", "--input_pattern", f"{src}/*/*.wav"]
        cmd += ["--output_dir", str(out), "--label_source", "dirname", *RECORD_ARGS]
        if compression:
            cmd += ["--compression", compression]
        subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, **QUIET})
    return out


def long_dataset(root: str, minutes: float = 120) -> Path:
    """replay_bench.py's recording of corpus.py's corpus (``--win_len 16000 --features
    log_mel``)."""
    src = corpus(minutes, root=root)
    out = Path(root) / "work" / f"replay-ours-{src.name}"
    if not (out / "manifest.json").exists():
        cmd = [PY, "-m", "pipelines.record", "--input_pattern", f"{src}/*.wav"]
        cmd += ["--output_dir", str(out), "--overwrite", "--win_len", "16000"]
        subprocess.run(
            [*cmd, "--features", "log_mel"], check=True, cwd=ROOT, env={**os.environ, **QUIET}
        )
    return out


def prepare(args: argparse.Namespace) -> None:
    for n in (10**4, 10**5, 10**6):
        print("tiny", n, tiny_dataset(n, args.dir), flush=True)
    print("clips", clips_dataset(args.dir), flush=True)
    print("clips GZIP", clips_dataset(args.dir, "GZIP"), flush=True)
    print("2h", long_dataset(args.dir, args.minutes), flush=True)


# ---------------------------------------------------------------- shuffle quality


def inversions(pos: np.ndarray) -> int:
    """Pairs i < j with pos[i] > pos[j] (distinct values): bottom-up merge sort in numpy, each
    level counting for every right-run element the left-run elements above it."""
    s = np.asarray(pos, np.int64).copy()
    n = len(s)
    big = np.int64(n + 1)
    total, width = 0, 1
    idx = np.arange(n, dtype=np.int64)
    while width < n:
        pair = idx // (2 * width)
        left = (idx // width) % 2 == 0
        keys = pair * big + s  # sorted within runs of `width`: left keys ascend globally
        lkeys, rkeys, rpair = keys[left], keys[~left], pair[~left]
        at_or_below = np.searchsorted(lkeys, rkeys, side="right")
        before_pair = np.searchsorted(lkeys, rpair * big, side="left")
        left_len = np.minimum(width, n - rpair * 2 * width)
        total += int((left_len - (at_or_below - before_pair)).sum())
        s = np.sort(keys) - pair * big  # merge each pair of runs
        width *= 2
    return total


def kendall_tau(pos: np.ndarray) -> float:
    """Kendall tau between `pos` (distinct) and its index: 1 - 4 inversions / (n (n - 1))."""
    n = len(pos)
    return 1.0 - 4.0 * inversions(pos) / (n * (n - 1))


def tau_null_sd(n: int) -> float:
    """Standard deviation of Kendall tau between two independent orders of n (no ties)."""
    return float(np.sqrt(2 * (2 * n + 5) / (9 * n * (n - 1))))


def metrics(
    pos: np.ndarray,
    cls: np.ndarray,
    shard: np.ndarray,
    classes: int,
    shards: int,
    *,
    batch: int = BATCH,
) -> dict:
    """The quality metrics (module docstring) of an epoch: recorded positions `pos` of its
    elements in order, their classes `cls` and shards of origin `shard` (ints)."""
    n = len(pos)
    if not np.array_equal(np.sort(pos), np.arange(n)):
        raise SystemExit("quality: the epoch is not a permutation of the recorded windows")
    p_class = np.bincount(cls, minlength=classes) / n
    m = n // batch
    counts = np.bincount(
        np.arange(m * batch) // batch * classes + cls[: m * batch], minlength=m * classes
    ).reshape(m, classes)
    l1 = np.abs(counts - batch * p_class).sum(axis=1).mean()
    p_shard = np.bincount(shard, minlength=shards) / n
    edges = np.linspace(0, n, 101).astype(np.int64)
    chi = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        observed = np.bincount(shard[lo:hi], minlength=shards)
        expected = (hi - lo) * p_shard
        chi.append(float(((observed - expected) ** 2 / expected).sum()))
    return {
        "tau": kendall_tau(pos),
        "displacement": float(np.abs(pos - np.arange(n)).mean() / n),
        "batch_l1": float(l1),
        "slice_chi2": float(np.mean(chi)),
    }


def child_quality(path: str, settings: list[tuple[int, int, int]], buffers: list[int]) -> dict:
    """One epoch of each order on `path`: their metrics (a row per order)."""
    import tensorflow as tf

    from replay import GlobalOrder, replay_dataset
    from replay.info import load_info

    info = load_info(path)
    shards = info.shard_list(None)
    feats = {
        "index": tf.io.FixedLenFeature([], tf.int64),
        "win_start_idx": tf.io.FixedLenFeature([], tf.int64),
    }
    plain = tf.data.TFRecordDataset([s.path for s in shards]).batch(8192)
    plain = plain.map(lambda r: tf.io.parse_example(r, feats))
    rec = [(b["index"], b["win_start_idx"]) for b in plain.as_numpy_iterator()]
    rec_key = np.concatenate([r[0] for r in rec]) * (1 << 40) + np.concatenate([r[1] for r in rec])
    n = len(rec_key)
    sort = np.argsort(rec_key)
    counts = np.array([s.num_examples for s in shards])
    rec_shard = np.repeat(np.arange(len(shards)), counts)
    keys = ["index", "class", "win_start_idx"]

    def epoch(ds) -> tuple[np.ndarray, np.ndarray]:
        idx, ws, cl = [], [], []
        for b in ds.as_numpy_iterator():
            idx.append(b["index"]), ws.append(b["win_start_idx"]), cl.append(b["class"])
        key = np.concatenate(idx) * (1 << 40) + np.concatenate(ws)
        where = np.searchsorted(rec_key, key, sorter=sort)
        pos = sort[np.minimum(where, n - 1)]
        if not np.array_equal(rec_key[pos], key):
            raise SystemExit("quality: an element not in the recorded order")
        return pos, np.concatenate(cl)

    # the class (as an int) of each recorded position, from one ordered read
    pos0, cls_bytes = epoch(replay_dataset(path, features=keys, batch_size=8192))
    names = sorted(set(cls_bytes.tolist()))
    number = {name: i for i, name in enumerate(names)}
    rec_cls = np.empty(n, np.int64)
    rec_cls[pos0] = [number[c] for c in cls_bytes.tolist()]
    k_classes, k_shards = len(names), len(shards)

    rows = []

    def add(name: str, pos: np.ndarray, seconds: float, **extra) -> None:
        row = {"order": name, "seconds": seconds, **extra}
        row.update(metrics(pos, rec_cls[pos], rec_shard[pos], k_classes, k_shards))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    for seed in range(3):
        start = time.perf_counter()
        perm = np.random.default_rng(seed).permutation(n)
        add("permutation", perm, time.perf_counter() - start, seed=seed)
    for k, m, seed in settings:
        order = GlobalOrder(seed=seed, global_batch_size=BATCH, block_length=k, window_blocks=m)
        start = time.perf_counter()
        pos, _ = epoch(replay_dataset(path, features=keys, order=order, batch_size=8192))
        add(f"global {k}x{m} seed {seed}", pos, time.perf_counter() - start, k=k, m=m, held=k * m)
    for b in buffers:
        start = time.perf_counter()
        ds = replay_dataset(path, features=keys, shuffle_buffer=b, seed=0, batch_size=8192)
        pos, _ = epoch(ds)
        add(f"buffer {b}", pos, time.perf_counter() - start, held=b)
    return {"n": n, "classes": k_classes, "shards": k_shards, "rows": rows}


QUALITY_METRICS = ("displacement", "batch_l1", "slice_chi2")
# seed 1 for every setting; seed 0 (its epoch 0's block key is (0, 0, 0)) beside two of them
SETTINGS = "16x64@0,16x64,16x256,16x1024,4x256,4x1024,2x512,1x1024,1x1024@0"


def parse_setting(text: str) -> tuple[int, int, int]:
    """``KxM[@seed]`` -> (block_length, window_blocks, seed (default 1))."""
    km, _, seed = text.partition("@")
    k, m = km.split("x")
    return int(k), int(m), int(seed or 1)


def quality_report(out: dict) -> str:
    rows, n = out["rows"], out["n"]
    ref = {
        m: statistics.mean(r[m] for r in rows if r["order"] == "permutation")
        for m in (*QUALITY_METRICS, "tau")
    }
    sd = tau_null_sd(n)
    lines = [
        f"{n:,} windows, {out['classes']} classes, {out['shards']} shards; reference: numpy "
        f"permutation, mean of seeds 0-2 (tau null sd {sd:.5f}).",
        "",
    ]
    header = ("order", "held", "tau (z)", "displacement", "ratio", "batch L1", "ratio")
    header += ("slice chi2", "ratio", "all within 10%", "epoch s")
    cells = []
    seen = set()
    for r in rows:
        if r["order"] == "permutation":
            if "permutation" in seen:
                continue
            seen.add("permutation")
            r = {**r, **ref, "seconds": r["seconds"], "held": n}
        ratios = {m: r[m] / ref[m] for m in QUALITY_METRICS}
        ok = all(abs(x - 1) <= 0.1 for x in ratios.values()) and abs(r["tau"]) <= 3 * sd
        cells.append(
            (r["order"], f"{r.get('held', n):,}", f"{r['tau']:.4f} ({r['tau'] / sd:+.1f})",
             f"{r['displacement']:.4f}", f"{ratios['displacement']:.3f}", f"{r['batch_l1']:.2f}",
             f"{ratios['batch_l1']:.3f}", f"{r['slice_chi2']:.1f}", f"{ratios['slice_chi2']:.2f}",
             "yes" if ok else "no", f"{r['seconds']:.1f}")
        )  # fmt: skip
    lines.append(table(header, cells, align="lrrrrrrrrlr"))
    return "\n".join(lines)


# ---------------------------------------------------------------- throughput


def parse_variant(spec: str) -> dict:
    """``ordered`` | ``tfr`` | ``shuffle`` | ``layer[:perm=1]`` |
    ``g:K:M[:rb=BYTES][:par=N][:py=1][:take=BATCHES]`` (module docstring)."""
    parts = spec.split(":")
    out: dict = {"kind": parts[0], "take": None}
    if parts[0] in ("g", "b"):
        out.update(k=int(parts[1]), m=int(parts[2]), rb=None, par=None)
        rest = parts[3:]
    else:
        rest = parts[1:]
    for item in rest:
        key, value = item.split("=")
        out[key] = int(value)
    return out


def build(path: str, spec: str, *, features=KEYS, batch_size: int = BATCH, start: int = 0):
    """The dataset of variant `spec` (module docstring)."""
    import tensorflow as tf

    from replay import GlobalOrder, default_reader, global_dataset, global_reader, replay_dataset
    from replay import records as replay_records

    v = parse_variant(spec)
    feats = list(features) if features else None
    if v["kind"] == "ordered":
        ds = replay_dataset(path, features=feats, batch_size=batch_size)
    elif v["kind"] == "tfr":  # the ordered reader by TensorFlow's TFRecord reader, not by id
        saved_by_id = default_reader._read_by_id
        default_reader._read_by_id = lambda *args, **kwargs: None
        try:
            ds = replay_dataset(path, features=feats, batch_size=batch_size)
        finally:
            default_reader._read_by_id = saved_by_id
    elif v["kind"] == "shuffle":
        ds = replay_dataset(
            path, features=feats, batch_size=batch_size, shuffle_buffer=10_000, seed=0
        )
    elif v["kind"] == "layer":  # the recorded order (or a permutation) read through the layer
        from replay import load_info
        from replay.global_reader import BatchRead
        from replay.parsing import batch_parser
        from replay.records import Records
        from replay.shards import reader_options
        from replay.slicing import read_spans

        info = load_info(path)
        records = Records(info, read_spans(info, None))
        records.load_offsets()
        parse = batch_parser(info.select_features(feats), info.elements)
        ids = tf.data.Dataset.range(len(records))
        if v.get("perm"):  # a numpy permutation of the records: any permutation's ceiling
            perm = np.random.default_rng(0).permutation(len(records))
            ids = tf.data.Dataset.from_tensor_slices(perm.astype(np.int64))
        ds = (
            ids.batch(batch_size)
            .map(BatchRead(records), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
            .with_options(reader_options(True))
            .prefetch(1)
        )
    elif v["kind"] in ("g", "b"):
        order = GlobalOrder(
            seed=0, start=start, global_batch_size=BATCH, block_length=v["k"], window_blocks=v["m"]
        )
        saved_rb, saved_map = global_reader.READ_BUFFER_BYTES, tf.data.Dataset.map
        par = v["par"]

        def patched_map(self, fn, *args, **kwargs):  # the window map's num_parallel_calls
            target = getattr(fn, "__wrapped__", fn)  # through do_not_convert
            if par is not None and type(getattr(target, "__self__", target)).__name__ in (
                "_WindowReader",
                "BatchRead",
            ):
                kwargs["num_parallel_calls"] = par
            return saved_map(self, fn, *args, **kwargs)

        saved_access, saved_native = global_dataset.random_access, replay_records._native
        try:
            if v.get("py"):  # local frames read by records.py's Python path, not replay._frames
                replay_records._native = None
            if v["rb"] is not None:
                global_reader.READ_BUFFER_BYTES = v["rb"]
            tf.data.Dataset.map = patched_map
            if v["kind"] == "b":  # the block path (GZIP shards', the tf.data service's)
                global_dataset.random_access = lambda info, served: False
            ds = replay_dataset(path, features=feats, batch_size=batch_size, order=order)
        finally:
            global_reader.READ_BUFFER_BYTES, tf.data.Dataset.map = saved_rb, saved_map
            global_dataset.random_access, replay_records._native = saved_access, saved_native
    else:
        raise SystemExit(f"unknown variant {spec!r}")
    return ds.take(v["take"]) if v["take"] else ds


def child_throughput(path: str, variants: list[str], rounds: int, keys: str) -> dict:
    """Every variant built, then `rounds` rounds of one epoch each (rotated; round 0 dropped)."""
    features = None if keys == "all" else keys.split(",")
    return time_datasets({spec: build(path, spec, features=features) for spec in variants}, rounds)


def time_datasets(datasets: dict, rounds: int) -> dict:
    """`rounds` rounds of one epoch of each dataset (rotated; round 0 dropped)."""
    variants = list(datasets)
    rates: dict[str, list[float]] = {spec: [] for spec in variants}
    cpu: dict[str, list[float]] = {spec: [] for spec in variants}  # process CPU s per epoch
    windows: dict[str, int] = {}
    for r in range(rounds):
        turn = variants[r % len(variants) :] + variants[: r % len(variants)]
        for spec in turn:
            start, cpu0, n = time.perf_counter(), time.process_time(), 0
            it = iter(datasets[spec])
            for batch in it:
                n += int(batch["target"].shape[0])
            del it
            took = time.perf_counter() - start
            windows[spec] = n
            if r:
                rates[spec].append(n / took)
                cpu[spec].append(time.process_time() - cpu0)
            print(f"round {r} {spec}: {n / took:,.0f} windows/s", file=sys.stderr, flush=True)
    return {"rates": rates, "cpu": cpu, "windows": windows}


def throughput_report(name: str, out: dict) -> str:
    rates = out["rates"]
    ref = rates.get("ordered")
    header = ("variant", "windows/epoch", "warm windows/s (median)", "rounds")
    header += (
        "/ ordered (median of per-round ratios)",
        "CPU s / epoch",
        "CPU a window / ordered's",
    )
    cells = []
    cpu = {spec: statistics.median(xs) for spec, xs in out["cpu"].items()}
    for spec, xs in rates.items():
        per_round = "-"
        if ref and spec != "ordered":
            per_round = ratio(statistics.median(a / b for a, b in zip(xs, ref, strict=True)), 1)
        per_window = cpu[spec] / out["windows"][spec]
        cpu_ratio = ratio(per_window, cpu["ordered"] / out["windows"]["ordered"]) if ref else "-"
        cells.append(
            (spec, f"{out['windows'][spec]:,}", f"{statistics.median(xs):,.0f}", len(xs),
             per_round, f"{cpu[spec]:.2f}", cpu_ratio)
        )  # fmt: skip
    return f"{name}:\n\n" + table(header, cells)


# ---------------------------------------------------------------- resume latency


def proc_io() -> dict[str, int]:
    with open("/proc/self/io") as fh:
        return {k: int(v) for k, v in (line.split(": ") for line in fh)}


def child_resume(path: str, mode: str) -> dict:
    """Time and bytes from the call to the first batch, starting mid-epoch (module docstring)."""
    from replay.info import load_info

    # untimed: imports, tf.data's first use, the shards in the page cache (as for a trainer)
    next(iter(build(path, "ordered", features=None)))
    n = sum(s.num_examples for s in load_info(path).shard_list(None))
    start = n // 2 // BATCH * BATCH
    io0, t0, c0 = proc_io(), time.perf_counter(), time.process_time()
    if mode == "global":
        ds = build(path, "g:16:64", features=None, start=start)
    else:
        ds = build(path, "ordered", features=None).skip(start // BATCH)
    t1, c1 = time.perf_counter(), time.process_time()
    first = next(iter(ds))
    t2, c2, io1 = time.perf_counter(), time.process_time(), proc_io()
    assert int(first["target"].shape[0]) > 0
    return {
        "n": n,
        "start": start,
        "call": t1 - t0,
        "first": t2 - t1,
        "total": t2 - t0,
        "cpu_call": c1 - c0,
        "cpu_first": c2 - c1,
        "rchar": io1["rchar"] - io0["rchar"],
        "read_bytes": io1["read_bytes"] - io0["read_bytes"],
    }


# ---------------------------------------------------------------- GZIP: one block's read


def child_block(path: str, block_length: int, reps: int = 5) -> dict:
    """One block of `block_length` records from its offset (the reader's block dataset) at the
    start and at the end of the largest shard: median seconds and rchar bytes of `reps` reads."""
    import tensorflow as tf

    from replay.global_order import GlobalOrder, Slots, plan_blocks
    from replay.global_reader import _WindowReader
    from replay.info import load_info

    info = load_info(path)
    shards = info.shard_list(None)
    blocks = plan_blocks([s.num_examples for s in shards], block_length=block_length)
    order = GlobalOrder(seed=0, block_length=block_length)
    reader = _WindowReader(info, shards, blocks, order, Slots(1, 1, 0))
    big = max(range(len(shards)), key=lambda i: shards[i].num_bytes)
    mine = [b for b in range(len(blocks)) if blocks.shard[b] == big]
    out = {
        "compression": info.compression_type,
        "shard_bytes": shards[big].num_bytes,
        "shard_records": shards[big].num_examples,
    }
    for where, b in (("first", mine[0]), ("last", mine[-2] if len(mine) > 1 else mine[-1])):
        one = (reader._path[b], reader._offset[b], reader._count[b], reader._buffer[b])
        ds = tf.data.Dataset.from_tensors(one).flat_map(reader._block)  # as `_read_blocks` does
        times, bytes_ = [], []
        for _ in range(reps):
            io0, t0 = proc_io(), time.perf_counter()
            got = sum(1 for _ in ds)
            times.append(time.perf_counter() - t0)
            bytes_.append(proc_io()["rchar"] - io0["rchar"])
            assert got == int(reader._count[b]), got
        out[where] = {
            "seconds": statistics.median(times),
            "rchar": statistics.median(bytes_),
            "record": int(blocks.first[b]),
        }
    return out


def child(args: argparse.Namespace) -> dict:
    if args.child == "quality":
        settings = [parse_setting(x) for x in args.settings.split(",")]
        buffers = [int(x) for x in args.buffers.split(",") if x]
        return child_quality(args.path, settings, buffers)
    if args.child == "throughput":
        return child_throughput(args.path, args.variants.split(","), args.rounds, args.keys)
    if args.child == "resume":
        return child_resume(args.path, args.mode)
    if args.child == "block":
        return child_block(args.path, args.block_length)
    if args.child == "bytes":
        return child_bytes(args.path)
    raise SystemExit(f"unknown child {args.child}")


def child_bytes(path: str) -> dict:
    """Record bytes each of W input pipelines reads in one epoch of the default global order,
    from the layer's own counter (`replay.records.Records.bytes_read`), W = 1, 2, 4."""
    from replay import GlobalOrder
    from replay.global_order import Slots
    from replay.global_reader import pipeline_batches
    from replay.info import load_info
    from replay.records import FRAME_BYTES, Records
    from replay.slicing import read_spans

    info = load_info(path)
    spans = read_spans(info, None)
    epoch = sum(s.num_bytes for s in info.shard_list(None))
    out: dict = {"epoch_bytes": epoch, "pipelines": {}}
    for workers in (1, 2, 4):
        order = GlobalOrder(seed=0, global_batch_size=BATCH)
        read = []
        for w in range(workers):
            source = Records(info, spans)
            ds = pipeline_batches(
                source, order, slots=Slots(BATCH, workers, w), repeat=False, batch_size=BATCH
            )
            got = sum(len(r) + FRAME_BYTES for b in ds.as_numpy_iterator() for r in b)
            if got != source.bytes_read:
                raise SystemExit(f"bytes: the counter says {source.bytes_read}, read {got}")
            read.append(source.bytes_read)
        out["pipelines"][workers] = read
    return out


def part_bytes(args: argparse.Namespace) -> tuple[str, list[dict]]:
    header = ("dataset", "W", "bytes each pipeline read (MB)", "/ epoch's bytes (max)")
    header += ("all W / epoch",)
    cells, rows = [], []
    datasets = [("clips-10,240", clips_dataset(args.dir)), ("2 h", long_dataset(args.dir))]
    for name, path in datasets:
        out = run_child("bytes", path)
        rows.append({"part": "bytes", "dataset": name, **out})
        for workers, read in out["pipelines"].items():
            each = ", ".join(f"{b / 1e6:,.1f}" for b in read)
            cells.append(
                (name, workers, each, f"{max(read) / out['epoch_bytes']:.3f}",
                 f"{sum(read) / out['epoch_bytes']:.3f}")
            )  # fmt: skip
    return table(header, cells, align="lrlrr"), rows


def run_child(kind: str, path: Path, *extra: str) -> dict:
    cmd = module_cmd(PY, "global_order_bench", "--child", kind, "--path", str(path), *extra)
    return last_json(run_measured(cmd, env=QUIET).stdout)


def part_quality(args: argparse.Namespace) -> tuple[str, list[dict]]:
    path = tiny_dataset(args.quality_windows, args.dir)
    settings = args.settings.split(",")
    buffers = sorted({k * m for k, m, _ in map(parse_setting, settings)} | {10_000})
    out = run_child(
        "quality", path, "--settings", args.settings, "--buffers", ",".join(map(str, buffers))
    )
    return quality_report(out), [{"part": "quality", **out}]


def part_throughput(
    args: argparse.Namespace, name: str, path: Path, variants: str, rounds: int
) -> tuple[str, list[dict]]:
    out = run_child("throughput", path, "--variants", variants, "--rounds", str(rounds))
    return throughput_report(name, out), [{"part": "throughput", "dataset": name, **out}]


def part_resume(args: argparse.Namespace) -> tuple[str, list[dict]]:
    rows = []
    datasets = [(f"tiny-{n:,}", tiny_dataset(n, args.dir)) for n in (10**4, 10**5, 10**6)]
    datasets.append(("clips-10,240 (log_mel)", clips_dataset(args.dir)))
    for name, path in datasets:
        for mode in args.resume_modes.split(","):
            for _ in range(args.repeats):
                out = run_child("resume", path, "--mode", mode)
                rows.append({"part": "resume", "dataset": name, "mode": mode, **out})
                print(json.dumps(rows[-1]), flush=True)
    header = ("dataset", "P", "reader", "call s", "first batch s", "total s")
    header += ("CPU s (call + first)", "rchar MB", "read_bytes MB")
    cells = []
    for name, _ in datasets:
        for mode in args.resume_modes.split(","):
            mine = [r for r in rows if r["dataset"] == name and r["mode"] == mode]
            med = {
                k: statistics.median(r[k] for r in mine)
                for k in ("call", "first", "total", "cpu_call", "cpu_first", "rchar", "read_bytes")
            }
            label = "GlobalOrder(start=P)" if mode == "global" else "ordered .skip(P/64)"
            cells.append(
                (name, f"{mine[0]['start']:,}", label, f"{med['call']:.3f}",
                 f"{med['first']:.3f}", f"{med['total']:.3f}",
                 f"{med['cpu_call']:.2f} + {med['cpu_first']:.2f}", f"{med['rchar'] / 1e6:.2f}",
                 f"{med['read_bytes'] / 1e6:.2f}")
            )  # fmt: skip
    return table(header, cells, align="lrlrrrrrr"), rows


def part_gzip(args: argparse.Namespace) -> tuple[str, list[dict]]:
    plain, gz = clips_dataset(args.dir), clips_dataset(args.dir, "GZIP")
    text, rows = part_throughput(
        args, "clips-10,240, GZIP", gz, args.gzip_variants, args.gzip_rounds
    )
    print(text, flush=True)
    lines = [
        text,
        "",
        "One block of 16 records read from its offset (median of 5):",
        "",
    ]
    cells = []
    for path in (plain, gz):
        out = run_child("block", path, "--block_length", "16")
        rows.append({"part": "block", **out})
        for where in ("first", "last"):
            b = out[where]
            cells.append(
                (out["compression"] or "NONE", f"{out['shard_bytes'] / 1e6:.1f}",
                 f"{out['shard_records']:,}", f"{b['record']:,}", f"{b['seconds']:.4f}",
                 f"{b['rchar'] / 1e6:.2f}")
            )  # fmt: skip
    header = ("compression", "shard MB", "records", "block at record", "s", "rchar MB")
    lines.append(table(header, cells))
    return "\n".join(lines), rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="quality,throughput,resume,gzip,bytes")
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--minutes", type=float, default=120, help="the long-file corpus")
    parser.add_argument("--quality_windows", type=int, default=10**6)
    parser.add_argument(
        "--settings",
        default=SETTINGS,
        help="quality: KxM[@seed] (block_length x window_blocks, seed 1)",
    )
    parser.add_argument(
        "--variants",
        default="ordered,g:16:64,shuffle",
        help="throughput variants (module docstring)",
    )
    parser.add_argument("--rounds", type=int, default=6, help="throughput rounds (1 warm-up)")
    parser.add_argument("--keys", default=",".join(KEYS), help="throughput child: keys read")
    parser.add_argument("--gzip_variants", default="ordered,g:16:64:take=40")
    parser.add_argument("--gzip_rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="resume: processes per row")
    parser.add_argument("--resume_modes", default="global,skip", help="resume: readers")
    parser.add_argument("--json", default=None, help="append the raw rows to this JSON file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--buffers", default="", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--block_length", type=int, default=16, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return
    parts = args.parts.split(",")
    if "prepare" in parts:
        prepare(args)
    print(host_line(), flush=True)
    texts, rows = [], []
    for part in parts:
        if part == "quality":
            text, got = part_quality(args)
        elif part == "throughput":
            text, got = part_throughput(
                args, "clips-10,240", clips_dataset(args.dir), args.variants, args.rounds
            )
            text2, got2 = part_throughput(
                args,
                f"{args.minutes:g}-min corpus",
                long_dataset(args.dir, args.minutes),
                args.variants,
                args.rounds,
            )
            text, got = text + "\n\n" + text2, got + got2
        elif part == "resume":
            text, got = part_resume(args)
        elif part == "gzip":
            text, got = part_gzip(args)
        elif part == "bytes":
            text, got = part_bytes(args)
        elif part == "prepare":
            continue
        else:
            raise SystemExit(f"unknown part {part!r}")
        print(text, flush=True)
        texts.append(text)
        rows += got
    print(host_line())
    print("\n\n".join(texts))
    append_rows(args.json, rows)


if __name__ == "__main__":
    main()
