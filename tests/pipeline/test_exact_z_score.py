"""`transforms.stages.exact_z_score` inside a real tensorflow-transform analysis (Beam's
DirectRunner): the statistics TFT puts into the transform graph are the exact moments' mean and
variance whatever the rows' batches or their order, from TFT's own batches or from the moments
the record job hands; the graph z-scores as ``tft.scale_to_z_score`` does; and the class
vocabulary is the planned classes even when TFT sees no row (a fully reused ``--resume``)."""

from __future__ import annotations

import functools

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

from transforms.spec.layout import RecordLayout
from transforms.stages import finalize
from transforms.stages.moments import Moments
from transforms.stages.preprocessing import preprocessing_fn

LAYOUT = RecordLayout(feature_shapes={"f": (3, 2)})
CLASSES = ("a", "b")


def _rows(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # values over many binary exponents, so float32 partial sums round differently per cut
    return (rng.standard_normal((n, 3, 2)) * 10.0 ** rng.integers(-6, 4, (n, 3, 2))).astype(
        np.float32
    )


def _batch(values: np.ndarray) -> pa.RecordBatch:
    n = len(values)
    offsets = pa.array(np.arange(n + 1, dtype=np.int32))
    labels = pa.array([CLASSES[i % 2].encode() for i in range(n)], pa.binary())
    features = pa.ListArray.from_arrays(
        pa.array(np.arange(n + 1, dtype=np.int32) * 6), pa.array(values.reshape(-1))
    )
    columns = [pa.ListArray.from_arrays(offsets, labels), features]
    return pa.RecordBatch.from_arrays(columns, schema=LAYOUT.analysis_schema())


def _analyze(tmp_path, batches: list[pa.RecordBatch], *, moments: list | None = None) -> dict:
    """Runs TFT's AnalyzeDataset over `batches`; returns the statistics and vocabulary the
    written transform_fn/ holds (read back as `finalize` reads them)."""
    import tensorflow_transform.beam as tft_beam
    from tfx_bsl.tfxio.tensor_adapter import TensorAdapterConfig

    out = tmp_path / "out"
    with beam.Pipeline("DirectRunner") as p:
        rows = p | "Rows" >> beam.Create(batches, reshuffle=False)
        stats = None if moments is None else p | "Moments" >> beam.Create(moments)
        fn = functools.partial(
            preprocessing_fn,
            feature_names=("f",),
            normalize=True,
            classes=CLASSES,
            moments=stats,
        )
        config = TensorAdapterConfig(LAYOUT.analysis_schema(), LAYOUT.tensor_representations())
        with tft_beam.Context(temp_dir=str(tmp_path / "tft")):
            transform_fn = (rows, config) | tft_beam.AnalyzeDataset(fn)
            _ = transform_fn | tft_beam.WriteTransformFn(str(out))
    return {
        "statistics": finalize.read_z_score_statistics(str(out), LAYOUT),
        "vocabulary": finalize.read_vocabulary(str(out)),
        "out": out,
    }


def _expected(values: np.ndarray) -> tuple[float, float]:
    mean, var = Moments.of_rows(values).mean_var()
    return float(mean), float(var)


@pytest.mark.slow
def test_statistics_are_the_exact_moments_whatever_the_batches(tmp_path):
    values = _rows(0, 60)
    one = _analyze(tmp_path / "one", [_batch(values)])
    cut = [_batch(values[i : i + 7]) for i in range(0, 60, 7)][::-1]  # other cuts, reversed
    many = _analyze(tmp_path / "many", cut)
    assert one["statistics"] == many["statistics"] == {"f": _expected(values)}
    assert one["vocabulary"] == many["vocabulary"] == list(CLASSES)


@pytest.mark.slow
def test_the_record_jobs_moments_replace_the_rows_and_the_graph_z_scores_as_tft(tmp_path):
    import tensorflow as tf
    import tensorflow_transform as tft

    values = _rows(1, 40)
    pieces = [{"f": Moments.of_rows(values[i : i + 9])} for i in range(0, 40, 9)]
    # TFT sees only the first rows (the rest reused), the statistics cover every row
    got = _analyze(tmp_path / "m", [_batch(values[:5])], moments=pieces)
    mean, var = _expected(values)
    assert got["statistics"] == {"f": (mean, var)}
    assert got["vocabulary"] == list(CLASSES)
    output = tft.TFTransformOutput(str(got["out"]))
    x = tf.constant(values[:4])
    z = output.transform_raw_features({"class": tf.constant([b"a", b"b", b"x", b"a"]), "f": x})
    want = (x - np.float32(mean)) / tf.sqrt(tf.constant(np.float32(var)))
    np.testing.assert_array_equal(z["f_norm"].numpy(), want.numpy())  # bit for bit
    assert z["target"].numpy().tolist() == [0, 1, -1, 0]


@pytest.mark.slow
def test_no_row_for_tft_still_gives_the_planned_vocabulary(tmp_path):
    values = _rows(2, 10)
    got = _analyze(tmp_path / "e", [], moments=[{"f": Moments.of_rows(values)}])
    assert got["vocabulary"] == list(CLASSES)
    assert got["statistics"] == {"f": _expected(values)}


@pytest.mark.slow
def test_zero_variance_leaves_x_minus_mean(tmp_path):
    import tensorflow as tf
    import tensorflow_transform as tft

    values = np.full((4, 3, 2), 2.5, np.float32)
    got = _analyze(tmp_path / "z", [_batch(values)])
    assert got["statistics"] == {"f": (2.5, 0.0)}
    output = tft.TFTransformOutput(str(got["out"]))
    x = tf.constant(np.full((1, 3, 2), 4.0, np.float32))
    z = output.transform_raw_features({"class": tf.constant([b"a"]), "f": x})
    np.testing.assert_array_equal(z["f_norm"].numpy(), np.full((1, 3, 2), 1.5, np.float32))
