"""Global-order runs the framework tests compare: tf.data's (`replay_dataset`), merged by
position, and a record's ``index`` (`write_dataset` gives every record a unique one)."""

from __future__ import annotations

import tensorflow as tf

from replay import format as fmt
from replay import replay_dataset
from replay.global_order import GlobalOrder


def record_index(record: bytes) -> int:
    """The ``index`` of a serialized record."""
    example = tf.train.Example.FromString(record)
    return int(example.features.feature[fmt.INDEX_KEY].int64_list.value[0])


def merge(runs: list[list], per: int) -> list:
    """The global batches of pipelines' runs (`per` elements of each a batch), merged by
    position, for as many whole global batches as every run holds."""
    batches = min(len(run) for run in runs) // per
    return [x for b in range(batches) for run in runs for x in run[b * per : (b + 1) * per]]


def tf_run(path, split, order: GlobalOrder, *, workers: int, take: int) -> list[int]:
    """The ``index`` of `take` positions from `order.start` of `workers` tf.data pipelines,
    merged by position (`take` a multiple of the global batch)."""
    g = order.global_batch_size or workers
    runs = []
    for w in range(workers):
        ctx = tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=w)
        ds = replay_dataset(
            path,
            split=split,
            order=order,
            features=[fmt.INDEX_KEY],
            repeat=True,
            input_context=ctx,
        )
        elements = ds.take(take // workers).as_numpy_iterator()
        runs.append([int(e[fmt.INDEX_KEY]) for e in elements])
    return merge(runs, g // workers)
