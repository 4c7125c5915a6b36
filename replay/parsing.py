"""Decode serialized `tf.train.Example` records into elements, per `format.ElementSpec`.

One `tf.io.parse_example` call decodes a whole batch of records; keys not requested are skipped
by the parser (no work is spent on them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import tensorflow as tf

from replay import format as fmt

Element = dict[str, tf.Tensor]


def feature_description(specs: Mapping[str, fmt.ElementSpec]) -> dict[str, tf.io.FixedLenFeature]:
    """The `tf.io.parse_example` features dict that reads each key's stored encoding."""
    description = {}
    for key, spec in specs.items():
        if spec.encoding in (fmt.ENCODING_RAW, fmt.ENCODING_BYTES_LIST):
            description[key] = tf.io.FixedLenFeature([], tf.string)
        elif spec.encoding == fmt.ENCODING_INT64_LIST:
            description[key] = tf.io.FixedLenFeature(spec.shape, tf.int64)
        elif spec.encoding == fmt.ENCODING_FLOAT_LIST:
            description[key] = tf.io.FixedLenFeature(spec.shape, tf.float32)
        else:  # pragma: no cover - ElementSpec validates encodings
            raise ValueError(f"{key}: unknown encoding {spec.encoding!r}")
        if spec.encoding == fmt.ENCODING_RAW and spec.dtype == "string":
            raise ValueError(f"{key}: encoding 'raw' cannot decode to dtype 'string'")
    return description


def batch_parser(specs: Mapping[str, fmt.ElementSpec]) -> Callable[[tf.Tensor], Element]:
    """A function: serialized records ``[n]`` -> element dict of ``[n, *shape]`` tensors.

    ``raw`` keys are decoded little-endian with `tf.io.decode_raw` (bit-exact); ``int64_list``
    keys are cast when the spec's dtype is narrower.
    """
    specs = dict(specs)
    description = feature_description(specs)

    def parse(serialized: tf.Tensor) -> Element:
        parsed = tf.io.parse_example(serialized, description)
        element = {}
        for key, spec in specs.items():
            value = parsed[key]
            dtype = tf.as_dtype(spec.dtype)
            if spec.encoding == fmt.ENCODING_RAW:
                value = tf.io.decode_raw(value, dtype, little_endian=True)
                value = tf.reshape(value, [-1, *spec.shape])
            elif value.dtype != dtype:
                value = tf.cast(value, dtype)
            element[key] = value
        return element

    return parse
