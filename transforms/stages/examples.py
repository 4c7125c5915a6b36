"""RecordBatch -> serialized ``tf.train.Example`` bytes, deterministically, without protobuf.

Why hand-written: shards must be byte-identical between runs and processes. tfx_bsl's C++
``RecordBatchToExamplesEncoder`` writes the feature map in hash order, which changes from one
process to the next, and making it deterministic meant parsing every record back with protobuf
and serialising it again with ``deterministic=True`` (three copies of each 114 KB record, most of
the write stage's encoding CPU). Our batches are flat list columns of bytes / int64 / float32,
whose wire format is a few fixed prefixes around the values buffers, so the records are
assembled here from Arrow's buffers directly: the same bytes as protobuf's deterministic
serialisation (map entries in its order, repeated numbers packed; tests compare every byte), in
one copy.

Wire format (proto3, ``tensorflow/core/example/{example,feature}.proto``)::

    Example    { Features features = 1; }
    Features   { map<string, Feature> feature = 1; }    entry: { key = 1; value = 2; }
    Feature    { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                              Int64List int64_list = 3; } }
    *List      { repeated <bytes | float | int64> value = 1; }   numbers packed
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from replay import format as fmt
from transforms.spec.layout import RecordLayout
from transforms.stages.file_rows import FLOAT16_MAX, bytes_rows, float16_overflow, list_column

_LEN = 2  # wire type: length-delimited
_KIND = {"bytes": 1, "float": 2, "int64": 3}  # Feature.kind field numbers


def _map_order(a: str, b: str) -> int:
    """The order of protobuf's deterministic map serialisation (Python's upb runtime).

    Keys compare by their UTF-8 bytes, except that a key comes before its own prefixes
    (``log_mel_norm`` before ``log_mel``): upb sorts by (bytes descending, length ascending)
    and writes the sorted entries last to first.
    """
    x, y = a.encode(), b.encode()
    n = min(len(x), len(y))
    if x[:n] != y[:n]:
        return -1 if x[:n] < y[:n] else 1
    return len(y) - len(x)


def _tag(field: int) -> bytes:
    return bytes([field << 3 | _LEN])


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint of a uint64 (negative int64 as its two's complement)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@functools.lru_cache(maxsize=4096)  # the same few (field, length) pairs recur in every row
def _header(field: int, length: int) -> bytes:
    """Tag and length of a length-delimited field whose payload is `length` bytes."""
    return _tag(field) + _varint(length)


def _kind(name: str, value_type: pa.DataType) -> str:
    if pa.types.is_binary(value_type) or pa.types.is_string(value_type):
        return "bytes"
    if value_type == pa.float32():
        return "float"
    if value_type == pa.int64():
        return "int64"
    raise ValueError(f"column {name!r}: no tf.train.Feature kind for list<{value_type}>")


def _entry_prefix(key_field: bytes, kind: str, list_head: bytes, payload_len: int) -> bytes:
    """The bytes of one feature map entry before its payload: entry = prefix + payload.

    The entry is ``{key = 1: key_field; value = 2: Feature {kind: list_head + payload}}``; every
    header in it depends only on the lengths, so rows whose lengths agree share a prefix.
    """
    listed_len = len(list_head) + payload_len
    feature_head = _header(_KIND[kind], listed_len)
    feature_len = len(feature_head) + listed_len
    value_head = _header(2, feature_len)
    entry_len = len(key_field) + len(value_head) + feature_len
    return b"".join((_header(1, entry_len), key_field, value_head, feature_head, list_head))


def _payload_entries(
    key_field: bytes, kind: str, data: memoryview, starts: list[int], stops: list[int]
) -> tuple[list[bytes], list[memoryview]]:
    """Entries whose payload is ``data[start:stop]``: one bytes value, or packed floats."""
    prefixes: dict[int, bytes] = {}  # by payload length
    out = []
    for lo, hi in zip(starts, stops, strict=True):
        n = hi - lo
        prefix = prefixes.get(n)
        if prefix is None:
            head = _header(1, n) if n or kind == "bytes" else b""  # an empty float list: none
            prefix = prefixes[n] = _entry_prefix(key_field, kind, head, n)
        out.append(prefix)
    return out, [data[lo:hi] for lo, hi in zip(starts, stops, strict=True)]


def _column_entries(name: str, column: pa.Array) -> tuple[list[bytes], list]:
    """Each row's feature map entry for one list column, as (prefixes, payloads): the entry of
    row i is ``prefixes[i] + payloads[i]`` (payloads are views into the column's buffers).

    One value per row (bytes, int64) or the same number of floats per row, as the record job's
    columns are, takes one cached prefix per length; other shapes build each entry whole.
    """
    if not pa.types.is_list(column.type):
        raise ValueError(f"column {name!r} is {column.type}, not a list column")
    if column.null_count:
        raise ValueError(f"column {name!r} has {column.null_count} null rows")
    kind = _kind(name, column.type.value_type)
    key = name.encode()
    key_field = _header(1, len(key)) + key
    offsets = column.offsets.to_numpy()
    values = column.values
    if kind == "bytes":  # binary / utf8: int32 offsets into one data buffer (views, no copy)
        _, offsets_buffer, data_buffer = values.buffers()
        ends = np.frombuffer(offsets_buffer, np.int32)[values.offset :]
        data = memoryview(data_buffer) if data_buffer is not None else memoryview(b"")
        if len(offsets) > 1 and bool((np.diff(offsets) == 1).all()):  # one value per row
            starts = ends[offsets[:-1]].tolist()
            stops = ends[offsets[:-1] + 1].tolist()
            return _payload_entries(key_field, kind, data, starts, stops)
        ends = ends.tolist()
        entries = []
        for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
            bounds = zip(ends[lo:hi], ends[lo + 1 : hi + 1], strict=True)
            listed = b"".join(_header(1, e - s) + data[s:e] for s, e in bounds)
            entries.append(_entry_prefix(key_field, kind, b"", len(listed)) + listed)
        return entries, [b""] * len(entries)
    if kind == "float":
        data = memoryview(np.ascontiguousarray(values.to_numpy(zero_copy_only=False), "<f4"))
        data = data.cast("B")
        starts, stops = (offsets[:-1] * 4).tolist(), (offsets[1:] * 4).tolist()
        return _payload_entries(key_field, kind, data, starts, stops)
    items = values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False).tolist()
    cache: dict[int, bytes] = {}  # one value per row: the entry of each value seen
    entries = []
    for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        if hi - lo == 1:
            entry = cache.get(items[lo])
            if entry is None:
                varint = _varint(items[lo])
                head = _header(1, len(varint))
                entry = cache[items[lo]] = _entry_prefix(key_field, kind, head + varint, 0)
        else:
            varints = b"".join(_varint(v) for v in items[lo:hi])
            head = _header(1, len(varints)) if varints else b""
            entry = _entry_prefix(key_field, kind, head + varints, 0)
        entries.append(entry)
    return entries, [b""] * len(entries)


def raw_float_rows(name: str, column: pa.Array, *, stored_dtype: str = "float32") -> pa.ListArray:
    """A list<float32> column of fixed-size rows -> list<binary>: each row's values as one
    little-endian bytes value in `stored_dtype` (format version 2's ``raw`` encoding).

    float16 and bfloat16 round to nearest even. A finite value beyond float16's range (65504)
    is refused rather than stored as infinity: a feature would silently break. (In the record
    job `file_rows` refuses such a file first, with a per-file error; this guards the encoder.)

    Raises:
      ValueError: rows of different lengths, or a value float16 cannot hold (names the key).
    """
    offsets = column.offsets.to_numpy()
    widths = np.unique(np.diff(offsets))
    if len(widths) > 1:
        raise ValueError(f"column {name!r}: rows of different lengths {widths.tolist()[:4]}")
    values = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    if stored_dtype == "float16":
        worst = float16_overflow(values)
        if worst is not None:
            raise ValueError(
                f"--feature_dtype float16: {name} holds {worst:.6g}, beyond float16's range "
                f"(+-{FLOAT16_MAX:g}); record with --feature_dtype bfloat16 or float32"
            )
        values = values.astype("<f2")
    elif stored_dtype == "bfloat16":
        import ml_dtypes  # TensorFlow's own numpy bfloat16 (a TensorFlow dependency)

        values = values.astype(ml_dtypes.bfloat16)
    elif stored_dtype != "float32":
        raise ValueError(f"column {name!r}: unknown stored dtype {stored_dtype!r}")
    width = int(widths[0]) if len(widths) else 0
    return bytes_rows(values.reshape(len(column), width))


def encode_examples(batch: pa.RecordBatch) -> list[bytes]:
    """One serialized ``tf.train.Example`` per row of `batch`, in protobuf's deterministic bytes.

    Args:
      batch: list<binary | string | float32 | int64> columns without nulls; each column becomes
        one feature of that name (bytes_list, float_list or int64_list).

    Returns:
      [num_rows] records, byte-identical to ``Example.SerializeToString(deterministic=True)``.

    Raises:
      ValueError: a column that is not a list column of those types, or has null rows.
    """
    names = sorted(batch.schema.names, key=functools.cmp_to_key(_map_order))
    columns = []
    for name in names:
        columns.extend(_column_entries(name, batch.column(batch.schema.get_field_index(name))))
    if not columns:  # no feature: each record is an empty Features message
        return [_header(1, 0)] * batch.num_rows
    records = []
    for pieces in zip(*columns, strict=True):  # a row: prefix, payload of each entry
        records.append(b"".join((_header(1, sum(map(len, pieces))), *pieces)))
    return records


class StoredEncoder:
    """Raw RecordBatch -> the stored records: raw columns, float tensors as raw bytes (features
    in ``--feature_dtype``), + ``target`` and ``num_classes``, as serialized Examples.

    ``target`` is the label's index in the class list fixed at planning (-1 outside it): the
    ids TFT's class vocabulary gives, since that vocabulary is exactly the list (`finalize`
    checks it), so no transform graph runs here. ``<feature>_norm`` is not stored: the reader
    computes it from the statistics in the manifest (format version 2).
    """

    def __init__(self, layout: RecordLayout, classes: Sequence[str]):
        self._layout = layout
        self._ids = {name.encode(): i for i, name in enumerate(classes)}
        self._num_classes = len(classes)

    def stored(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The columns written for `batch`'s rows."""
        labels = batch.column(batch.schema.get_field_index(fmt.CLASS_KEY)).flatten()
        target = np.fromiter(
            (self._ids.get(label, -1) for label in labels.to_numpy(False)), np.int64, len(labels)
        )
        arrays, names = [], []
        for name, array in zip(batch.schema.names, batch.columns, strict=True):
            if pa.types.is_floating(array.type.value_type):
                dtype = self._layout.feature_dtype if name in self._layout.feature_shapes else ""
                array = raw_float_rows(name, array, stored_dtype=dtype or "float32")
            arrays.append(array)
            names.append(name)
        num_classes = np.full(batch.num_rows, self._num_classes, np.int64)
        for key, values in ((fmt.TARGET_KEY, target), (fmt.NUM_CLASSES_KEY, num_classes)):
            arrays.append(list_column(values, 1, pa.int64()))
            names.append(key)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def __call__(self, batch: pa.RecordBatch) -> list[bytes]:
        """One serialized Example per row of `batch`, as stored."""
        return encode_examples(self.stored(batch))
