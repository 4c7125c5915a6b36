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
from transforms.record.file_rows import FLOAT16_MAX, bytes_rows, float16_overflow, list_column
from transforms.record.preprocessing import RecordLayout

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


Pieces = list  # bytes-like pieces of one serialized message, joined once per record


def _feature(kind: str, listed: Pieces) -> tuple[Pieces, int]:
    """A ``Feature`` whose `kind` list message is `listed`, as (pieces, length)."""
    listed_len = sum(len(x) for x in listed)
    head = _header(_KIND[kind], listed_len)
    return [head, *listed], len(head) + listed_len


def _column_features(name: str, column: pa.Array) -> list[tuple[Pieces, int]]:
    """Each row's serialized ``Feature`` of one list column, as (pieces, length)."""
    if not pa.types.is_list(column.type):
        raise ValueError(f"column {name!r} is {column.type}, not a list column")
    if column.null_count:
        raise ValueError(f"column {name!r} has {column.null_count} null rows")
    kind = _kind(name, column.type.value_type)
    offsets = column.offsets.to_numpy().tolist()
    values = column.values
    bounds = zip(offsets[:-1], offsets[1:], strict=True)
    rows = []
    if kind == "bytes":  # binary / utf8: int32 offsets into one data buffer (views, no copy)
        _, offsets_buffer, data_buffer = values.buffers()
        ends = np.frombuffer(offsets_buffer, np.int32)[values.offset :].tolist()
        data = memoryview(data_buffer) if data_buffer is not None else memoryview(b"")
        for lo, hi in bounds:
            listed: Pieces = []
            for start, end in zip(ends[lo:hi], ends[lo + 1 : hi + 1], strict=True):
                listed += [_header(1, end - start), data[start:end]]
            rows.append(_feature(kind, listed))
    elif kind == "float":
        data = memoryview(np.ascontiguousarray(values.to_numpy(zero_copy_only=False), "<f4"))
        data = data.cast("B")
        for lo, hi in bounds:
            n = (hi - lo) * 4
            listed = [_header(1, n), data[lo * 4 : hi * 4]] if n else []
            rows.append(_feature(kind, listed))
    else:
        items = values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False).tolist()
        for lo, hi in bounds:
            varints = b"".join(_varint(v) for v in items[lo:hi])
            listed = [_header(1, len(varints)) + varints] if varints else []
            rows.append(_feature(kind, listed))
    return rows


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
    keys = [_header(1, len(n.encode())) + n.encode() for n in names]
    columns = [_column_features(n, batch.column(batch.schema.get_field_index(n))) for n in names]
    records = []
    for row in range(batch.num_rows):
        pieces: Pieces = []
        for key, features in zip(keys, columns, strict=True):
            feature, feature_len = features[row]
            value_head = _header(2, feature_len)
            pieces += [_header(1, len(key) + len(value_head) + feature_len), key, value_head]
            pieces += feature
        body = sum(len(p) for p in pieces)
        records.append(b"".join([_header(1, body), *pieces]))
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
