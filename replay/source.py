"""A framework-free source of decoded elements: element i of a split as a dict of numpy arrays.

``open_source(path, split=...)`` is `replay.records.open_records` (any record by its number,
checked as TensorFlow's TFRecord reader checks it) with each record decoded into the element
`replay_dataset` gives for it: the same keys, dtypes and shapes, ``signal`` and every stored key
bit for bit, each ``<feature>_norm`` (``z_score``) computed from its stored feature with the
manifest's statistics by the float32 operations of `replay.parsing.z_score`, in its order.

The contract of Grain's ``RandomAccessDataSource`` and of a map-style PyTorch ``Dataset``:
``len(source)``, ``source[i]`` and the batched ``source.__getitems__(indices)`` (a list of
elements, its records read grouped by shard); picklable, so worker processes open their own
shards. No TensorFlow for a local dataset: neither this module nor the layer below it imports
it. A dataset under a URL does: `replay.storage` reads its manifest, offsets files and sizes
through ``tf.io.gfile`` (a ``gs://`` shard's records then come through google-cloud-storage).

Decoding. Each record is a serialized ``tf.train.Example``, parsed here by `decode_example`, a
parser of its wire format (``tensorflow/core/example/{example,feature}.proto``: ``Features``,
a ``map<string, Feature>``; ``Feature``, a oneof of ``BytesList``, ``FloatList`` and
``Int64List``; packed and unpacked repeated numbers; unknown fields skipped; protobuf's merge
rules for repeated and embedded fields). Only the keys asked for are decoded: a raw key is one
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

A record that passes its checksums but is not such an Example (malformed protobuf, a key
missing, of another kind or of another length) raises `MalformedRecordError` naming the shard,
the record in it, its byte offset and the key; never a wrong array.
"""

from __future__ import annotations

import operator
import os
import struct
from collections.abc import Mapping, Sequence
from typing import Any, SupportsIndex

import numpy as np

from replay import format as fmt
from replay.errors import MalformedRecordError
from replay.info import DatasetInfo, load_info
from replay.records import Records
from replay.slicing import read_spans, span_shards

Element = dict[str, np.ndarray]

_FLOAT = struct.Struct("<f")
_INT64_MASK = (1 << 64) - 1
_INT64_SIGN = 1 << 63


class ExampleError(ValueError):
    """A serialized record that is not the Example its specs describe (`decode_example`);
    `key` names the key at fault (None: the Example's structure itself)."""

    def __init__(self, reason: str, key: str | None = None):
        super().__init__(f"key {key!r}: {reason}" if key is not None else reason)
        self.key = key


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
    buf, features = _features(data, decoder._wanted)
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


# ------------------------------------------------------------------ the source


def open_source(
    path: str | os.PathLike,
    *,
    split: str | Sequence[str] | None = None,
    features: str | Sequence[str] | None = None,
    version: int | None = None,
) -> Source:
    """The decoded elements of `split` of the dataset at `path`, by number (module docstring).

    Args:
      path: the dataset directory: a local path or a URL (``gs://bucket/out``).
      split: a split name, a slice of one (``"train[:10%]"``, `replay.slicing`) or a list of
        them; None: every split, in manifest order (as `replay_dataset`).
      features: the keys of each element (a name or a list); None: all, in manifest order.
      version: the dataset version (`load_info`); None: the latest.

    Returns:
      A `Source`: element ``i`` is element ``i`` of ``replay_dataset(path, split=split,
      features=features, version=version)`` read in order, unbatched.

    Raises:
      UnknownFeatureError: a key of `features` is not in the manifest.
      Any error of `replay.open_records`.
    """
    info = load_info(path, version=version)
    specs = info.select_features(features)
    spans = read_spans(info, split)
    records = Records(info, spans)
    info.check_shard_files(span_shards(spans))
    records.load_offsets()
    return Source(records, Decoder(specs, info.elements), split=split)


