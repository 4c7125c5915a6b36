"""`replay_dataset(order=GlobalOrder(...))`: the options the global order refuses (the tf.data
service modes it does not hold under among them), and this pipeline's records in the global order
(read by `replay.global_reader`), batched and decoded once per batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from replay.default_reader import assert_count
from replay.global_order import GlobalOrder, Slots
from replay.global_reader import (
    check_positions,
    pipeline_batches,
    pipeline_records,
    random_access,
    run_count,
)
from replay.info import DatasetInfo
from replay.parsing import batch_parser
from replay.read_config import ReadConfig, ReadOutput
from replay.records import Records
from replay.shards import PARSE_BATCH, reader_options
from replay.slicing import read_spans, span_shards

AUTOTUNE = tf.data.AUTOTUNE
_ShardingPolicy = tf.data.experimental.service.ShardingPolicy


def check_global(config: ReadConfig, output: ReadOutput, *, balance: str | None) -> None:
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


def global_dataset(
    info: DatasetInfo,
    order: GlobalOrder,
    config: ReadConfig,
    output: ReadOutput,
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
    ds = assert_count(ds, output, total=total)
    ds = ds.with_options(reader_options(True))
    return ds.prefetch(config.prefetch) if config.prefetch else ds
