"""`replay_dataset`: an audiorecords directory -> a `tf.data.Dataset` of decoded elements.

Pipeline (all of it graph code: no Python runs per element)::

    shard files (manifest order; file-sharded by input_context; shuffled if shuffle_shards;
    of a sliced split, the runs of shards it holds: `replay.slicing`)
      -> map: one Dataset per shard file        (`replay.shards`: read, count check)

    default reader (no reader_func): per-shard datasets of *blocks* of `block_length` (64)
    serialized records
      -> each shard reads ahead 2 blocks in a thread of its own; interleave of whole blocks,
         round robin over cycle_length (16) shards  (explicit num_parallel_reads:
         default_reader_func, tf.data's parallel interleave)
      -> no shuffle_buffer: [repeat] -> rebatch(batch_size)    (one copy, exact batch sizes)
         shuffle_buffer:    unbatch -> shuffle -> [repeat] -> batch(batch_size)
      -> [by id: map, parallel: the batch's records read through the random-access layer]
      -> map: one tf.io.parse_example + decode_raw per batch, <feature>_norm computed
      -> assert_cardinality -> tf.data service -> prefetch

    reader_func: per-shard datasets of decoded elements (the `Dataset.load` contract)
      -> reader_func(datasets) -> assert_cardinality -> shuffle -> repeat -> batch -> ...

By id. Where the random-access layer reads (`replay.records`: uncompressed local shards with
record offsets, format version 4 on; not under the tf.data service, whose worker may run in
another process) and the records average `BY_ID_MIN_RECORD_BYTES` (6 KiB) or more, the
per-shard datasets are blocks of record *ids*, not records: the same blocks in the same order,
interleaved, shuffled and batched as the records would be, then each batch's records are read
in one call (its frames read and CRC-checked in C outside the GIL, several batches at once).
The elements are the same; a record that fails its checks fails the read naming its shard,
record and byte offset; a shuffle buffer holds ids, not records. Else (GZIP / ZLIB, a URL,
older formats, the service, small records) the blocks are read by TensorFlow's TFRecord
reader, each shard's record count checked against the manifest.

Order. The default reader takes `block_length` consecutive records (default 64) from a shard,
then a block of the next open shard, round robin over `cycle_length` shards, and rebatches to
`batch_size`. With a `shuffle_buffer` the default block is `shuffle_block_length(buffer)`:
min(64, buffer // 64), at least 1, so the buffer always holds records of >= 64 blocks (a shard
holds its windows in file order). Blocks, not records, go from the reading threads to the
consumer: fewer, larger hand-offs, with the same shuffle figures (docs/performance.md). With the
default `num_parallel_reads` each open shard reads ahead `READ_AHEAD_BLOCKS` blocks in a thread
of its own and a plain interleave takes them round robin: the order of tf.data's parallel interleave
with deterministic=True, which an explicit `num_parallel_reads` and the tf.data service use (in
distributed_epoch mode the read-ahead interleave gave every worker every shard); faster with a
shuffle buffer. With `deterministic` (the default with a `seed`) the order is a
function of the manifest, `block_length`, `cycle_length`, `shuffle_buffer` and `seed`. Each
shard's count check (`replay.shards`) runs once per block: a shard holding fewer or more records
than the manifest lists fails, naming the shard, before its extra records reach a later stage.

Autotune. The returned dataset's options turn tf.data's autotune off (AUTOTUNE parallelism then
means one per core; prefetch buffers grow on their own): its optimisation thread made deleting
an iterator slow in half the epochs measured (a new iterator per epoch, as `Model.fit` makes),
with no gain in throughput. An option of this dataset, not of the process:
``ds.with_options(opts)`` with ``opts.autotune.enabled = True`` turns it back on.

`verify_dataset` reads every shard up front and raises `CorruptShardError` naming the shard.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from replay import format as fmt
from replay import storage
from replay.errors import CorruptShardError
from replay.global_order import GlobalOrder, Slots
from replay.global_reader import (
    BatchRead,
    check_positions,
    pipeline_batches,
    pipeline_records,
    random_access,
    run_count,
)
from replay.info import DatasetInfo, load_info
from replay.parsing import batch_parser
from replay.read_config import PipelineShare, ReadConfig, pipeline_share
from replay.read_config import resolve as resolve_read_config
from replay.records import Records
from replay.shard_check import shard_reader
from replay.shards import PARSE_BATCH, reader_options, shard_datasets
from replay.slicing import ShardSpan, read_spans, span_shards

AUTOTUNE = tf.data.AUTOTUNE
_ShardingPolicy = tf.data.experimental.service.ShardingPolicy
# Shards read at once by the default reader (TFDS's default interleave_cycle_length). With one per
# core, the last shards of an epoch were read by fewer threads than cores (docs/performance.md).
CYCLE_LENGTH = 16
# With a shuffle_buffer the buffer holds records of at least this many blocks.
SHUFFLE_MIN_BLOCKS = 64
# Default reader, default num_parallel_reads: blocks each open shard reads ahead (its prefetch).
READ_AHEAD_BLOCKS = 2
# Records read by id (`_read_by_id`) only when the shards' records average this much: a batch's
# call costs about what TensorFlow's reader spends on records of ~5 KB (docs/performance.md).
BY_ID_MIN_RECORD_BYTES = 6 << 10  # 6 KiB

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


def replay_dataset(
    path: str | os.PathLike,
    *,
    read_config: ReadConfig | None = None,
    split: str | Sequence[str] | None = None,
    version: int | None = None,
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
    order: GlobalOrder | None = None,
) -> tf.data.Dataset:
    """A `tf.data.Dataset` of the decoded elements of an audiorecords dataset.

    Elements are dicts with exactly the keys, dtypes and shapes of ``manifest["elements"]`` (or
    the `features` subset); ``signal`` keeps its stored dtype bit for bit. Without `repeat` (and
    without `service`) the dataset's cardinality is known: the manifest's count for the chosen
    splits (this pipeline's share under `input_context`), batched by `batch_size`. Every shard
    of the chosen splits is stat'ed before returning (none is opened): a missing shard or one of
    the wrong size raises here; one corrupted in place fails while iterated, naming the shard.

    Args:
      path: the dataset directory: a local path or any tf.io.gfile URL (``gs://...``).
      read_config: how the shards are read, a `ReadConfig` (reader, order, parallelism, seed,
        sharding, tf.data service, prefetch); None: the one its fields, keywords here, give:
        `reader_func`, `seed`, `reshuffle_each_iteration`, `cycle_length`, `block_length`,
        `num_parallel_reads`, `deterministic`, `prefetch`, `input_context`, `service`,
        `processing_mode`, `job_name` (documented on `ReadConfig`). Not with any of them.
      split: a split name or a list of names; None: every split, in manifest order. Or a
        slice, as TFDS and Hugging Face spell it (`replay.slicing`): ``"train[:10%]"``,
        ``"train[1000:2000]"``, ``"train[-10%:]"``, ``"train[10%:20%]"``, ``"train[2shard]"``,
        ``"train[:50%]+test"`` (or a list of such spellings): the windows with those numbers
        in the split's recorded order (manifest shard order, file order; percents rounded to
        the closest window as TFDS's default), in every reader and order; the
        cardinality is the slice's count.
      version: the dataset version to read (`load_info`; each append adds one); None: the
        latest. The dataset read is the version's from the call on: versions committed while
        it is iterated are not read (shards are never rewritten).
      features: the keys to decode (a name or a list); None: all. Others are not parsed.
      shuffle_shards: shuffle the order of shard files (before `reader_func`).
      shuffle_buffer: element shuffle buffer size after reading (0: no shuffle).
      repeat: repeat forever.
      batch_size: batch elements (None: unbatched elements).
      drop_remainder: drop the last partial batch.
      balance: "class": class-balanced sampling, an infinite dataset (`replay.balance`);
        not with `repeat`, nor `reader_func` or `service`.
      order: a `GlobalOrder`: the global read order (`replay.global_order`): element P of the
        run fixed by the order's seed and P, the same global batches for any number of input
        pipelines, a run started at any P (`GlobalOrder.start`); without `repeat` the run ends
        with the epoch that holds `start`. Only with `split`, `features`, `repeat`,
        `batch_size`, `drop_remainder`, `input_context`, `prefetch`, and `service` with
        ``processing_mode="parallel_epochs"``, no `job_name` and one service worker (each
        element's position is checked: a second worker fails the read, naming this);
        needs format version 4.

    Raises:
      DatasetNotFoundError, IncompleteDatasetError, ManifestError: see `load_info`.
      UnknownSplitError, UnknownFeatureError: `split` / `features` not in the manifest;
        `replay.errors.SplitSliceError` (an UnknownSplitError): a bad slice (a step, a bound
        out of range, no window selected, ...), naming it.
      MissingShardError, ShardSizeError: a shard is missing or has the wrong size.
      ValueError: `read_config` with a read keyword other than its default; `order` with an
        option it does not take, or under a tf.data service mode or `job_name` it does not
        hold under.
      NoOffsetsError: `order` on a dataset written before format version 4.
    """
    config = resolve_read_config(
        read_config,
        reader_func=reader_func,
        seed=seed,
        reshuffle_each_iteration=reshuffle_each_iteration,
        cycle_length=cycle_length,
        block_length=block_length,
        num_parallel_reads=num_parallel_reads,
        deterministic=deterministic,
        prefetch=prefetch,
        input_context=input_context,
        service=service,
        processing_mode=processing_mode,
        job_name=job_name,
    )
    output = _Output(shuffle_shards, shuffle_buffer, repeat, batch_size, drop_remainder)
    if order is not None:
        _check_global(config, output, balance=balance)
        info = load_info(path, version=version)
        return _global(info, order, config, output, split=split, features=features)
    if balance is not None:
        return _balanced(
            path, config, output, balance=balance, split=split, version=version, features=features
        )
    info = load_info(path, version=version)
    specs = info.select_features(features)
    spans = read_spans(info, split)
    info.check_shard_files(span_shards(spans))
    share = pipeline_share(spans, config.input_context)
    deterministic = config.deterministic
    if deterministic is None:
        deterministic = config.seed is not None
    if config.reader_func is not None:  # the Dataset.load contract: per-shard datasets of elements
        ds = _reader_func_pipeline(info, share, specs, config, output)
    else:
        ds = _default_pipeline(info, share, specs, config, output, deterministic=deterministic)
    return _served_and_prefetched(ds, config, deterministic=deterministic)


@dataclasses.dataclass(frozen=True)
class _Output:
    """`replay_dataset`'s keywords on what follows the reading: shuffles, repeat, batching."""

    shuffle_shards: bool
    shuffle_buffer: int
    repeat: bool
    batch_size: int | None
    drop_remainder: bool


def _served_and_prefetched(
    ds: tf.data.Dataset, config: ReadConfig, *, deterministic: bool
) -> tf.data.Dataset:
    """The last stages: the tf.data service (with `config.service`), the options, prefetch."""
    if config.service is not None:
        ds = ds.apply(
            tf.data.experimental.service.distribute(
                processing_mode=config.processing_mode,
                service=config.service,
                job_name=config.job_name,
            )
        )
    ds = ds.with_options(reader_options(deterministic))
    return ds.prefetch(config.prefetch) if config.prefetch else ds


def _check_global(config: ReadConfig, output: _Output, *, balance: str | None) -> None:
    """Refuses the options the global order does not take, naming them."""
    refused = {
        "shuffle_shards": output.shuffle_shards,
        "shuffle_buffer": output.shuffle_buffer,
        "balance": balance is not None,
        "reader_func": config.reader_func is not None,
        "seed (the order has its own)": config.seed is not None,
        "block_length (GlobalOrder.block_length)": config.block_length is not None,
        "cycle_length": config.cycle_length is not None,
        "deterministic": config.deterministic is not None,
    }
    given = [name for name, value in refused.items() if value]
    if given:
        raise ValueError(f"replay_dataset: order=GlobalOrder(...) is not for {', '.join(given)}")
    if config.service is not None:
        _check_global_service(config)


# Why the global order does not hold under each tf.data service mode it refuses (with one
# service worker each holds it, and is then parallel_epochs).
_DYNAMIC = "with more than one service worker it hands the epochs to whichever asks first"
_STATIC = "with more than one service worker it splits this pipeline's elements among them"
_SERVICE_REFUSALS = {
    "distributed_epoch": _DYNAMIC,
    _ShardingPolicy.DYNAMIC: _DYNAMIC,
    _ShardingPolicy.FILE: _STATIC,
    _ShardingPolicy.DATA: _STATIC,
    _ShardingPolicy.FILE_OR_DATA: _STATIC,
    _ShardingPolicy.HINT: _STATIC,
}
_SERVICE_ONLY = (
    "the global order under the tf.data service holds only with "
    "processing_mode='parallel_epochs' (ShardingPolicy.OFF), one service worker and no job_name"
)


def _check_global_service(config: ReadConfig) -> None:
    """Refuses the tf.data service configurations the global order does not hold under
    (docs/training.md): the mode other than parallel_epochs, or a job_name."""
    mode = config.processing_mode
    if config.job_name is not None:
        why = "job_name: consumers of a named job take its elements first come, first served"
    elif (isinstance(mode, str) and mode == "parallel_epochs") or mode is _ShardingPolicy.OFF:
        return
    else:
        why = f"processing_mode={mode!r}: {_SERVICE_REFUSALS.get(mode, 'an unknown mode')}"
    raise ValueError(f"replay_dataset: {_SERVICE_ONLY}, not {why}")


def _global(
    info: DatasetInfo,
    order: GlobalOrder,
    config: ReadConfig,
    output: _Output,
    *,
    split: str | Sequence[str] | None,
    features: str | Sequence[str] | None,
) -> tf.data.Dataset:
    """``order=GlobalOrder(...)``: this pipeline's records in the global order
    (`replay.global_reader`), batched by `batch_size` and decoded once per batch. Under the
    tf.data service the batches are read and decoded by its worker, in a job of this pipeline's
    own, with their positions, which `check_positions` checks as they arrive."""
    specs = info.select_features(features)
    spans = read_spans(info, split)
    info.check_shard_files(span_shards(spans))
    context = config.input_context
    pipelines, pipeline = (
        (1, 0) if context is None else (context.num_input_pipelines, context.input_pipeline_id)
    )
    slots = Slots(order.global_batch_size or pipelines, pipelines, pipeline)
    served = config.service is not None
    batch_size = output.batch_size or PARSE_BATCH
    drop_remainder = bool(output.batch_size and output.drop_remainder)
    parse = batch_parser(specs, info.elements)
    total = run_count(spans, order, slots, repeat=output.repeat)
    if random_access(info, served=served):
        records = Records(info, spans)
        records.load_offsets()
        ds = pipeline_batches(
            records,
            order,
            slots=slots,
            repeat=output.repeat,
            batch_size=batch_size,
            drop_remainder=drop_remainder,
        )
        ds = ds.map(parse, num_parallel_calls=AUTOTUNE)
    else:
        ds = pipeline_records(
            info, spans, order, slots=slots, repeat=output.repeat, positions=served
        )
        ds = ds.rebatch(batch_size, drop_remainder=drop_remainder)
        if served:  # parsed by the service's worker; the positions checked here
            ds = ds.map(lambda records, at: (parse(records), at), num_parallel_calls=AUTOTUNE)
            ds = ds.with_options(reader_options(True)).apply(
                tf.data.experimental.service.distribute(
                    processing_mode=config.processing_mode, service=config.service
                )
            )
            ds = check_positions(ds, order, slots, message=f"replay_dataset: {_SERVICE_ONLY}")
        else:
            ds = ds.map(parse, num_parallel_calls=AUTOTUNE)
    if output.batch_size is None:
        ds = ds.unbatch()
    ds = _assert_count(ds, output, total=total)
    ds = ds.with_options(reader_options(True))
    return ds.prefetch(config.prefetch) if config.prefetch else ds


def _balanced(
    path: str | os.PathLike,
    config: ReadConfig,
    output: _Output,
    *,
    balance: str,
    split: str | Sequence[str] | None,
    version: int | None,
    features: str | Sequence[str] | None,
) -> tf.data.Dataset:
    """``balance="class"``: `replay.balance.balanced_dataset`."""
    from replay.balance import balanced_dataset

    if config.reader_func is not None or config.service is not None or output.repeat:
        raise ValueError("balance: not with reader_func, service or repeat (it repeats)")
    return balanced_dataset(
        path,
        balance=balance,
        split=split,
        version=version,
        features=features,
        seed=config.seed,
        shuffle_buffer=output.shuffle_buffer,
        deterministic=config.deterministic,
        batch_size=output.batch_size,
        drop_remainder=output.drop_remainder,
        prefetch=config.prefetch,
        input_context=config.input_context,
    )


def _share_datasets(
    info: DatasetInfo,
    share: PipelineShare,
    specs: Mapping[str, fmt.ElementSpec],
    config: ReadConfig,
    output: _Output,
    *,
    block: int | None = None,
    by_id: bool = False,
) -> tf.data.Dataset:
    """`shard_datasets` of this reader's share of the shards, in its shard order (`block`:
    records per element, None: one record; `by_id`: blocks of record ids)."""
    return shard_datasets(
        info,
        share.spans,
        specs,
        element_shard=share.element_shard,
        shuffle=output.shuffle_shards,
        seed=config.seed,
        reshuffle_each_iteration=config.reshuffle_each_iteration,
        block=block,
        by_id=by_id,
    )


def _read_by_id(
    info: DatasetInfo, spans: Sequence[ShardSpan], config: ReadConfig
) -> BatchRead | None:
    """How the default reader reads batches of record ids through the random-access layer
    (`replay.records`: a batch one call, its frames read and checked outside the GIL), where
    the layer reads: local uncompressed shards with record offsets (format version 4), not
    under the tf.data service (whose worker may run in another process), of records of
    `BY_ID_MIN_RECORD_BYTES` or more on average. None: by TensorFlow's TFRecord reader. A
    shard's offsets are read at its first block."""
    if config.service is not None or info.compression_type:
        return None
    shards = span_shards(spans)
    if not shards or any(s.offsets_path is None or storage.is_url(s.path) for s in shards):
        return None
    records = sum(s.num_examples for s in shards)
    if not records or sum(s.num_bytes for s in shards) < BY_ID_MIN_RECORD_BYTES * records:
        return None
    return BatchRead(Records(info, spans))


def _reader_func_pipeline(
    info: DatasetInfo,
    share: PipelineShare,
    specs: Mapping[str, fmt.ElementSpec],
    config: ReadConfig,
    output: _Output,
) -> tf.data.Dataset:
    """`config.reader_func` over per-shard datasets of decoded elements, then the cardinality
    check (not under the tf.data service), shuffle, repeat, batch."""
    datasets = _share_datasets(info, share, specs, config, output)
    ds = config.reader_func(datasets)
    _check_reader_output(ds, datasets.element_spec.element_spec)
    if config.service is None:  # with the service each worker reads a part: no total to assert
        ds = ds.apply(tf.data.experimental.assert_cardinality(share.total))
    if output.shuffle_buffer:
        ds = ds.shuffle(
            output.shuffle_buffer,
            seed=config.seed,
            reshuffle_each_iteration=config.reshuffle_each_iteration,
        )
    if output.repeat:
        ds = ds.repeat()
    if output.batch_size is not None:
        ds = ds.batch(output.batch_size, drop_remainder=output.drop_remainder)
    return ds


def _default_pipeline(
    info: DatasetInfo,
    share: PipelineShare,
    specs: Mapping[str, fmt.ElementSpec],
    config: ReadConfig,
    output: _Output,
    *,
    deterministic: bool,
) -> tf.data.Dataset:
    """The default reader: blocks of serialized records, interleaved, decoded once per batch.

    Each shard yields blocks of `block_length` records (its last block shorter), the count check
    runs once per block, and `default_reader_func` interleaves whole blocks, so no per-record
    element crosses the parallel interleave (measured: that hand-off cost more CPU than the
    read). Then: without `shuffle_buffer`, ``rebatch(batch_size)`` (one copy) and one
    ``parse_example`` per output batch; with it, unbatch -> shuffle the serialized records ->
    batch -> parse. The share's total is asserted as the cardinality, but under the tf.data
    service (unknown there).
    """
    shuffle_buffer = output.shuffle_buffer
    block_length = config.block_length or (
        shuffle_block_length(shuffle_buffer) if shuffle_buffer else PARSE_BATCH
    )
    read = _read_by_id(info, share.spans, config)
    by_id = read is not None
    datasets = _share_datasets(info, share, specs, config, output, block=block_length, by_id=by_id)
    ds = _interleave_blocks(datasets, config, deterministic=deterministic)
    parse = batch_parser(specs, info.elements)
    total = None if config.service is not None else share.total
    ds = _shuffle_and_batch(ds, config, output, total=total)
    if read is not None:  # batches of record ids, each read in one call and parsed, several
        # at once; in order unless deterministic=False is asked for (reads vary in time more
        # than parses: a map free to reorder would, where TensorFlow's reader keeps the order)
        ds = ds.map(
            lambda ids: parse(read(ids)),
            num_parallel_calls=AUTOTUNE,
            deterministic=config.deterministic is not False,
        )
    else:
        ds = ds.map(parse, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    if output.batch_size is None:
        ds = ds.unbatch()
    return _assert_count(ds, output, total=total)


def _interleave_blocks(
    datasets: tf.data.Dataset, config: ReadConfig, *, deterministic: bool
) -> tf.data.Dataset:
    """The default reader's interleave of the per-shard datasets of blocks."""
    if config.num_parallel_reads == AUTOTUNE and config.service is None:
        # Each open shard reads ahead in a thread of its own (its prefetch); the interleave only
        # takes its blocks round robin: the order of the parallel interleave with
        # deterministic=True, faster when shuffling (module docstring). Not
        # under the tf.data service: its distributed_epoch mode handed every worker every
        # shard through this interleave (each element twice with 2 workers).
        return datasets.interleave(
            lambda shard: shard.prefetch(READ_AHEAD_BLOCKS),
            cycle_length=config.cycle_length or CYCLE_LENGTH,
        )
    return default_reader_func(
        datasets,
        cycle_length=config.cycle_length,
        num_parallel_calls=config.num_parallel_reads,
        deterministic=deterministic,
    )


def _shuffle_and_batch(
    ds: tf.data.Dataset, config: ReadConfig, output: _Output, *, total: int | None
) -> tf.data.Dataset:
    """Blocks of serialized records -> batches to parse: without a shuffle buffer rebatched to
    `batch_size` (blocks as they are without one); with it unbatched, shuffled and batched
    (by `PARSE_BATCH` without a `batch_size`). Repeated in between with `repeat`."""
    if not output.shuffle_buffer:
        if output.repeat:
            ds = ds.repeat()
        if output.batch_size is not None:
            ds = ds.rebatch(output.batch_size, drop_remainder=output.drop_remainder)
        return ds
    ds = ds.unbatch()
    if total is not None:
        ds = ds.apply(tf.data.experimental.assert_cardinality(total))
    ds = ds.shuffle(
        output.shuffle_buffer,
        seed=config.seed,
        reshuffle_each_iteration=config.reshuffle_each_iteration,
    )
    if output.repeat:
        ds = ds.repeat()
    batch_size, drop_remainder = output.batch_size, output.drop_remainder
    return ds.batch(batch_size or PARSE_BATCH, drop_remainder=bool(batch_size and drop_remainder))


def _assert_count(ds: tf.data.Dataset, output: _Output, *, total: int | None) -> tf.data.Dataset:
    """`ds` with its cardinality: `total` elements, in batches of `batch_size`; infinite with
    `repeat` (when there is a record to repeat); unknown when `total` is."""
    if total is None:
        return ds
    if output.repeat:
        if not total:
            return ds
        return ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    count, batch_size = total, output.batch_size
    if batch_size is not None:
        count = total // batch_size if output.drop_remainder else -(-total // batch_size)
    return ds.apply(tf.data.experimental.assert_cardinality(count))


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
        holds a bad entry (`DatasetInfo.check_tables`); an earlier version's stored manifest is
        missing or disagrees with the latest (`DatasetInfo.check_versions`).
      Any error of `load_info` / `DatasetInfo.check_shards`.
    """
    info = load_info(path)
    info.check_tables()
    info.check_versions()
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
