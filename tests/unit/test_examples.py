"""transforms.stages.examples: the bytes protobuf's deterministic serialisation gives, on any
batch."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorflow.core.example import example_pb2
from tfx_bsl.coders import example_coder

from transforms.stages.examples import encode_examples


def _protobuf(batch: pa.RecordBatch) -> list[bytes]:
    """The reference: each row built as an Example proto, serialised deterministically."""
    out = []
    for row in batch.to_pylist():
        example = example_pb2.Example()
        for field in batch.schema:
            feature = example.features.feature[field.name]
            value_type = field.type.value_type
            if value_type == pa.float32():
                feature.float_list.SetInParent()
                feature.float_list.value.extend(row[field.name])
            elif value_type == pa.int64():
                feature.int64_list.SetInParent()
                feature.int64_list.value.extend(row[field.name])
            else:
                feature.bytes_list.SetInParent()
                values = [v.encode() if isinstance(v, str) else v for v in row[field.name]]
                feature.bytes_list.value.extend(values)
        out.append(example.SerializeToString(deterministic=True))
    return out


def _tfx_bsl(batch: pa.RecordBatch) -> list[bytes]:
    """What the write stage did before: tfx_bsl's encoder, then protobuf's re-serialisation."""
    encoded = example_coder.RecordBatchToExamplesEncoder().encode(batch)
    return [
        example_pb2.Example.FromString(e).SerializeToString(deterministic=True) for e in encoded
    ]


def _lists(values: list[list], value_type: pa.DataType) -> pa.ListArray:
    return pa.array(values, pa.list_(value_type))


_INT64 = st.integers(-(2**63), 2**63 - 1)
_FLOAT32 = st.floats(width=32, allow_nan=False)


@st.composite
def _batches(draw) -> pa.RecordBatch:
    rows = draw(st.integers(1, 5))
    names = draw(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5, unique=True))
    arrays = []
    for _ in names:
        kind = draw(st.sampled_from(["bytes", "int64", "float"]))
        element = {"bytes": st.binary(max_size=300), "int64": _INT64, "float": _FLOAT32}[kind]
        value_type = {"bytes": pa.binary(), "int64": pa.int64(), "float": pa.float32()}[kind]
        cells = draw(st.lists(st.lists(element, max_size=40), min_size=rows, max_size=rows))
        arrays.append(_lists(cells, value_type))
    return pa.RecordBatch.from_arrays(arrays, names=names)


@st.composite
def _window_batches(draw) -> pa.RecordBatch:
    """The record job's shapes: one bytes or int64 value per row, the same count of floats."""
    rows = draw(st.integers(1, 20))
    arrays, names = [], []
    for i in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["bytes", "int64", "float"]))
        if kind == "float":
            width = draw(st.integers(0, 8))
            cells = draw(st.lists(st.lists(_FLOAT32, min_size=width, max_size=width),
                                  min_size=rows, max_size=rows))  # fmt: skip
            arrays.append(_lists(cells, pa.float32()))
        else:
            element = st.binary(max_size=200) if kind == "bytes" else _INT64
            cells = draw(st.lists(element, min_size=rows, max_size=rows))
            value_type = pa.binary() if kind == "bytes" else pa.int64()
            arrays.append(_lists([[c] for c in cells], value_type))
        names.append(f"{kind}{i}")
    return pa.RecordBatch.from_arrays(arrays, names=names)


@settings(max_examples=200, deadline=None)
@given(_batches())
def test_any_batch_gives_protobufs_deterministic_bytes(batch):
    assert encode_examples(batch) == _protobuf(batch)


@settings(max_examples=100, deadline=None)
@given(_window_batches())
def test_window_shaped_batches_give_protobufs_deterministic_bytes(batch):
    assert encode_examples(batch) == _protobuf(batch)


def test_a_stored_window_row_and_its_edge_cases():
    rng = np.random.default_rng(0)
    signal = rng.integers(-(2**23), 2**23, size=(3, 16000), dtype=np.int32)
    log_mel = rng.standard_normal((3, 98 * 64)).astype(np.float32)
    log_mel[0, :3] = [np.nan, np.inf, -0.0]  # bit patterns kept as they are
    batch = pa.RecordBatch.from_arrays(
        [
            _lists([[b"dog"], [b"cat"], [b""]], pa.binary()),
            _lists([[s.tobytes()] for s in signal], pa.binary()),
            _lists([list(r) for r in log_mel], pa.float32()),
            _lists([[0], [-1], [2**40]], pa.int64()),
            _lists([[], [], []], pa.float32()),
            _lists([["é"], ["a"], ["b"]], pa.string()),
        ],
        names=["class", "signal", "log_mel", "target", "empty", "zé"],
    )
    ours = encode_examples(batch)
    assert ours == _protobuf(batch)
    no_string = batch.drop_columns(["zé"])  # tfx_bsl encodes binary, not string, columns
    assert encode_examples(no_string) == _tfx_bsl(no_string)
    parsed = tf.io.parse_single_example(
        ours[1],
        {"signal": tf.io.FixedLenFeature([], tf.string), "target": tf.io.VarLenFeature(tf.int64)},
    )
    assert np.array_equal(tf.io.decode_raw(parsed["signal"], tf.int32).numpy(), signal[1])
    assert parsed["target"].values.numpy().tolist() == [-1]
    stored = example_pb2.Example.FromString(ours[0]).features.feature["log_mel"].float_list.value
    assert np.array_equal(
        np.asarray(stored, np.float32).view(np.uint32), log_mel[0].view(np.uint32)
    )


def test_a_sliced_batch_encodes_only_its_rows():
    batch = pa.RecordBatch.from_arrays(
        [
            _lists([[1.0], [2.0, 3.0], [4.0]], pa.float32()),
            _lists([[b"a"], [b"bc", b""], [b"d"]], pa.binary()),
            _lists([[1], [2, 3], [4]], pa.int64()),
        ],
        ["x", "y", "z"],
    )
    assert encode_examples(batch.slice(1, 2)) == _protobuf(batch.slice(1, 2))
    values = pa.array([b"skipped", b"e", b"fg"]).slice(1)  # a list column over a sliced child
    column = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), values)
    sliced_child = pa.RecordBatch.from_arrays([column], ["y"])
    assert encode_examples(sliced_child) == _protobuf(sliced_child)


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (pa.array([1, 2], pa.int64()), "not a list column"),
        (pa.array([[1.0], [2.0]], pa.list_(pa.float64())), "no tf.train.Feature kind"),
        (pa.array([[1], None], pa.list_(pa.int64())), "null rows"),
    ],
)
def test_columns_it_cannot_encode_are_refused_by_name(array, message):
    with pytest.raises(ValueError, match=message) as e:
        encode_examples(pa.RecordBatch.from_arrays([array], ["feat"]))
    assert "'feat'" in str(e.value)
