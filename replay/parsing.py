"""Decode serialized `tf.train.Example` records into elements, per `format.ElementSpec`.

One `tf.io.parse_example` call decodes a whole batch of records, and one `tf.io.decode_raw` a
raw key of the whole batch; keys not requested are not in the parse description, so the parser
skips them (no work is spent on them). A ``z_score`` key (format version 2) is computed after
decoding, from its stored source key, for the whole batch at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import tensorflow as tf

from replay import format as fmt
from replay.format import stored_specs

Element = dict[str, tf.Tensor]


def feature_description(specs: Mapping[str, fmt.ElementSpec]) -> dict[str, tf.io.FixedLenFeature]:
    """The `tf.io.parse_example` features dict that reads each stored key's encoding."""
    description = {}
    for key, spec in specs.items():
        if spec.encoding in (fmt.ENCODING_RAW, fmt.ENCODING_BYTES_LIST):
            description[key] = tf.io.FixedLenFeature([], tf.string)
        elif spec.encoding == fmt.ENCODING_INT64_LIST:
            description[key] = tf.io.FixedLenFeature(spec.shape, tf.int64)
        elif spec.encoding == fmt.ENCODING_FLOAT_LIST:
            description[key] = tf.io.FixedLenFeature(spec.shape, tf.float32)
        else:
            raise ValueError(f"{key}: encoding {spec.encoding!r} is not stored")
        if spec.encoding == fmt.ENCODING_RAW and spec.dtype == "string":
            raise ValueError(f"{key}: encoding 'raw' cannot decode to dtype 'string'")
    return description


def z_score(x: tf.Tensor, *, mean: float, var: float) -> tf.Tensor:
    """``tft.scale_to_z_score`` of `x` with the analysis statistics: ``x - mean``, divided by
    ``sqrt(var)`` unless that is 0, the float32 ops of tensorflow-transform 1.21
    (``mappers._scale_to_z_score_internal``), so the values are bit for bit those of the
    transform graph (tested against ``TFTransformOutput.transform_raw_features``).

    The division is ``divide_no_nan`` by a divisor that is never 0 (the float32 square root of
    a var >= 0 is 0 exactly when var is; that branch is chosen here, once): the same IEEE
    division, but an op Grappler leaves alone. A plain ``x / constant`` inside a `tf.function`
    was rewritten to a multiplication by the reciprocal, 1 ulp off in some values (measured
    against the transform graph, whose statistics are captured inputs, not constants).
    """
    numerator = x - tf.constant(mean, tf.float32)
    if var == 0:
        return numerator
    return tf.math.divide_no_nan(numerator, tf.sqrt(tf.constant(var, tf.float32)))


def batch_parser(
    specs: Mapping[str, fmt.ElementSpec], elements: Mapping[str, fmt.ElementSpec] | None = None
) -> Callable[[tf.Tensor], Element]:
    """A function: serialized records ``[n]`` -> element dict of ``[n, *shape]`` tensors.

    ``raw`` keys are decoded little-endian with `tf.io.decode_raw` (bit-exact; float16 /
    bfloat16 bytes widened to float32); ``int64_list`` keys are cast when the spec's dtype is
    narrower; ``z_score`` keys are computed from their source (parsed even when not in
    `specs`, then left out).

    Args:
      specs: the keys of the output elements.
      elements: every key of the dataset (where z_score sources are found; default `specs`).
    """
    specs = dict(specs)
    stored = stored_specs(specs, elements)
    description = feature_description(stored)

    def parse(serialized: tf.Tensor) -> Element:
        parsed = tf.io.parse_example(serialized, description)
        decoded = {}
        for key, spec in stored.items():
            value = parsed[key]
            dtype = tf.as_dtype(spec.dtype)
            if spec.encoding == fmt.ENCODING_RAW:
                raw_dtype = tf.as_dtype(spec.stored_dtype or spec.dtype)
                value = tf.io.decode_raw(value, raw_dtype, little_endian=True)
                value = tf.reshape(value, [-1, *spec.shape])
            if value.dtype != dtype:
                value = tf.cast(value, dtype)
            decoded[key] = value
        element = {}
        for key, spec in specs.items():
            if spec.z_score is None:
                element[key] = decoded[key]
            else:
                source = decoded[spec.z_score.source]
                element[key] = z_score(source, mean=spec.z_score.mean, var=spec.z_score.var)
        return element

    return parse
