"""Serialized ``tf.train.Example`` records -> elements as numpy arrays, per the element specs:
`Decoder` (the keys asked for, each key's plan), `decode_example`, `z_score` in numpy float32.
The wire format itself is read by `replay.example_wire`; `replay.source` serves the elements.

Decoding. Each record is a serialized ``tf.train.Example``, parsed by `decode_example` with
`replay.example_wire`, a parser of its wire format
(``tensorflow/core/example/{example,feature}.proto``: ``Features``, a ``map<string, Feature>``;
``Feature``, a oneof of ``BytesList``, ``FloatList`` and ``Int64List``; packed and unpacked
repeated numbers; unknown fields skipped; protobuf's merge rules for repeated and embedded
fields). Only the keys asked for are decoded: a raw key is one
`numpy.frombuffer` of its bytes, cast (one copy, so every array is writable and holds no
reference to the record); a ``float_list`` is read as packed little-endian float32 the same
way. TensorFlow's ``example_pb2`` classes are not an option here (importing them loads
TensorFlow's runtime), nor faster than this parser (benchmarks/RESULTS.md, "Issue 53").

Values, per the element spec (`replay.format.ElementSpec`):

- ``raw``: the little-endian bytes of ``shape`` values of ``stored_dtype or dtype``, one bytes
  value; float16 / bfloat16 widened to float32 (exactly);
- ``int64_list`` / ``float_list``: exactly ``prod(shape)`` values, cast to ``dtype`` when it is
  another (as ``tf.cast``: int64 narrowed wraps around);
- ``bytes_list`` (``string``): one value, a 0-d object array holding the bytes, what TensorFlow
  gives for a batch of strings;
- ``z_score``: ``(x - mean) / sqrt(var)`` in float32, ``x - mean`` when ``var`` is 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from replay import format as fmt
from replay.example_wire import BYTES, FLOATS, INTS, KIND_NAMES, ExampleError, example_features

Element = dict[str, np.ndarray]


class Decoder:
    """Serialized ``tf.train.Example`` -> element, for the keys of `specs` (`decode_example`).

    Args:
      specs: the keys of the output elements, in output order.
      elements: every key of the dataset (where a z_score key's source is found; default
        `specs`).

    Raises:
      ValueError: a z_score key whose source is not a stored key, or a spec no reader decodes
        (``raw`` to ``string``, ``bytes_list`` to a number).
    """

    def __init__(
        self,
        specs: Mapping[str, fmt.ElementSpec],
        elements: Mapping[str, fmt.ElementSpec] | None = None,
    ):
        self.specs = dict(specs)
        self.stored = fmt.stored_specs(self.specs, elements)
        for key, spec in self.stored.items():
            _check_spec(key, spec)
        self._wanted = {key.encode("utf-8"): key for key in self.stored}
        self._plans = {key: _plan(spec) for key, spec in self.stored.items()}

    def __call__(self, data: bytes) -> Element:
        return decode_example(data, self)

    def __reduce__(self) -> tuple[Any, ...]:
        return Decoder, (self.specs, {**self.specs, **self.stored})


def decode_example(data: bytes | memoryview, decoder: Decoder) -> Element:
    """The element of one serialized ``tf.train.Example`` (module docstring, "Values").

    Raises:
      ExampleError: `data` is not a valid Example, or a key is missing or not as specified.
    """
    buf, features = example_features(data, decoder._wanted)
    decoded = {}
    for key, plan in decoder._plans.items():
        kind_values = features.get(key)
        if kind_values is None:
            raise ExampleError("missing from the record", key)
        decoded[key] = plan(key, buf, kind_values)
    element = {}
    for key, spec in decoder.specs.items():
        if spec.z_score is None:
            element[key] = decoded[key]
        else:
            z = spec.z_score
            element[key] = z_score(decoded[z.source], mean=z.mean, var=z.var)
    return element


def z_score(x: np.ndarray, *, mean: float, var: float) -> np.ndarray:
    """`replay.parsing.z_score` in numpy: ``x - float32(mean)``, divided by
    ``sqrt(float32(var))`` unless `var` is 0, every operation in float32."""
    numerator = np.subtract(x, np.float32(mean), dtype=np.float32)
    if var == 0:
        return numerator
    return np.divide(numerator, np.sqrt(np.float32(var)), out=numerator, dtype=np.float32)


def _check_spec(key: str, spec: fmt.ElementSpec) -> None:
    if spec.encoding == fmt.ENCODING_RAW and spec.dtype == "string":
        raise ValueError(f"{key}: encoding 'raw' cannot decode to dtype 'string'")
    if spec.encoding == fmt.ENCODING_BYTES_LIST and spec.dtype != "string":
        raise ValueError(f"{key}: encoding 'bytes_list' decodes to dtype 'string' only")
    if spec.encoding not in (
        fmt.ENCODING_RAW,
        fmt.ENCODING_BYTES_LIST,
        fmt.ENCODING_INT64_LIST,
        fmt.ENCODING_FLOAT_LIST,
    ):
        raise ValueError(f"{key}: encoding {spec.encoding!r} is not stored")


def _plan(spec: fmt.ElementSpec):  # noqa: ANN202 - a closure per key
    """The function (key, buf, (kind, values)) -> array of one stored key (values: see
    `_feature`)."""
    shape = tuple(spec.shape)
    count = int(np.prod(shape, dtype=np.int64))
    dtype = np.dtype(spec.dtype) if spec.dtype != "string" else None

    if spec.encoding == fmt.ENCODING_BYTES_LIST:

        def bytes_value(key: str, buf: bytes, kind_values: tuple[int, list]) -> np.ndarray:
            start, stop = _one_bytes(key, kind_values)
            return np.array(buf[start:stop], dtype=object)

        return bytes_value

    if spec.encoding == fmt.ENCODING_RAW:
        stored = spec.stored_dtype or spec.dtype
        raw = np.dtype("<u2") if stored == "bfloat16" else np.dtype(stored).newbyteorder("<")
        size = count * raw.itemsize

        def raw_value(key: str, buf: bytes, kind_values: tuple[int, list]) -> np.ndarray:
            start, stop = _one_bytes(key, kind_values)
            if stop - start != size:
                raise ExampleError(
                    f"{stop - start} bytes, {size} expected ({count} x {stored}, shape "
                    f"{list(shape)})",
                    key,
                )
            values = np.frombuffer(buf, raw, count, start)  # a view: the cast below copies
            if stored == "bfloat16":  # the high half of float32's bits
                return (values.astype(np.uint32) << 16).view(np.float32).reshape(shape)
            return values.astype(dtype).reshape(shape)

        return raw_value

    want = FLOATS if spec.encoding == fmt.ENCODING_FLOAT_LIST else INTS

    def list_value(key: str, buf: bytes, kind_values: tuple[int, list]) -> np.ndarray:
        kind, parts = kind_values
        if kind != want:
            raise ExampleError(f"holds {KIND_NAMES[kind]}, not the {spec.encoding} expected", key)
        if len(parts) != count and want == INTS:
            raise ExampleError(f"{len(parts)} values, {count} expected (shape {list(shape)})", key)
        if want == INTS:
            if not shape and dtype == np.int64:  # the scalars of every record
                return np.array(parts[0], dtype=np.int64)
            values = np.array(parts, dtype=np.int64)
            if dtype != np.int64:
                values = values.astype(dtype)
            return values.reshape(shape)
        values = parts[0] if len(parts) == 1 else np.concatenate(parts or [np.empty(0, "<f4")])
        if values.size != count:
            raise ExampleError(f"{values.size} values, {count} expected (shape {list(shape)})", key)
        return values.astype(dtype).reshape(shape)

    return list_value


def _one_bytes(key: str, kind_values: tuple[int, list]) -> tuple[int, int]:
    kind, values = kind_values
    if kind != BYTES:
        raise ExampleError(f"holds {KIND_NAMES[kind]}, not the bytes_list expected", key)
    if len(values) != 1:
        raise ExampleError(f"{len(values)} bytes values, 1 expected", key)
    return values[0]
