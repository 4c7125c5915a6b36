"""Issue 40's global order: blocks of k records read from byte offsets vs TFRecord in order.

    python benchmarks/random_access_bench.py [--records 20000] [--record_bytes 32768]
        [--shards 8] [--ks 1,8,16,64] [--window 1024] [--repeats 3]
    python benchmarks/random_access_bench.py --records 200000 --record_bytes 1024   # small records

Synthetic uncompressed shards (`--shards` files of tf.train.Examples: a `--record_bytes` random
bytes feature and the record's id; written once under `--dir`, each record's byte offset kept
as the writer's index would), page cache warm (every file read once first). One process, the
same files, windows (records) per second of each reader, consumed as the trainer would:
``.batch(64).prefetch(2)`` iterated from Python. Readers:

- ``ordered``: ``tf.data.TFRecordDataset(files)``, the shards one after another;
- ``ordered_par2``: the same with ``num_parallel_reads=2`` (deterministic interleave);
- ``k=K``: every shard cut in blocks of K consecutive records (a shard's last block shorter),
  the blocks in a random order (numpy, fixed seed), each read by ``TFRecordDatasetV2`` from its
  first record's byte offset (``.take(K)``, read buffer: the block's bytes, at most 4 MiB; CRCs
  checked as in any TFRecord read) in a ``flat_map``;
- ``k=K par2``: the same blocks through ``interleave(cycle_length=2, num_parallel_calls=2,
  deterministic=True)``, each block passed as one batch (then unbatched);
- ``global k=K`` (K the largest of `--ks`): the whole issue-40 order computed in the graph:
  the block order from ``tf.random.experimental.index_shuffle`` (seed, epoch), records
  permuted inside windows of `--window` records by index_shuffle (seed, epoch, window) and
  ``tf.gather`` of the serialized records, flat_map and par2.

The first (untimed) pass of each reader checks that it yields every record id once. Each repeat
runs the readers in a new order (reversed on odd repeats); printed per reader: the median and the
range of windows/s over the repeats and the median ratio to ``ordered`` (issue 40's target for
the global order: >= 0.9), and the same per CPU second of the process (all threads; steadier
than wall time when other jobs share the cores). `--json PATH` appends the rows to a file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _measure import append_rows, host_line  # noqa: E402

DEFAULT_DIR = os.environ.get("AUDIORECORDS_BENCH_DIR", "/tmp/audiorecords-bench")
READ_BUFFER = 256 * 1024  # TFRecordDataset's default buffer, as replay's reader uses
MAX_BUFFER = 4 << 20  # a block reader's buffer: the block's bytes, at most this
BATCH = 64
TARGET = 0.9  # issue 40: global order >= 0.9x the ordered reader's windows/s


def make_shards(root: str, records: int, record_bytes: int, shards: int):
    """Shard paths and, per shard, the byte offset of every record (+ the file size last)."""
    import tensorflow as tf

    base = os.path.join(root, f"random-access-{records}x{record_bytes}x{shards}")
    os.makedirs(base, exist_ok=True)
    rng = np.random.default_rng(0)
    paths, offsets = [], []
    per = -(-records // shards)
    for s in range(shards):
        path = os.path.join(base, f"shard-{s:05d}.tfrecord")
        ids = range(s * per, min(records, (s + 1) * per))
        serialized = [
            tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "x": tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[rng.bytes(record_bytes)])
                        ),
                        "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    }
                )
            ).SerializeToString()
            for i in ids
        ]
        # TFRecord framing: 8-byte length, 4-byte CRC of it, data, 4-byte CRC of the data.
        offs = np.concatenate([[0], np.cumsum([len(r) + 16 for r in serialized])]).astype(np.int64)
        if not (os.path.exists(path) and os.path.getsize(path) == offs[-1]):
            with tf.io.TFRecordWriter(path + ".tmp") as writer:
                for r in serialized:
                    writer.write(r)
            os.replace(path + ".tmp", path)
        paths.append(path)
        offsets.append(offs)
    return paths, offsets


def block_table(offsets: list[np.ndarray], k: int):
    """(shard, byte offset, count, bytes) of every block of k consecutive records of each shard."""
    shard, offset, count, size = [], [], [], []
    for s, offs in enumerate(offsets):
        n = len(offs) - 1
        for first in range(0, n, k):
            last = min(n, first + k)
            shard.append(s)
            offset.append(offs[first])
            count.append(last - first)
            size.append(offs[last] - offs[first])
    return tuple(np.array(a, np.int64) for a in (shard, offset, count, size))


def read_block(path, offset, count, size):
    """`count` records (`size` bytes) of the TFRecord file `path` from the record starting at
    byte `offset`. The read buffer is the block's bytes (at most MAX_BUFFER): TF's default
    256 KiB reads 16x a block of 16 1-KB records, and costs ~10% more CPU with 32-KB records.

    tf.data's TFRecordDataset takes no offset; the V2 op does, but its dataset cannot be
    serialised (TF 2.21 drops byte_offsets in AsGraphDef: "3 inputs specified of 4"), so it is
    made inside a flat_map / interleave function, never as a pipeline's top level.
    """
    import tensorflow as tf

    variant = tf.raw_ops.TFRecordDatasetV2(
        filenames=tf.reshape(path, [1]),
        compression_type="",
        buffer_size=tf.minimum(size, MAX_BUFFER),
        byte_offsets=tf.reshape(offset, [1]),
    )
    records = tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.string))
    return records.take(count)


def index_permutation(i, seed, n: int):
    """Position of `i` in a permutation of [0, n) from index_shuffle (seed: 2 words, only the low
    32 bits of each used). TF 2.21's index_shuffle is no permutation when max_index is 4^m,
    m >= 8 (its block size is ceil(log2(max_index)) bits): then one cycle-walking step on [0, n].
    """
    import tensorflow as tf

    m = n - 1
    if m >= 65_536 and m & (m - 1) == 0 and m.bit_length() % 2 == 1:
        y = tf.random.experimental.index_shuffle(i, seed, n)
        return tf.where(
            y == n, tf.random.experimental.index_shuffle(tf.constant(n, i.dtype), seed, n), y
        )
    return tf.random.experimental.index_shuffle(i, seed, m)


def readers(paths, offsets, ks, window, seed=(20, 26)):
    """name -> function making the dataset of serialized records."""
    import tensorflow as tf

    rng = np.random.default_rng(1)
    out = {
        "ordered": lambda: tf.data.TFRecordDataset(paths, buffer_size=READ_BUFFER),
        "ordered_par2": lambda: tf.data.TFRecordDataset(
            paths, buffer_size=READ_BUFFER, num_parallel_reads=2
        ),
    }
    path_t = tf.constant(paths)

    def par2(blocks):
        # Each block handed over as one [count] batch: per-record handoffs between the
        # interleave's threads cost ~2.5x the CPU of the reads with 1-KB records.
        return blocks.interleave(
            lambda *block: read_block(*block).batch(block[2]),
            cycle_length=2,
            num_parallel_calls=2,
            deterministic=True,
        ).unbatch()

    for k in ks:
        shard, offset, count, size = block_table(offsets, k)
        order = rng.permutation(len(shard))
        table = (np.array(paths)[shard[order]], offset[order], count[order], size[order])

        def blocks(table=table):
            return tf.data.Dataset.from_tensor_slices(table)

        out[f"k={k}"] = lambda blocks=blocks: blocks().flat_map(read_block)
        out[f"k={k} par2"] = lambda blocks=blocks: par2(blocks())
    # The global order (one epoch): block order and in-window order from index_shuffle.
    k = max(ks)
    shard, offset, count, size = (tf.constant(a) for a in block_table(offsets, k))
    num_blocks = int(shard.shape[0])
    seed_t = tf.constant(seed, tf.int64)
    epoch = tf.constant(0, tf.int64)

    def block_order():
        def lookup(i):
            b = index_permutation(i, tf.stack([seed_t[0], seed_t[1] * 65_536 + epoch]), num_blocks)
            return (
                tf.gather(path_t, tf.gather(shard, b)),
                tf.gather(offset, b),
                tf.gather(count, b),
                tf.gather(size, b),
            )

        return tf.data.Dataset.range(num_blocks).batch(1024).map(lookup).unbatch()

    def window_shuffle(records):
        def permute(w, batch):
            n = tf.shape(batch, out_type=tf.int64)[0]
            perm = tf.random.experimental.index_shuffle(
                tf.range(n), tf.stack([seed_t[0] + 1 + epoch, seed_t[1] * 1_000_003 + w]), n - 1
            )
            return tf.gather(batch, perm)

        return records.batch(window).enumerate().map(permute).unbatch()

    out[f"global k={k}"] = lambda: window_shuffle(block_order().flat_map(read_block))
    out[f"global k={k} par2"] = lambda: window_shuffle(par2(block_order()))
    return out


def check(name: str, make, records: int) -> None:
    import tensorflow as tf

    ids = (
        make()
        .batch(1024)
        .map(lambda b: tf.io.parse_example(b, {"id": tf.io.FixedLenFeature([], tf.int64)})["id"])
    )
    got = np.sort(np.concatenate(list(ids.as_numpy_iterator())))
    if not np.array_equal(got, np.arange(records)):
        raise SystemExit(f"{name}: the reader does not yield every record once")


def timed(make) -> tuple[float, float]:
    """Windows per wall second and per CPU second (the process's, all threads) of one pass of
    `make()`, batched by 64 and iterated from Python."""
    ds = make().batch(BATCH).prefetch(2)
    start, cpu = time.perf_counter(), time.process_time()
    n = 0
    for batch in ds:
        n += int(batch.shape[0])
    return n / (time.perf_counter() - start), n / (time.process_time() - cpu)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--record_bytes", type=int, default=32_768, help="bytes feature size")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--ks", default="1,8,16,64", help="block sizes (records)")
    parser.add_argument("--window", type=int, default=1024, help="global order's window")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=DEFAULT_DIR, help="cache dir for the shards")
    parser.add_argument("--json", default=None, help="append the rows to this JSON file")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]
    if args.repeats < 1 or min(ks) < 1 or args.shards < 1 or args.records < args.shards:
        parser.error("--repeats, --ks and --shards must be >= 1, --records >= --shards")

    import tensorflow as tf

    paths, offsets = make_shards(args.dir, args.records, args.record_bytes, args.shards)
    total = sum(int(o[-1]) for o in offsets)
    print(
        f"{args.records} records of {total / args.records / 1024:.1f} KB in {args.shards} "
        f"shards ({total / 2**20:.0f} MiB), TF {tf.__version__}",
        flush=True,
    )
    print(host_line(), flush=True)
    made = readers(paths, offsets, ks, args.window)
    for path in paths:  # page cache warm
        with open(path, "rb") as fh:
            while fh.read(1 << 24):
                pass
    for name, make in made.items():  # untimed: every record once (and the graphs traced)
        check(name, make, args.records)
    names = list(made)
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(args.repeats):
        for name in names if rep % 2 == 0 else names[::-1]:
            wall_rate, cpu_rate = timed(made[name])
            rates[name].append(wall_rate)
            cpu[name].append(cpu_rate)
        print(f"repeat {rep}: " + ", ".join(f"{n} {rates[n][-1]:.0f}" for n in names), flush=True)
    print(f"after the runs: {host_line()}")
    rows = []
    print(
        f"{'reader':18s} {'windows/s':>10s} {'range':>15s} {'/ ordered':>9s}"
        f" {'windows/CPU-s':>14s} {'/ ordered':>9s}"
    )
    for name in names:
        ratio = statistics.median(r / o for r, o in zip(rates[name], rates["ordered"], strict=True))
        cpu_ratio = statistics.median(r / o for r, o in zip(cpu[name], cpu["ordered"], strict=True))
        rows.append(
            {
                "bench": "random_access",
                "reader": name,
                "records": args.records,
                "record_bytes": args.record_bytes,
                "shards": args.shards,
                "windows_per_s": rates[name],
                "windows_per_cpu_s": cpu[name],
                "ratio_to_ordered": ratio,
                "cpu_ratio_to_ordered": cpu_ratio,
            }
        )
        lo, hi = min(rates[name]), max(rates[name])
        print(
            f"{name:18s} {statistics.median(rates[name]):10.0f} {lo:7.0f}-{hi:<7.0f} {ratio:9.2f}"
            f" {statistics.median(cpu[name]):14.0f} {cpu_ratio:9.2f}"
        )
    print(f"(issue 40's target for the global order: >= {TARGET}x ordered)")
    append_rows(args.json, rows)


if __name__ == "__main__":
    main()
