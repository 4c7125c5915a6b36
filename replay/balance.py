"""Class-balanced replay: ``replay_dataset(..., balance="class")``.

Each draw picks a class uniformly at random, then takes the next element of that class's
stream: the dataset's elements that have the class, in shuffled shard order (and through the
`shuffle_buffer`), repeated forever. A class is had by an element when

- the dataset has a ``labels`` key (``--annotations``, multi-label): ``labels[k] > 0``, so a
  window with two labels is in both streams ("balance by any label");
- else: ``target == k`` (an element with target -1 is never drawn).

Streams are `tf.data.Dataset.filter`s of the whole dataset, mixed with
`tf.data.Dataset.sample_from_datasets` (uniform weights, `seed`): tf.data's own tools, and they
need no particular sharding. The price is reading: drawing from class k reads about ``1 / p_k``
elements (``p_k`` the share of elements that have it), so a class of 1% costs 100 reads a draw
(docs/performance.md has a measurement).

Cardinality: infinite (`tf.data.INFINITE_CARDINALITY`); the training loop says how long an epoch
is (``take(n)``, Keras ``steps_per_epoch``). A class with no element in the chosen splits is left
out (its stream ends at once and the others are drawn uniformly). With `seed` the sequence is the
same on every run. After N draws of a single-label dataset each class's share is within
``3 * sqrt(p (1 - p) / N)`` of ``p = 1 / K`` with probability 99.7% (binomial), the tolerance the
tests check.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from replay import format as fmt
from replay.info import load_info
from replay.slicing import read_spans, span_shards

BALANCE_MODES = ("class",)
_CYCLE_LENGTH = 16


def balanced_dataset(
    path: str | os.PathLike,
    *,
    balance: str,
    split: str | Sequence[str] | None = None,
    version: int | None = None,
    features: str | Sequence[str] | None = None,
    seed: int | None = None,
    shuffle_buffer: int = 0,
    deterministic: bool | None = None,
    batch_size: int | None = None,
    drop_remainder: bool = False,
    prefetch: int | None = tf.data.AUTOTUNE,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """The class-balanced, infinite dataset `replay_dataset` returns for ``balance="class"``.

    Args: as `replay.reader.replay_dataset` (same meaning). Under `input_context` every input
    pipeline draws its own balanced sequence (its seed offset by the pipeline id).

    Raises:
      ValueError: an unknown `balance`, or a dataset with neither ``labels`` nor ``target``.
    """
    from replay.shards import reader_options, shard_datasets

    if balance not in BALANCE_MODES:
        raise ValueError(f"balance must be one of {BALANCE_MODES} or None, got {balance!r}")
    info = load_info(path, version=version)
    wanted = info.select_features(features)
    key = fmt.LABELS_KEY if fmt.LABELS_KEY in info.elements else fmt.TARGET_KEY
    if key not in info.elements or not info.classes:
        raise ValueError(f"{info.path}: balance='class' needs 'labels' or 'target' and classes")
    read = info.select_features([*wanted, key])
    if deterministic is None:
        deterministic = seed is not None
    if input_context is not None and seed is not None:
        seed += 1_000_003 * input_context.input_pipeline_id
    spans = read_spans(info, split)
    info.check_shard_files(span_shards(spans))
    streams = []
    for k in range(info.num_classes):
        stream_seed = None if seed is None else seed + 1 + k
        ds = shard_datasets(info, spans, read, shuffle=True, seed=stream_seed)
        ds = ds.interleave(
            lambda shard: shard,
            cycle_length=_CYCLE_LENGTH,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
        ds = ds.filter(_has_class(key, k))
        if shuffle_buffer:
            ds = ds.shuffle(shuffle_buffer, seed=stream_seed)
        streams.append(ds.repeat())  # a class with no element: repeat of nothing ends at once
    ds = tf.data.Dataset.sample_from_datasets(
        streams, weights=[1.0 / len(streams)] * len(streams), seed=seed
    )
    if set(read) != set(wanted):
        ds = ds.map(lambda e: {k: e[k] for k in wanted})
    if batch_size is not None:
        ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    ds = ds.with_options(reader_options(deterministic))
    return ds.prefetch(prefetch) if prefetch else ds


def _has_class(key: str, k: int) -> Any:
    if key == fmt.LABELS_KEY:
        return lambda e: e[fmt.LABELS_KEY][k] > 0
    return lambda e: tf.equal(e[fmt.TARGET_KEY], k)
