"""Framework readers over the clips: tf.data, PyTorch, Grain, HF, Streaming (issue 53).

    python -m benchmarks frameworks [--clips 10240] [--repeats 2] [--epochs 5]
        [--hf_python /tmp/hf-venv/bin/python] [--streaming_python /tmp/streaming-venv/bin/python]
        [--variants ours_global_run,torch_global,...] [--json rows.json]
    python -m benchmarks frameworks --report rows.json  # the table of runs' rows

The 10,240 one-second clips of replay_clips_bench.py (its ``prepare``: ours recorded with
``pipelines.record``, HF's with hf_baseline.py, both cached under ``--dir`` and made if missing)
and a MosaicML Streaming copy of HF's (MDS, written once by ``--streaming_python`` into
``<work>/mds``: ``signal`` ``ndarray:int16:16000``, ``log_mel`` ``ndarray:float32:98,64``,
``label`` ``int``). Every variant reads ``signal`` (int16 [16000]), ``log_mel`` (float32
[98, 64]) and the class index (``target`` / ``label``) in batches of 64, shuffled or in the
global order, each in a process of its own (the reader imported and the dataset built before
the clock). ``hf_*`` run in ``--hf_python`` (``datasets`` and ``torch``), ``streaming`` in
``--streaming_python`` (``mosaicml-streaming`` and ``datasets``: its own virtualenv, since
Streaming pins numpy < 2.2; benchmarks/README.md), the others in this interpreter (``torch``,
``grain``):

- ``ours_global_run``: ``replay_dataset(path, batch_size=64, features=[3 keys],
  order=GlobalOrder(seed=0, global_batch_size=64), repeat=True)``, read epoch after epoch from
  one iterator (each epoch a new permutation of the order's);
- ``torch_global``: ``DataLoader(open_source(path, features=[3 keys]), batch_size=64,
  sampler=GlobalOrderSampler(source, order=GlobalOrder(seed=0, global_batch_size=64)),
  num_workers=2)``, ``sampler.set_epoch(epoch)`` and a new ``iter(loader)`` each epoch (the
  workers start again each epoch: ``persistent_workers`` is off by default);
- ``torch_global_persistent``: the same with ``persistent_workers=True``;
- ``grain_global``: ``grain.DataLoader(data_source=source, sampler=GlobalOrderIndexSampler(
  source, order=..., num_epochs=None), shard_options=ShardOptions(0, 1), worker_count=2)``, one
  iterator of elements read epoch after epoch, each 64 elements stacked key by key after the
  loader (Grain's ``Batch`` inside a loader with workers batches each worker's own elements);
- ``grain_global_w0``: the same with ``worker_count=0`` (elements read in this process);
- ``hf_shuffle_numpy`` / ``hf_shuffle_torch``: ``load_from_disk(path).select_columns([3 keys])
  .shuffle(seed=epoch).with_format("numpy" / "torch").iter(64)``, a new permutation each epoch;
- ``streaming``: ``DataLoader(StreamingDataset(local=mds, shuffle=True, shuffle_seed=0,
  batch_size=64), batch_size=64, num_workers=2)``, a new ``iter(loader)`` each epoch (Streaming
  draws each epoch's permutation from the seed and its epoch counter).

Each epoch is timed from ``iter()`` (or the run's next element) to its last batch and the
iterator's deletion, as replay_clips_bench.py's ``_epochs``; windows/s is the median of the
warm epochs (all but each process's first) pooled over repeats; peak PSS is the peak of the
summed PSS of the variant's process tree (its loader workers included), the max over repeats.
Each epoch is checked: whole batches of 64 of the keys' shapes, and the clips' class counts
(an equal number of each of the 10 classes), a check of size and balance, not of identity.
Ratios: against ``ours_global_run`` and against ``hf_shuffle_numpy`` (replay_clips_bench.py's
``hf_shuffle``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import options
from benchmarks._measure import (
    ROOT,
    append_rows,
    host_line,
    last_json,
    module_cmd,
    run_measured,
)
from benchmarks.clips_bench import HF_ENV, PY, QUIET
from benchmarks.replay_clips_bench import _epochs, prepare, warm_table

BATCH = 64
WORKERS = 2
OURS_KEYS = ("signal", "log_mel", "target")
HF_KEYS = ("signal", "log_mel", "label")
HF_VARIANTS = ("hf_shuffle_numpy", "hf_shuffle_torch", "streaming")
VARIANTS = (
    "ours_global_run",
    "torch_global",
    "torch_global_persistent",
    "grain_global",
    "grain_global_w0",
    "hf_shuffle_numpy",
    "hf_shuffle_torch",
    "streaming",
)
BASES = ("ours_global_run", "hf_shuffle_numpy")


class Checked:
    """Counts the windows of each epoch and checks it: whole batches, each class's clips."""

    def __init__(self, key: str, clips: int):
        self.key, self.clips, self.classes = key, clips, np.zeros(0, np.int64)

    def __call__(self, batch) -> int:
        labels = np.asarray(batch[self.key]).reshape(-1)
        signal, log_mel = batch["signal"], batch["log_mel"]
        if tuple(signal.shape) != (BATCH, 16000) or tuple(log_mel.shape) != (BATCH, 98, 64):
            raise SystemExit(f"batch shapes {tuple(signal.shape)}, {tuple(log_mel.shape)}")
        self.classes = np.concatenate([self.classes, labels.astype(np.int64)])
        if len(self.classes) == self.clips:
            counts = np.bincount(self.classes)
            if len(counts) != 10 or set(counts.tolist()) != {self.clips // 10}:
                raise SystemExit(f"an epoch is not the clips once: class counts {counts}")
            self.classes = np.zeros(0, np.int64)
        return len(labels)


def _stack(elements: list[dict]) -> dict:
    return {key: np.stack([e[key] for e in elements]) for key in elements[0]}


def child_ours(path: str, epochs: int, clips: int) -> dict:
    sys.path.insert(0, ROOT)
    from replay import GlobalOrder, replay_dataset

    order = GlobalOrder(seed=0, global_batch_size=BATCH)
    ds = replay_dataset(path, batch_size=BATCH, features=list(OURS_KEYS), order=order, repeat=True)
    run: list = []

    def make_iter():
        if not run:
            run.append(iter(ds))
        return itertools.islice(run[0], clips // BATCH)

    first, rates = _epochs(make_iter, Checked("target", clips), epochs)
    return {"first": first, "rates": rates}


def child_torch(variant: str, path: str, epochs: int, clips: int) -> dict:
    import torch
    from torch.utils.data import DataLoader

    sys.path.insert(0, ROOT)
    from replay import GlobalOrder, open_source
    from replay.samplers import GlobalOrderSampler

    source = open_source(path, features=list(OURS_KEYS))
    sampler = GlobalOrderSampler(source, order=GlobalOrder(seed=0, global_batch_size=BATCH))
    persistent = variant == "torch_global_persistent"
    loader = DataLoader(
        source,
        batch_size=BATCH,
        sampler=sampler,
        num_workers=WORKERS,
        persistent_workers=persistent,
    )
    epoch = [-1]

    def make_iter():
        epoch[0] += 1
        sampler.set_epoch(epoch[0])
        return iter(loader)

    first, rates = _epochs(make_iter, Checked("target", clips), epochs)
    return {"first": first, "rates": rates, "torch": torch.__version__}


def child_grain(variant: str, path: str, epochs: int, clips: int) -> dict:
    import grain

    sys.path.insert(0, ROOT)
    from replay import GlobalOrder, open_source
    from replay.samplers import GlobalOrderIndexSampler

    source = open_source(path, features=list(OURS_KEYS))
    order = GlobalOrder(seed=0, global_batch_size=BATCH)
    loader = grain.DataLoader(
        data_source=source,
        sampler=GlobalOrderIndexSampler(source, order=order, num_epochs=None),
        shard_options=grain.sharding.ShardOptions(shard_index=0, shard_count=1),
        worker_count=0 if variant == "grain_global_w0" else WORKERS,
    )
    run: list = []

    def make_iter():
        if not run:
            run.append(iter(loader))
        elements = itertools.islice(run[0], clips)
        return (_stack(list(itertools.islice(elements, BATCH))) for _ in range(clips // BATCH))

    first, rates = _epochs(make_iter, Checked("target", clips), epochs)
    run.clear()  # the workers stopped before the interpreter's exit
    return {"first": first, "rates": rates, "grain": getattr(grain, "__version__", "?")}


def child_hf(variant: str, path: str, epochs: int, clips: int) -> dict:
    import datasets

    ds = datasets.load_from_disk(path).select_columns(list(HF_KEYS))
    fmt = variant.rsplit("_", 1)[1]
    epoch = [0]

    def make_iter():
        epoch[0] += 1
        return ds.shuffle(seed=epoch[0]).with_format(fmt).iter(BATCH)

    first, rates = _epochs(make_iter, Checked("label", clips), epochs)
    return {"first": first, "rates": rates, "datasets": datasets.__version__}


def child_streaming(path: str, epochs: int, clips: int) -> dict:
    import streaming
    from streaming import StreamingDataset
    from torch.utils.data import DataLoader

    dataset = StreamingDataset(local=path, shuffle=True, shuffle_seed=0, batch_size=BATCH)
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=WORKERS)
    first, rates = _epochs(lambda: iter(loader), Checked("label", clips), epochs)
    return {"first": first, "rates": rates, "streaming": streaming.__version__}


def write_mds(hf_path: str, out: str) -> None:
    """HF's dataset of the clips as MDS shards at `out` (module docstring), in HF's row order."""
    import datasets
    from streaming import MDSWriter

    ds = datasets.load_from_disk(hf_path).select_columns(list(HF_KEYS)).with_format("arrow")
    columns = {"signal": "ndarray:int16:16000", "log_mel": "ndarray:float32:98,64", "label": "int"}
    with MDSWriter(out=out, columns=columns, size_limit="64mb") as writer:
        for table in ds.iter(1024):  # arrow, not numpy: datasets' numpy format imports torchvision
            signal = _flat(table.column("signal")).reshape(-1, 16000)
            log_mel = _flat(table.column("log_mel")).reshape(-1, 98, 64)
            for s, m, label in zip(signal, log_mel, table.column("label").to_pylist(), strict=True):
                writer.write({"signal": s, "log_mel": m, "label": int(label)})


def _flat(column) -> np.ndarray:
    """The values of a (nested) list column of an arrow table, flattened."""
    values = column.combine_chunks()
    while hasattr(values, "flatten"):
        values = values.flatten()
    return values.to_numpy()


def prepare_all(args: argparse.Namespace) -> dict[str, Path]:
    """replay_clips_bench's two datasets and the MDS copy (each made if missing)."""
    paths = prepare(args)
    paths["streaming"] = paths["hf"].parent / "mds"
    if not (paths["streaming"] / "index.json").exists():
        python = args.streaming_python
        cmd = module_cmd(python, "frameworks_bench", "--write_mds", str(paths["streaming"]))
        env = {**os.environ, **QUIET}
        subprocess.run([*cmd, "--path", str(paths["hf"])], check=True, cwd=ROOT, env=env)
    return paths


def measure(variant: str, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    hf = variant in HF_VARIANTS
    data = paths["streaming"] if variant == "streaming" else paths["hf" if hf else "ours"]
    python = args.streaming_python if variant == "streaming" else args.hf_python if hf else PY
    cmd = module_cmd(python, "frameworks_bench", "--child", variant, "--path", str(data))
    cmd += ["--epochs", str(args.epochs), "--clips", str(args.clips)]
    m = run_measured(cmd, env={**QUIET, **(HF_ENV if hf else {})})
    if m.returncode:
        raise SystemExit(f"{variant} failed ({m.returncode}):\n{m.stderr[-3000:]}")
    return {"variant": variant, "peak_pss": m.peak_pss_tree, **last_json(m.stdout)}


def report(rows: list[dict]) -> str:
    return warm_table(rows, VARIANTS, BASES)[0]


def main(argv: list[str] | None = None) -> None:
    parser = options.common(options.parser(__doc__), repeats=2, epochs=5)
    parser.add_argument("--clips", type=int, default=10240)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--hf_python", default=PY, help="with datasets, torch")
    parser.add_argument("--streaming_python", default=PY, help="with mosaicml-streaming")
    parser.add_argument("--rerecord", action="store_true", help="record both datasets again")
    parser.add_argument("--report", default=None, help="print the table of this JSON's rows")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--write_mds", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return
    if args.write_mds:
        write_mds(args.path, args.write_mds)
        return
    if args.child:
        if args.child == "ours_global_run":
            out = child_ours(args.path, args.epochs, args.clips)
        elif args.child.startswith("torch"):
            out = child_torch(args.child, args.path, args.epochs, args.clips)
        elif args.child.startswith("grain"):
            out = child_grain(args.child, args.path, args.epochs, args.clips)
        elif args.child == "streaming":
            out = child_streaming(args.path, args.epochs, args.clips)
        else:
            out = child_hf(args.child, args.path, args.epochs, args.clips)
        print(json.dumps(out))
        return
    variants = args.variants.split(",")
    if unknown := set(variants) - set(VARIANTS):
        raise SystemExit(f"unknown variants {sorted(unknown)}: choose from {', '.join(VARIANTS)}")
    paths = prepare_all(args)
    print(host_line(), flush=True)
    rows = []
    for repeat in range(args.repeats):
        for variant in variants:
            utc = time.strftime("%H:%M:%S", time.gmtime())
            rows.append({**measure(variant, paths, args), "repeat": repeat, "utc": utc})
            print(f"{variant}: {statistics.median(rows[-1]['rates']):,.0f} windows/s", flush=True)
    print(host_line())
    print(report(rows))
    if args.json:
        append_rows(args.json, rows)


if __name__ == "__main__":
    main()
