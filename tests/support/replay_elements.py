"""What the `replay` tests compare: the elements a dataset yields, by input-file index.

`write_dataset` (tests/support/replay_fixtures.py) gives every element a unique ``index``, so a
list of indices is an element order.
"""

from __future__ import annotations

import tensorflow as tf

from replay import format as fmt


def collect(ds: tf.data.Dataset) -> list[dict]:
    return list(ds.as_numpy_iterator())


def indices(elements: list[dict]) -> list[int]:
    return [int(e[fmt.INDEX_KEY]) for e in elements]


def all_indices(expected: dict, splits=None) -> list[int]:
    splits = splits or list(expected["elements"])
    return [int(e[fmt.INDEX_KEY]) for s in splits for e in expected["elements"][s]]