class Source:
    """Elements ``0 .. len - 1`` of a `Records`, decoded (`open_source`).

    Thread-safe as `Records` is. Pickles without open files (its `Records` reopens them).
    """

    def __init__(
        self, records: Records, decoder: Decoder, *, split: str | Sequence[str] | None = None
    ):
        self.records = records
        self.decoder = decoder
        self.split = split

    @property
    def info(self) -> DatasetInfo:
        """The dataset version read (`load_info`'s)."""
        return self.records.info

    @property
    def keys(self) -> list[str]:
        """The keys of every element, in order."""
        return list(self.decoder.specs)

    @property
    def element_specs(self) -> dict[str, fmt.ElementSpec]:
        """The `ElementSpec` of each key of an element."""
        return dict(self.decoder.specs)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: SupportsIndex) -> Element:
        try:
            index = operator.index(index)
        except TypeError:
            raise TypeError(f"Source indices are integers, not {type(index).__name__}") from None
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Element]:
        """The elements at `indices`, in that order (repeats allowed).

        Raises:
          IndexError: an index outside ``[-len, len)``.
          CorruptShardError: a record fails its frame checks (`Records.__getitems__`).
          MalformedRecordError: a record is not the Example the manifest describes.
        """
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        out = []
        decoder = self.decoder
        for k, data in enumerate(self.records.__getitems__(indices)):
            try:
                out.append(decode_example(data, decoder))
            except ExampleError as e:
                raise self._malformed(int(indices[k]), e) from e
        return out

    def _malformed(self, index: int, error: ExampleError) -> MalformedRecordError:
        where = self.records.locate(index)
        shard = where.shard
        e = MalformedRecordError(
            f"{shard.path}: record {where.record} at byte offset {where.start} (element "
            f"{index % len(self)}) is no Example of the manifest's elements: {error}"
        )
        e.shard_path, e.record, e.key = shard.path, where.record, error.key
        return e

    def close(self) -> None:
        """Closes the open shards (`Records.close`); a later read opens them again."""
        self.records.close()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        info = self.info
        return (
            f"Source(path={info.path!r}, split={self.split!r}, version={info.version}, "
            f"len={len(self)}, keys={self.keys!r})"
        )


# ------------------------------------------------------------------ specs


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


_BYTES, _FLOATS, _INTS = 1, 2, 3  # Feature's oneof field numbers: bytes_list, float_list, ...
_KIND_NAMES = {
    0: "no value",
    _BYTES: "a bytes_list",
    _FLOATS: "a float_list",
    _INTS: "an int64_list",
}


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

    want = _FLOATS if spec.encoding == fmt.ENCODING_FLOAT_LIST else _INTS

    def list_value(key: str, buf: bytes, kind_values: tuple[int, list]) -> np.ndarray:
        kind, parts = kind_values
        if kind != want:
            raise ExampleError(f"holds {_KIND_NAMES[kind]}, not the {spec.encoding} expected", key)
        if len(parts) != count and want == _INTS:
            raise ExampleError(f"{len(parts)} values, {count} expected (shape {list(shape)})", key)
        if want == _INTS:
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
    if kind != _BYTES:
        raise ExampleError(f"holds {_KIND_NAMES[kind]}, not the bytes_list expected", key)
    if len(values) != 1:
        raise ExampleError(f"{len(values)} bytes values, 1 expected", key)
    return values[0]


# ------------------------------------------------------------------ the wire format
#
# Every loop reads a one-byte varint inline (tags and short lengths) and calls `_varint` for
# longer ones; a length that overruns its message is refused where it is read, and a read past
# the end of the record (an IndexError) becomes `ExampleError` in `_features`.

