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

Here: `replay_dataset` (its options resolved by `replay.read_config`, then one of the pipelines),
the `reader_func` pipeline, the tf.data service and prefetch stages, `verify_dataset`. The
default reader is `replay.default_reader`; ``order=GlobalOrder(...)`` is `replay.global_dataset`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from replay import format as fmt
from replay.default_reader import (
    default_pipeline,
    default_reader_func,  # noqa: F401  re-exported: replay.default_reader_func
    share_datasets,
    shuffle_elements,
)
from replay.errors import CorruptShardError
from replay.global_dataset import check_global, global_dataset
from replay.global_order import GlobalOrder
from replay.info import DatasetInfo, load_info
from replay.read_config import PipelineShare, ReadConfig, ReadOutput, pipeline_share
from replay.read_config import resolve as resolve_read_config
from replay.shard_check import shard_reader
from replay.shards import reader_options
from replay.slicing import read_spans, span_shards

AUTOTUNE = tf.data.AUTOTUNE

ReaderFunc = Callable[[tf.data.Dataset], tf.data.Dataset]


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
    output = ReadOutput(shuffle_shards, shuffle_buffer, repeat, batch_size, drop_remainder)
    if order is not None:
        check_global(config, output, balance=balance)
        info = load_info(path, version=version)
        return global_dataset(info, order, config, output, split=split, features=features)
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
        ds = default_pipeline(info, share, specs, config, output, deterministic=deterministic)
    return _served_and_prefetched(ds, config, deterministic=deterministic)


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


def _balanced(
    path: str | os.PathLike,
    config: ReadConfig,
    output: ReadOutput,
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


def _reader_func_pipeline(
    info: DatasetInfo,
    share: PipelineShare,
    specs: Mapping[str, fmt.ElementSpec],
    config: ReadConfig,
    output: ReadOutput,
) -> tf.data.Dataset:
    """`config.reader_func` over per-shard datasets of decoded elements, then the cardinality
    check (not under the tf.data service), shuffle, repeat, batch."""
    datasets = share_datasets(info, share, specs, config, output)
    ds = config.reader_func(datasets)
    _check_reader_output(ds, datasets.element_spec.element_spec)
    if config.service is None:  # with the service each worker reads a part: no total to assert
        ds = ds.apply(tf.data.experimental.assert_cardinality(share.total))
    if output.shuffle_buffer:
        ds = shuffle_elements(ds, output.shuffle_buffer, config)
    if output.repeat:
        ds = ds.repeat()
    if output.batch_size is not None:
        ds = ds.batch(output.batch_size, drop_remainder=output.drop_remainder)
    return ds


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
