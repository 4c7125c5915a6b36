"""transforms.stages.arrow_coder: the read stage's RecordBatches are sized without being encoded,
and only the columns TFT analyses reach it."""

from __future__ import annotations

import pickle

import apache_beam as beam
import numpy as np
import pyarrow as pa

from transforms.spec.layout import RecordLayout
from transforms.stages import composites
from transforms.stages.arrow_coder import RecordBatchCoder


def _batch(rows: int = 3) -> pa.RecordBatch:
    values = np.arange(rows * 6, dtype=np.float32).reshape(rows, 6)
    return pa.record_batch(
        [
            pa.array([[b"rain"]] * rows, pa.list_(pa.binary())),
            pa.array(list(values), pa.list_(pa.float32())),
        ],
        names=["class", "log_mel"],
    )


class _CountingCoder(RecordBatchCoder):
    encoded = 0

    def encode(self, value: pa.RecordBatch) -> bytes:
        type(self).encoded += 1
        return super().encode(value)


def test_round_trip_keeps_schema_and_values():
    batch = _batch()
    coder = RecordBatchCoder()
    back = coder.decode(coder.encode(batch))
    assert back.equals(batch) and back.schema == batch.schema
    impl = coder.get_impl()  # what Beam's workers use
    assert impl.decode(impl.encode(batch)).equals(batch)


def test_size_estimate_is_nbytes_without_encoding():
    batch = _batch(rows=50)
    coder = _CountingCoder()
    impl = coder.get_impl()
    size, observables = impl.get_estimated_size_and_observables(batch)  # Beam's sampling call
    assert (size, observables) == (batch.nbytes, [])
    assert _CountingCoder.encoded == 0
    # the estimate is the encoded size up to pickle's framing
    assert abs(len(pickle.dumps(batch, pickle.HIGHEST_PROTOCOL)) - size) < 4096


def test_registered_for_record_batches_by_the_stages_module():
    assert composites.RecordBatchCoder is RecordBatchCoder
    composites.register_coders()  # as building the record job does (test_composites.py)
    assert isinstance(beam.coders.registry.get_coder(pa.RecordBatch), RecordBatchCoder)


def test_analysis_schema_is_class_and_features_only():
    layout = RecordLayout(feature_shapes={"log_mel": (4, 2), "mfcc": (4, 3)}, num_label_classes=2)
    schema = layout.analysis_schema()
    assert schema.names == ["class", "log_mel", "mfcc"]
    full = layout.arrow_schema()
    assert "signal" in full.names and "signal" not in schema.names
    assert all(schema.field(k) == full.field(k) for k in schema.names)
    # every tensor TFT's preprocessing_fn sees is a column of the analysed batches
    assert set(layout.tensor_representations()) == set(schema.names)