_LEN1 = 0x0A  # field 1, wire type 2 (length-delimited): the tag of every field read here
_LEN2 = 0x12  # field 2, wire type 2: a map entry's value


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` of `buf` (as uint64) and the position after it."""
    result, shift = 0, 0
    while shift < 70:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & _INT64_MASK, pos
        shift += 7
    raise ExampleError(f"a varint longer than 10 bytes at byte {pos - 10}")


def _skip(buf: bytes, pos: int, end: int) -> int:
    """The position after the unknown field whose tag is at `pos` (within `end`)."""
    tag, pos = _varint(buf, pos)
    wire = tag & 7
    if tag >> 3 == 0:
        raise ExampleError(f"field number 0 at byte {pos}")
    if wire == 0:
        pos = _varint(buf, pos)[1]
    elif wire == 2:
        n, pos = _varint(buf, pos)
        pos += n
    elif wire == 1 or wire == 5:
        pos += 8 if wire == 1 else 4
    else:
        raise ExampleError(f"wire type {wire} at byte {pos} (no Example field has it)")
    if pos > end:
        raise ExampleError(f"a field overruns its message (ends at byte {pos}, not {end})")
    return pos


def _features(data: bytes | memoryview, wanted: Mapping[bytes, str]) -> tuple[bytes, dict]:
    """The record's bytes and {key: (kind, values)} of the features of the Example `data`
    whose key is in `wanted` (encoded key -> key), the last entry of a key winning, as
    protobuf's maps; other keys are skipped unparsed, as TensorFlow's parser skips them."""
    buf = data if isinstance(data, bytes) else bytes(data)
    try:
        return buf, _example(buf, wanted)
    except IndexError:
        raise ExampleError("truncated: a field runs past the record's end") from None


def _example(buf: bytes, wanted: Mapping[bytes, str]) -> dict[str, tuple]:
    end = len(buf)
    out: dict[str, tuple] = {}
    pos = 0
    while pos < end:  # Example: 1 features (Features), given once or merged
        if buf[pos] != _LEN1:
            pos = _skip(buf, pos, end)
            continue
        n = buf[pos + 1]
        pos += 2
        if n >= 0x80:
            n, pos = _varint(buf, pos - 1)
        stop = pos + n
        if stop > end:
            raise ExampleError(f"Features of {n} bytes at byte {pos} overrun the record")
        while pos < stop:  # Features: 1 feature (a map entry, repeated)
            if buf[pos] != _LEN1:
                pos = _skip(buf, pos, stop)
                continue
            n = buf[pos + 1]
            pos += 2
            if n >= 0x80:
                n, pos = _varint(buf, pos - 1)
            entry_end = pos + n
            if entry_end > stop:
                raise ExampleError(f"a feature of {n} bytes at byte {pos} overruns Features")
            if buf[pos] == _LEN1 and buf[pos + 1] < 0x80:  # the writers' entry: key, value
                key_end = pos + 2 + buf[pos + 1]
                if key_end < entry_end and buf[key_end] == _LEN2:
                    n = buf[key_end + 1]
                    value = key_end + 2
                    if n >= 0x80:
                        n, value = _varint(buf, key_end + 1)
                    if value + n == entry_end:
                        name = wanted.get(buf[pos + 2 : key_end])
                        if name is not None:
                            out[name] = _one_list(buf, value, entry_end) or _feature(
                                buf, [(value, entry_end)], name
                            )
                        pos = entry_end
                        continue
            key, parts = _map_entry(buf, pos, entry_end)  # any other layout
            pos = entry_end
            name = wanted.get(key)
            if name is not None:
                out[name] = _feature(buf, parts, name)
    return out


def _one_list(buf: bytes, pos: int, end: int) -> tuple[int, list] | None:
    """(kind, values) of the Feature ``buf[pos:end]`` when it is as the writers write it, one
    list holding one field of values (one bytes value, or packed numbers) and nothing else;
    None for any other layout (then `_feature` reads it)."""
    tag = buf[pos]
    if tag != 0x0A and tag != 0x12 and tag != 0x1A:
        return None
    n = buf[pos + 1]
    pos += 2
    if n >= 0x80:
        n, pos = _varint(buf, pos - 1)
    if pos + n != end or n == 0 or buf[pos] != _LEN1:
        return None
    n = buf[pos + 1]
    pos += 2
    if n >= 0x80:
        n, pos = _varint(buf, pos - 1)
    if pos + n != end:
        return None
    if tag == 0x0A:
        return _BYTES, [(pos, end)]
    if tag == 0x12:
        return (_FLOATS, [np.frombuffer(buf, "<f4", n // 4, pos)]) if n % 4 == 0 else None
    values = []
    while pos < end:
        value = buf[pos]
        if value < 0x80:
            pos += 1
        else:
            value, pos = _varint(buf, pos)
            value -= (value & _INT64_SIGN) << 1
        values.append(value)
    return (_INTS, values) if pos == end else None


def _map_entry(buf: bytes, pos: int, end: int) -> tuple[bytes, list[tuple[int, int]]]:
    """(key, the (start, end) of each part of its Feature) of a map entry: a missing key is
    empty, a value given more than once is merged (protobuf's rule for embedded messages)."""
    key, parts = b"", []
    while pos < end:
        tag = buf[pos]
        if tag != _LEN1 and tag != _LEN2:
            pos = _skip(buf, pos, end)
            continue
        n = buf[pos + 1]
        pos += 2
        if n >= 0x80:
            n, pos = _varint(buf, pos - 1)
        if pos + n > end:
            raise ExampleError(f"a field of {n} bytes at byte {pos} overruns its map entry")
        if tag == _LEN1:
            key = buf[pos : pos + n]
        else:
            parts.append((pos, pos + n))
        pos += n
    return key, parts


def _feature(buf: bytes, parts: list[tuple[int, int]], key: str) -> tuple[int, list]:
    """(kind, values) of the Feature given in `parts` (read as their concatenation): the
    (start, end) of each bytes value, float32 arrays, or ints. The last kind set wins (a
    oneof); one kind given twice is merged (its values concatenated)."""
    kind, values = 0, []
    try:
        for pos, end in parts:
            while pos < end:
                tag = buf[pos]
                field = tag >> 3
                if tag & 7 != 2 or field not in (_BYTES, _FLOATS, _INTS):
                    pos = _skip(buf, pos, end)
                    continue
                n = buf[pos + 1]
                pos += 2
                if n >= 0x80:
                    n, pos = _varint(buf, pos - 1)
                stop = pos + n
                if stop > end:
                    raise ExampleError(f"a list of {n} bytes at byte {pos} overruns its Feature")
                if field != kind:
                    kind, values = field, []
                if field == _BYTES:
                    _bytes_list(buf, pos, stop, values)
                elif field == _FLOATS:
                    _float_list(buf, pos, stop, values)
                else:
                    _int64_list(buf, pos, stop, values)
                pos = stop
    except ExampleError as e:
        raise ExampleError(str(e), key) from None
    except IndexError:
        raise ExampleError("truncated: a field runs past the record's end", key) from None
    return kind, values


def _bytes_list(buf: bytes, pos: int, end: int, out: list) -> None:
    while pos < end:
        if buf[pos] != _LEN1:  # BytesList: 1 value (bytes, repeated)
            pos = _skip(buf, pos, end)
            continue
        n = buf[pos + 1]
        pos += 2
        if n >= 0x80:
            n, pos = _varint(buf, pos - 1)
        if pos + n > end:
            raise ExampleError(f"a bytes value of {n} bytes at byte {pos} overruns its list")
        out.append((pos, pos + n))
        pos += n


def _float_list(buf: bytes, pos: int, end: int, out: list) -> None:
    while pos < end:  # FloatList: 1 value (float, repeated: packed or not)
        tag = buf[pos]
        if tag == _LEN1:
            n = buf[pos + 1]
            pos += 2
            if n >= 0x80:
                n, pos = _varint(buf, pos - 1)
            if pos + n > end or n % 4:
                raise ExampleError(f"packed floats of {n} bytes at byte {pos}")
            out.append(np.frombuffer(buf, "<f4", n // 4, pos))
            pos += n
        elif tag == 0x0D:  # field 1, wire type 5: one float
            if pos + 5 > end:
                raise ExampleError(f"a float at byte {pos} overruns its list")
            out.append(np.array(_FLOAT.unpack_from(buf, pos + 1), "<f4"))
            pos += 5
        else:
            pos = _skip(buf, pos, end)


def _int64_list(buf: bytes, pos: int, end: int, out: list) -> None:
    while pos < end:  # Int64List: 1 value (int64, repeated: packed or not)
        tag = buf[pos]
        if tag == _LEN1:
            n = buf[pos + 1]
            pos += 2
            if n >= 0x80:
                n, pos = _varint(buf, pos - 1)
            stop = pos + n
            if stop > end:
                raise ExampleError(f"packed ints of {n} bytes at byte {pos} overrun their list")
            while pos < stop:
                value, pos = _varint(buf, pos)
                out.append(value - ((value & _INT64_SIGN) << 1))
            if pos != stop:
                raise ExampleError(f"a varint crosses the end of its packed ints at byte {stop}")
        elif tag == 0x08:  # field 1, wire type 0: one int
            value, pos = _varint(buf, pos + 1)
            if pos > end:
                raise ExampleError(f"an int at byte {pos} overruns its list")
            out.append(value - ((value & _INT64_SIGN) << 1))
        else:
            pos = _skip(buf, pos, end)


__all__ = [
    "Decoder",
    "Element",
    "ExampleError",
    "Source",
    "decode_example",
    "open_source",
    "z_score",
]
