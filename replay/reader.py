"""`replay_dataset`: an audiorecords directory -> a `tf.data.Dataset` of decoded elements.

Pipeline (all of it graph code: no Python runs per element)::

    shard files (manifest order; file-sharded by input_context; shuffled if shuffle_shards)
      -> map: one Dataset per shard file        (`replay.shards`: read, count check)

    default reader (no reader_func): per-shard datasets of *blocks* of `block_length` (64)
    serialized records
      -> each shard reads ahead 2 blocks in a thread of its own; interleave of whole blocks,
         round robin over cycle_length (16) shards  (explicit num_parallel_reads:
         default_reader_func, tf.data's parallel interleave)
      -> no shuffle_buffer: [repeat] -> rebatch(batch_size)    (one copy, exact batch sizes)
         shuffle_buffer:    unbatch -> shuffle -> [repeat] -> batch(batch_size)
      -> map: one tf.io.parse_example + decode_raw per batch, <feature>_norm computed
      -> assert_cardinality -> tf.data service -> prefetch

    reader_func: per-shard datasets of decoded elements (the `Dataset.load` contract)
      -> reader_func(datasets) -> assert_cardinality -> shuffle -> repeat -> batch -> ...

Order. The default reader takes `block_length` consecutive records (default 64) from a shard,
then a block of the next open shard, round robin over `cycle_length` shards, and rebatches to
`batch_size`. With a `shuffle_buffer` the default block is `shuffle_block_length(buffer)`:
min(64, buffer // 64), at least 1, so the buffer always holds records of >= 64 blocks (a shard
holds its windows in file order). Blocks, not records, go from the reading threads to the
consumer: at 10,240 clips and a 10,000 buffer, blocks of 64 read 1.9x the windows/s of blocks of
one, with the same shuffle figures (benchmarks/RESULTS.md, "Issue 28"). With the default
`num_parallel_reads` each open shard reads ahead `READ_AHEAD_BLOCKS` blocks in a thread of its
own and a plain interleave takes them round robin: the order of tf.data's parallel interleave
with deterministic=True, which an explicit `num_parallel_reads` and the tf.data service use (in
distributed_epoch mode the read-ahead interleave gave every worker every shard); 1.2x the
windows/s with a shuffle buffer. With `deterministic` (the default with a `seed`) the order is a
function of the manifest, `block_length`, `cycle_length`, `shuffle_buffer` and `seed`. Each
shard's count check (`replay.shards`) runs once per block: a shard holding fewer or more records
than the manifest lists fails, naming the shard, before its extra records reach a later stage.

Autotune. The returned dataset's options turn tf.data's autotune off (AUTOTUNE parallelism then
means one per core; prefetch buffers grow on their own): its optimisation thread made deleting
an iterator take 0.25-0.3 s in half the epochs measured (a new iterator per epoch, as
`Model.fit` makes), with no gain in throughput. An option of this dataset, not of the process:
``ds.with_options(opts)`` with ``opts.autotune.enabled = True`` turns it back on.

`verify_dataset` reads every shard up front and raises `CorruptShardError` naming the shard.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from replay import format as fmt
from replay.errors import CorruptShardError
from replay.info import DatasetInfo, ShardInfo, load_info
from replay.parsing import batch_parser
from replay.shard_check import shard_reader
from replay.shards import PARSE_BATCH, shard_datasets

AUTOTUNE = tf.data.AUTOTUNE
# Shards read at once by the default reader (TFDS's default interleave_cycle_length). With one per
# core, the last shards of an epoch were read by fewer threads than cores: on 2 cores and 3
# shards, 16 gave 1.18x the windows/s of 2 (benchmarks/RESULTS.md).
CYCLE_LENGTH = 16
# With a shuffle_buffer the buffer holds records of at least this many blocks.
SHUFFLE_MIN_BLOCKS = 64
# Default reader, default num_parallel_reads: blocks each open shard reads ahead (its prefetch).
READ_AHEAD_BLOCKS = 2

ReaderFunc = Callable[[tf.data.Dataset], tf.data.Dataset]


def default_reader_func(
    datasets: tf.data.Dataset,
    *,
    cycle_length: int | None = None,
    block_length: int = 1,
    num_parallel_calls: int | None = AUTOTUNE,
    deterministic: bool | None = None,
) -> tf.data.Dataset:
    """Interleave the per-shard datasets in parallel, without shuffling.

    `replay_dataset`'s default reader calls it on per-shard datasets of blocks of records (one
    block at a time from each shard); as a `reader_func` it interleaves decoded elements.

    Args:
      datasets: a Dataset of per-shard Datasets (the `reader_func` argument).
      cycle_length: shards read at once (default `CYCLE_LENGTH`, 16).
      block_length: consecutive elements taken from one shard before moving on.
      num_parallel_calls: interleave parallelism (AUTOTUNE by default).
      deterministic: whether the output order is deterministic (None: tf.data's option).

    Returns:
      A Dataset of elements.
    """
    return datasets.interleave(
        lambda shard: shard,
        cycle_length=cycle_length or CYCLE_LENGTH,
        block_length=block_length,
        num_parallel_calls=num_parallel_calls,
        deterministic=deterministic,
    )


def shuffle_block_length(shuffle_buffer: int) -> int:
    """The default block_length with a `shuffle_buffer`: ``PARSE_BATCH`` (64) records at most,
    and at most ``shuffle_buffer // SHUFFLE_MIN_BLOCKS``, at least 1 (module docstring)."""
    return max(1, min(PARSE_BATCH, shuffle_buffer // SHUFFLE_MIN_BLOCKS))


def reader_options(deterministic: bool) -> tf.data.Options:
    """The options every dataset `replay` returns carries: `deterministic`, autotune off
    (module docstring, "Autotune")."""
    options = tf.data.Options()
    options.deterministic = deterministic
    options.autotune.enabled = False
    return options


def replay_dataset(
    path: str | os.PathLike,
    *,
    split: str | Sequence[str] | None = None,
    features: str | Sequence[str] | None = None,
    reader_func: ReaderFunc | None = None,
    shuffle_shards: bool = False,
    seed: int | None = None,
    reshuffle_each_iteration: bool = True,
    cycle_length: int | None = None,
    block_length: int | None = None,
    num_parallel_reads: int | None = AUTOTUNE,
    shuffle_buffer: int = 0,
    repeat: bool = False,
    input_context: tf.distribute.InputContext | None = None,
    service: str | None = None,
    processing_mode: Any = "distributed_epoch",
    job_name: str | None = None,
    deterministic: bool | None = None,
    batch_size: int | None = None,
    drop_remainder: bool = False,
    prefetch: int | None = AUTOTUNE,
    balance: str | None = None,
) -> tf.data.Dataset:
    """A `tf.data.Dataset` of the decoded elements of an audiorecords dataset.

    Elements are dicts with exactly the keys, dtypes and shapes of ``manifest["elements"]`` (or
    the `features` subset); ``signal`` keeps its stored dtype bit for bit. Without `repeat` (and
    without `service`) the dataset's cardinality is known: the manifest's count for the chosen
    splits (this pipeline's share under `input_context`), batched by `batch_size`.

    Before returning, every shard of the chosen splits is stat'ed (no shard is opened): a missing
    shard or one whose size differs from the manifest raises here. A shard corrupted in place
    fails during iteration with a message naming the shard (see the module docstring).

    Example: a custom `reader_func` that shuffles shards, then interleaves them, as in the
    `tf.data.experimental.snapshot` docs::

        def reader_func(datasets):
            datasets = datasets.shuffle(1000)  # the per-shard datasets, one per shard file
            return datasets.interleave(lambda shard: shard, cycle_length=4,
                                       num_parallel_calls=tf.data.AUTOTUNE)

        ds = replay_dataset("gs://bucket/out", split="train", reader_func=reader_func)

    Args:
      path: the dataset directory: a local path or any tf.io.gfile URL (``gs://...``).
      split: a split name or a list of names; None: every split, in manifest order.
      features: the keys to decode (a name or a list); None: all. Others are not parsed.
      reader_func: receives a Dataset whose elements are Datasets, one per shard file, each of
        that shard's decoded elements in file order, as `tf.data.Dataset.load`'s and
        `snapshot`'s reader_func receive them (under `input_context` element sharding: only this
        pipeline's records). It is called once and must return a Dataset of elements holding
        every element exactly once, in any order. Default: the default reader (module
        docstring): `default_reader_func` over blocks of `block_length` serialized records
        per shard, with `cycle_length` and `num_parallel_reads`, decoded once per batch.
      shuffle_shards: shuffle the order of shard files (before `reader_func`).
      seed: seed of the shard and `shuffle_buffer` shuffles; with a seed the order is the same
        from run to run (and `deterministic` defaults to True).
      reshuffle_each_iteration: a new shuffle order each epoch.
      cycle_length: default reader: shards read at once (default 16).
      block_length: default reader: consecutive elements from one shard (default 64,
        `PARSE_BATCH`: shards are interleaved block by block, see the module docstring; with a
        `shuffle_buffer`, `shuffle_block_length`: 64 for a buffer of 4,096 or more, fewer for
        a smaller one, so that the buffer holds windows of many blocks, not runs of one).
      num_parallel_reads: default reader: AUTOTUNE (the default): every open shard reads ahead
        `READ_AHEAD_BLOCKS` blocks in a thread of its own, blocks taken round robin (with
        `service`: tf.data's parallel interleave); a number: tf.data's parallel interleave with
        that parallelism (`default_reader_func`).
      shuffle_buffer: element shuffle buffer size after reading (0: no shuffle).
      repeat: repeat forever.
      input_context: a `tf.distribute.InputContext`: this input pipeline reads shard files
        ``input_pipeline_id::num_input_pipelines``; with fewer shard files than pipelines it
        reads every shard but keeps records ``input_pipeline_id::num_input_pipelines`` of each
        (decoding only those). File shares hold whole shards, so their sizes may differ.
      service: a tf.data service dispatcher address (``grpc://host:port``): the dataset is
        produced by the service's workers.
      processing_mode: tf.data service processing mode: "distributed_epoch" (each element
        once across workers) or "parallel_epochs" (each worker a full epoch).
      job_name: tf.data service job name (consumers with one name share one job).
      deterministic: deterministic element order; None: True with a `seed`, else False (faster).
      batch_size: batch elements (None: unbatched elements).
      drop_remainder: drop the last partial batch.
      prefetch: prefetch buffer (AUTOTUNE; None or 0: no prefetch).
      balance: "class": class-balanced sampling, an infinite dataset (`replay.balance`: each
        draw a uniformly chosen class, then an element with that class or label); only with
        `split`, `features`, `seed`, `shuffle_buffer`, `deterministic`, `batch_size`,
        `drop_remainder`, `prefetch`, `input_context`.

    Returns:
      The dataset.

    Raises:
      DatasetNotFoundError, IncompleteDatasetError, ManifestError: see `load_info`.
      UnknownSplitError, UnknownFeatureError: `split` / `features` not in the manifest.
      MissingShardError, ShardSizeError: a shard is missing or has the wrong size.
    """
    if balance is not None:
        from replay.balance import balanced_dataset

        if reader_func is not None or service is not None or repeat:
            raise ValueError("balance: not with reader_func, service or repeat (it repeats)")
        return balanced_dataset(
            path,
            balance=balance,
            split=split,
            features=features,
            seed=seed,
            shuffle_buffer=shuffle_buffer,
            deterministic=deterministic,
            batch_size=batch_size,
            drop_remainder=drop_remainder,
            prefetch=prefetch,
            input_context=input_context,
        )
    info = load_info(path)
    specs = info.select_features(features)
    shards = info.shard_list(split)
    info.check_shards(split)
    if deterministic is None:
        deterministic = seed is not None

    num_pipelines, pipeline_id = 1, 0
    if input_context is not None:
        num_pipelines = input_context.num_input_pipelines
        pipeline_id = input_context.input_pipeline_id
    element_sharding = num_pipelines > 1 and len(shards) < num_pipelines
    if num_pipelines > 1 and not element_sharding:
        shards = shards[pipeline_id::num_pipelines]
    shares = [
        _share(s.num_examples, num_pipelines, pipeline_id) if element_sharding else s.num_examples
        for s in shards
    ]

    total = sum(shares)
    if reader_func is not None:  # the Dataset.load contract: per-shard datasets of elements
        datasets = shard_datasets(
            info,
            shards,
            specs,
            element_shard=(num_pipelines, pipeline_id) if element_sharding else (1, 0),
            shuffle=shuffle_shards,
            seed=seed,
            reshuffle_each_iteration=reshuffle_each_iteration,
        )
        ds = reader_func(datasets)
        _check_reader_output(ds, datasets.element_spec.element_spec)
        if service is None:  # with the service each worker reads a part: no total to assert
            ds = ds.apply(tf.data.experimental.assert_cardinality(total))
        if shuffle_buffer:
            ds = ds.shuffle(
                shuffle_buffer, seed=seed, reshuffle_each_iteration=reshuffle_each_iteration
            )
        if repeat:
            ds = ds.repeat()
        if batch_size is not None:
            ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    else:
        ds = _default_pipeline(
            info,
            shards,
            specs,
            element_shard=(num_pipelines, pipeline_id) if element_sharding else (1, 0),
            shares=None if service is not None else shares,
            shuffle_shards=shuffle_shards,
            seed=seed,
            reshuffle_each_iteration=reshuffle_each_iteration,
            cycle_length=cycle_length,
            block_length=block_length
            or (shuffle_block_length(shuffle_buffer) if shuffle_buffer else PARSE_BATCH),
            num_parallel_reads=num_parallel_reads,
            shuffle_buffer=shuffle_buffer,
            repeat=repeat,
            deterministic=deterministic,
            batch_size=batch_size,
            drop_remainder=drop_remainder,
        )
    if service is not None:
        ds = ds.apply(
            tf.data.experimental.service.distribute(
                processing_mode=processing_mode, service=service, job_name=job_name
            )
        )
    ds = ds.with_options(reader_options(deterministic))
    if prefetch:
        ds = ds.prefetch(prefetch)
    return ds


def _default_pipeline(
    info: DatasetInfo,
    shards: Sequence[ShardInfo],
    specs: Mapping[str, fmt.ElementSpec],
    *,
    element_shard: tuple[int, int],
    shares: Sequence[int] | None,
    shuffle_shards: bool,
    seed: int | None,
    reshuffle_each_iteration: bool,
    cycle_length: int | None,
    block_length: int,
    num_parallel_reads: int | None,
    shuffle_buffer: int,
    repeat: bool,
    deterministic: bool,
    batch_size: int | None,
    drop_remainder: bool,
) -> tf.data.Dataset:
    """The default reader: blocks of serialized records, interleaved, decoded once per batch.

    Each shard yields blocks of `block_length` records (its last block shorter), the count check
    runs once per block, and `default_reader_func` interleaves whole blocks, so no per-record
    element crosses the parallel interleave (measured: that hand-off cost more CPU than the
    read). Then: without `shuffle_buffer`, ``rebatch(batch_size)`` (one copy) and one
    ``parse_example`` per output batch; with it, unbatch -> shuffle the serialized records ->
    batch -> parse. `shares`: the element count of each shard, asserted as the cardinality
    (None: unknown, with the tf.data service).
    """
    datasets = shard_datasets(
        info,
        shards,
        specs,
        element_shard=element_shard,
        shuffle=shuffle_shards,
        seed=seed,
        reshuffle_each_iteration=reshuffle_each_iteration,
        block=block_length,
    )
    if num_parallel_reads == AUTOTUNE and shares is not None:
        # Each open shard reads ahead in a thread of its own (its prefetch); the interleave only
        # takes its blocks round robin: the order of the parallel interleave with
        # deterministic=True, at 1.2x its windows/s when shuffling (module docstring). Not
        # under the tf.data service (`shares` None): its distributed_epoch mode handed every
        # worker every shard through this interleave (each element twice with 2 workers).
        ds = datasets.interleave(
            lambda shard: shard.prefetch(READ_AHEAD_BLOCKS),
            cycle_length=cycle_length or CYCLE_LENGTH,
        )
    else:
        ds = default_reader_func(
            datasets,
            cycle_length=cycle_length,
            num_parallel_calls=num_parallel_reads,
            deterministic=deterministic,
        )
    parse = batch_parser(specs, info.elements)
    total = None if shares is None else sum(shares)
    if shuffle_buffer:
        ds = ds.unbatch()
        if total is not None:
            ds = ds.apply(tf.data.experimental.assert_cardinality(total))
        ds = ds.shuffle(
            shuffle_buffer, seed=seed, reshuffle_each_iteration=reshuffle_each_iteration
        )
        if repeat:
            ds = ds.repeat()
        ds = ds.batch(batch_size or PARSE_BATCH, drop_remainder=bool(batch_size and drop_remainder))
    else:
        if repeat:
            ds = ds.repeat()
        if batch_size is not None:
            ds = ds.rebatch(batch_size, drop_remainder=drop_remainder)
    ds = ds.map(parse, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    if batch_size is None:
        ds = ds.unbatch()
        count = total
    elif total is not None:
        count = total // batch_size if drop_remainder else -(-total // batch_size)
    if total is not None and not repeat:
        ds = ds.apply(tf.data.experimental.assert_cardinality(count))
    elif total and repeat:  # records to repeat: it never ends
        ds = ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    return ds


def _share(num_records: int, num_pipelines: int, pipeline_id: int) -> int:
    """Records ``pipeline_id::num_pipelines`` of a shard of `num_records`."""
    return len(range(pipeline_id, num_records, num_pipelines))


def _check_reader_output(ds: Any, expected: Any) -> None:
    if not isinstance(ds, tf.data.Dataset):
        raise TypeError(f"reader_func must return a tf.data.Dataset, not {type(ds).__name__}")
    if ds.element_spec != expected:
        raise TypeError(
            "reader_func must return a Dataset of the shard datasets' elements: expected "
            f"element_spec {expected}, got {ds.element_spec}"
        )


def verify_dataset(
    path: str | os.PathLike, *, split: str | Sequence[str] | None = None
) -> DatasetInfo:
    """Read every shard of `split` once and check its records against the manifest.

    Runs each shard's CRC checks, decompression and decoding with the manifest's element specs
    in TensorFlow (no per-record Python; `replay.shard_check`, the checker ``python -m
    pipelines.verify`` uses too) and compares the record count with the manifest. Costs a full
    read; `replay_dataset` does the same checks lazily while iterating.

    Args:
      path: the dataset directory.
      split: a split name or list of names; None: all splits.

    Returns:
      The dataset's info.

    Raises:
      CorruptShardError: a shard fails to read or holds a different record count (names it).
      ManifestError: a source table (files.jsonl, errors.jsonl) disagrees with the manifest or
        holds a bad entry (`DatasetInfo.check_tables`).
      Any error of `load_info` / `DatasetInfo.check_shards`.
    """
    info = load_info(path)
    info.check_tables()
    info.check_shards(split)
    read = shard_reader(info)
    for shard in info.shard_list(split):
        count, error = read(shard)
        if error:
            raise CorruptShardError(f"{shard.path}: corrupt shard: {error}")
        if count != shard.num_examples:
            raise CorruptShardError(
                f"{shard.path}: shard holds {count} records but the manifest says "
                f"{shard.num_examples}"
            )
    return info
