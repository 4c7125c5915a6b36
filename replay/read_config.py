"""`ReadConfig`: how `replay_dataset` reads the shards, one frozen value (as TFDS's ReadConfig).

`replay_dataset`'s keywords say what the dataset holds (`split`, `features`, `shuffle_shards`,
`shuffle_buffer`, `repeat`, `batch_size`, `drop_remainder`, `balance`); a `ReadConfig` says how
it is read: the reader, its order and parallelism, the seed, input sharding, the tf.data
service, prefetch. Its fields are also `replay_dataset` keywords of the same names and defaults
(``replay_dataset(path, seed=0)`` is ``replay_dataset(path, read_config=ReadConfig(seed=0))``);
a `read_config` and a read keyword set to other than its default are refused (`resolve`).
`ReadOutput`: those keywords on what follows the reading. `pipeline_share`: the shard spans
and records one input pipeline reads under `input_context`.

No TensorFlow here: ``from replay import ReadConfig`` stays as cheap as ``import replay``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tensorflow as tf

    from replay.slicing import ShardSpan

AUTOTUNE = -1  # tf.data.AUTOTUNE, without importing TensorFlow (tested equal)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadConfig:
    """How `replay_dataset` reads: reader, order, parallelism, sharding, service, prefetch.

    Example: a custom `reader_func` that shuffles shards, then interleaves them, as in the
    `tf.data.experimental.snapshot` docs::

        def reader_func(datasets):
            datasets = datasets.shuffle(1000)  # the per-shard datasets, one per shard file
            return datasets.interleave(lambda shard: shard, cycle_length=4,
                                       num_parallel_calls=tf.data.AUTOTUNE)

        config = ReadConfig(reader_func=reader_func, seed=0)
        ds = replay_dataset("gs://bucket/out", split="train", read_config=config)

    Attributes:
      reader_func: receives a Dataset whose elements are Datasets, one per shard file, each of
        that shard's decoded elements in file order, as `tf.data.Dataset.load`'s and
        `snapshot`'s reader_func receive them (under `input_context` element sharding: only this
        pipeline's records; of a sliced `split`, a shard only partly in it holds only the
        slice's records). It is called once and must return a Dataset of elements holding
        every element exactly once, in any order. Default: the default reader
        (`replay.reader`'s docstring): `default_reader_func` over blocks of `block_length`
        serialized records per shard, with `cycle_length` and `num_parallel_reads`, decoded
        once per batch.
      seed: seed of the shard and `shuffle_buffer` shuffles; with a seed the order is the same
        from run to run (and `deterministic` defaults to True).
      reshuffle_each_iteration: a new shuffle order each epoch.
      cycle_length: default reader: shards read at once (default 16).
      block_length: default reader: consecutive elements from one shard (default 64,
        `PARSE_BATCH`: shards are interleaved block by block, see `replay.reader`; with a
        `shuffle_buffer`, `shuffle_block_length`: 64 for a buffer of 4,096 or more, fewer for
        a smaller one, so that the buffer holds windows of many blocks, not runs of one).
      num_parallel_reads: default reader: AUTOTUNE (the default): every open shard reads ahead
        `READ_AHEAD_BLOCKS` blocks in a thread of its own, blocks taken round robin (with
        `service`: tf.data's parallel interleave); a number: tf.data's parallel interleave with
        that parallelism (`default_reader_func`).
      deterministic: deterministic element order; None: True with a `seed`, else False (faster).
      prefetch: prefetch buffer (AUTOTUNE; None or 0: no prefetch).
      input_context: a `tf.distribute.InputContext`: this input pipeline reads shard files
        ``input_pipeline_id::num_input_pipelines``; with fewer shard files than pipelines it
        reads every shard but keeps records ``input_pipeline_id::num_input_pipelines`` of each
        (decoding only those). File shares hold whole shards, so their sizes may differ. A
        sliced `split` counts its runs of shards (`replay.slicing.ShardSpan`) as files.
      service: a tf.data service dispatcher address (``grpc://host:port``): the dataset is
        produced by the service's workers. With ``order=GlobalOrder(...)`` only in
        "parallel_epochs" mode, without `job_name`, and from one service worker.
      processing_mode: tf.data service processing mode: "distributed_epoch" (each element
        once across workers) or "parallel_epochs" (each worker a full epoch).
      job_name: tf.data service job name (consumers with one name share one job).

    With ``balance="class"`` only `seed`, `deterministic`, `prefetch` and `input_context` apply,
    and `reader_func` and `service` are refused.
    """

    reader_func: Callable[[tf.data.Dataset], tf.data.Dataset] | None = None
    seed: int | None = None
    reshuffle_each_iteration: bool = True
    cycle_length: int | None = None
    block_length: int | None = None
    num_parallel_reads: int | None = AUTOTUNE
    deterministic: bool | None = None
    prefetch: int | None = AUTOTUNE
    input_context: tf.distribute.InputContext | None = None
    service: str | None = None
    processing_mode: Any = "distributed_epoch"
    job_name: str | None = None


FIELDS = tuple(f.name for f in dataclasses.fields(ReadConfig))
_DEFAULTS = ReadConfig()


def resolve(read_config: ReadConfig | None, **arguments: Any) -> ReadConfig:
    """The `ReadConfig` of a `replay_dataset` call: `read_config`, or one made of its read
    keywords `arguments` (every `ReadConfig` field, by name).

    Raises:
      TypeError: `read_config` is not a `ReadConfig`.
      ValueError: `read_config` and a read keyword other than its default were both given.
    """
    if read_config is None:
        return ReadConfig(**arguments)
    if not isinstance(read_config, ReadConfig):
        raise TypeError(f"read_config must be a ReadConfig, not {type(read_config).__name__}")
    given = [name for name in FIELDS if arguments[name] != getattr(_DEFAULTS, name)]
    if given:
        raise ValueError(
            f"replay_dataset: read_config and the read keyword(s) {', '.join(given)}: pass the "
            f"read options either in read_config (dataclasses.replace(read_config, {given[0]}="
            "...)) or as keywords, not both"
        )
    return read_config


@dataclasses.dataclass(frozen=True)
class ReadOutput:
    """`replay_dataset`'s keywords on what follows the reading: shuffles, repeat, batching."""

    shuffle_shards: bool
    shuffle_buffer: int
    repeat: bool
    batch_size: int | None
    drop_remainder: bool


@dataclasses.dataclass(frozen=True)
class PipelineShare:
    """What this input pipeline reads (`input_context`): spans of shards, and records of each."""

    spans: Sequence[ShardSpan]
    counts: Sequence[int]  # the records of each span this pipeline reads
    element_shard: tuple[int, int]  # (pipelines, this one's id), or (1, 0): whole spans

    @property
    def total(self) -> int:
        return sum(self.counts)


def pipeline_share(
    spans: Sequence[ShardSpan], input_context: tf.distribute.InputContext | None
) -> PipelineShare:
    """Spans ``id::pipelines`` (whole shards for split names: shard files); with fewer spans
    than pipelines, every span but records ``id::pipelines`` of each (element sharding)."""
    num_pipelines, pipeline_id = 1, 0
    if input_context is not None:
        num_pipelines = input_context.num_input_pipelines
        pipeline_id = input_context.input_pipeline_id
    element_sharding = num_pipelines > 1 and len(spans) < num_pipelines
    if num_pipelines > 1 and not element_sharding:
        spans = spans[pipeline_id::num_pipelines]
    if not element_sharding:
        return PipelineShare(spans, [s.count for s in spans], (1, 0))
    counts = [_records(s.count, num_pipelines, pipeline_id) for s in spans]
    return PipelineShare(spans, counts, (num_pipelines, pipeline_id))


def _records(num_records: int, num_pipelines: int, pipeline_id: int) -> int:
    """Records ``pipeline_id::num_pipelines`` of a shard of `num_records`."""
    return len(range(pipeline_id, num_records, num_pipelines))
