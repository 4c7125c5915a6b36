"""Format version 2 against version 1 as the v1 code really wrote it (tests/fixtures/v1_dataset).

The same input and options recorded by today's code (format version 3 since: version 2's records,
with the source tables beside the manifest; "v2" below is that run): every key the v1 dataset
holds replays from v2, in fewer bytes: samples, labels and ids bit for bit; float features and
``<feature>_norm`` (v2 computes it in the reader from the statistics in the manifest; v1 stored
TFT's output) within the cross-CPU bound of tests/support/floats.py, since the v1 fixture was
written on another machine. The reader returns the v1 files' stored floats bit for bit. The v1
dataset still reads, verifies and inspects. ``--feature_dtype float16 / bfloat16`` stay within their
error bounds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from replay import format as fmt
from tests.support.floats import assert_close_across_cpus, bits, scale_bound
from tests.support.record_helpers import SAMPLE_DIR, load_manifest, read_records, record

pytestmark = pytest.mark.slow
V1_DATASET = Path(__file__).resolve().parents[1] / "fixtures" / "v1_dataset"
# The command that wrote V1_DATASET (its README), minus the output directory.
V1_ARGS = ("--win_len", "4000", "--max_elements", "4", "--features", "log_mel,mfcc")
FEATURES = ("log_mel", "mfcc")


def _record(tmp_path_factory, *extra: str) -> Path:
    out = tmp_path_factory.mktemp("v2") / "out"
    record(str(SAMPLE_DIR / "*.wav"), out, *V1_ARGS, *extra)
    return out


@pytest.fixture(scope="module")
def v2(tmp_path_factory) -> Path:
    return _record(tmp_path_factory)


def _replayed(path: Path, features=None) -> dict[tuple[int, int], dict]:
    """Every element by (index, win_start_idx), as numpy, read by `replay_dataset`."""
    from replay import replay_dataset

    out = {}
    for batch in replay_dataset(path, features=features, batch_size=3, deterministic=True):
        rows = {k: v.numpy() for k, v in batch.items()}
        for i in range(len(next(iter(rows.values())))):
            row = {k: v[i] for k, v in rows.items()}
            out[len(out)] = row
    return out


def _by_window(elements: dict) -> dict[tuple[int, int], dict]:
    return {(int(e["index"]), int(e["win_start_idx"])): e for e in elements.values()}


def test_v2_replays_what_v1_stored_in_fewer_bytes(v2):
    """Samples, labels and ids bit for bit; float features within the cross-CPU bound.

    The v1 fixture was written on another machine: its features and `_norm` copies may differ
    from today's by a few ulps (tests/support/floats.py). What the reader returns of the v1 files
    is compared bit for bit with their stored values in the next test.
    """
    from replay import load_info

    v1_info, v2_info = load_info(V1_DATASET), load_info(v2)
    assert (v1_info.format_version, v2_info.format_version) == (
        1,
        fmt.FORMAT_VERSION,
    )  # v2's records
    assert {k: (s.dtype, s.shape) for k, s in v2_info.elements.items()} == {
        k: (s.dtype, s.shape) for k, s in v1_info.elements.items()
    }  # what the user sees: same keys, in the same order, dtypes and shapes
    assert list(v2_info.elements) == list(v1_info.elements)
    old, new = _by_window(_replayed(V1_DATASET)), _by_window(_replayed(v2))
    assert sorted(old) == sorted(new) and len(old) == 4
    for window, element in old.items():
        assert set(new[window]) == set(element)
        for key, value in element.items():
            if key == fmt.FILEPATH_KEY:  # the fixture was recorded from a relative pattern
                assert Path(new[window][key].decode()).name == Path(value.decode()).name
            elif key in FEATURES:
                assert_close_across_cpus(new[window][key], value, err_msg=key)
            elif key.endswith("_norm"):  # (x - mean) / std, all three from the features
                source = key.removesuffix("_norm")
                dx = scale_bound(element[source]) / np.sqrt(v2_info.elements[key].z_score.var)
                # dx / std through x, through the mean, and |z| dx / std through the std
                bound = dx * (2 + np.abs(value)) + scale_bound(value)
                error = np.abs(new[window][key].astype(np.float64) - value)
                assert np.all(error <= bound), (key, float(np.max(error / bound)))
            else:  # signal (bit-exact everywhere), class, target, ids
                np.testing.assert_array_equal(new[window][key], value, err_msg=key)
    v1_bytes = v1_info.shard_list()[0].num_bytes
    v2_bytes = v2_info.shard_list()[0].num_bytes
    # The norm copies are gone: per window 8,000 signal bytes + 2 x 7,064 feature bytes in v1
    # (float_list), 8,000 + 7,064 in v2 (raw): 0.68 of the bytes.
    assert v2_bytes < 0.7 * v1_bytes, (v1_bytes, v2_bytes)


def test_v1_floats_replay_bit_for_bit_as_stored():
    """What the v1 files hold, read by plain tf.data, is what `replay_dataset` returns."""
    stored = {(int(r["index"]), int(r["win_start_idx"])): r for r in read_records(V1_DATASET)}
    replayed = _by_window(_replayed(V1_DATASET))
    assert sorted(stored) == sorted(replayed) and len(stored) == 4
    for window, element in replayed.items():
        for name in FEATURES:
            for key in (name, name + "_norm"):
                np.testing.assert_array_equal(
                    bits(element[key]), bits(stored[window][key]), err_msg=key
                )


def test_v2_manifest_stores_features_raw_and_the_statistics_float32_exact(v2):
    manifest = load_manifest(v2)
    assert manifest["format_version"] == fmt.FORMAT_VERSION >= 2  # version 2's element specs
    v1 = json.loads((V1_DATASET / "manifest.json").read_text())
    for name in FEATURES:
        assert manifest["elements"][name] == {**v1["elements"][name], "encoding": "raw"}
        norm = manifest["elements"][name + "_norm"]
        assert norm["encoding"] == "z_score" and norm["source"] == name
        for stat in ("mean", "var"):
            assert float(np.float32(norm[stat])) == norm[stat]  # exact in JSON
        assert norm["var"] > 0
    schema = (v2 / "schema.pbtxt").read_text()  # the stored records' keys only
    assert 'name: "log_mel"' in schema and "log_mel_norm" not in schema
    # The helper that reads shards without replay (numpy z-score) agrees with replay.
    records = {(int(r["index"]), int(r["win_start_idx"])): r for r in read_records(v2)}
    for window, element in _by_window(_replayed(v2)).items():
        for key in ("log_mel_norm", "mfcc_norm", "signal"):
            np.testing.assert_array_equal(records[window][key], element[key], err_msg=key)


def test_only_the_requested_keys_are_parsed_and_norm_alone_works(v2):
    from replay import load_info
    from replay.parsing import batch_parser, feature_description, stored_specs

    info = load_info(v2)
    wanted = info.select_features(["log_mel_norm", "target"])
    stored = stored_specs(wanted, info.elements)
    assert set(feature_description(stored)) == {"log_mel", "target"}  # the source, not signal
    full = _replayed(v2)  # deterministic: the same order both times
    some = _replayed(v2, features=["log_mel_norm", "target"])
    assert len(some) == len(full) == 4
    for i, element in some.items():
        assert set(element) == {"log_mel_norm", "target"}
        assert element["target"] == full[i]["target"]
        np.testing.assert_array_equal(bits(element["log_mel_norm"]), bits(full[i]["log_mel_norm"]))
    parse = batch_parser(wanted, info.elements)
    assert set(parse(np.array([], dtype=object).astype(bytes))) == {"log_mel_norm", "target"}


def test_both_versions_verify_and_inspect(v2, tmp_path, capsys):
    from pipelines import inspect as inspect_cli
    from pipelines import verify as verify_cli
    from replay import verify_dataset

    v1 = tmp_path / "v1"
    shutil.copytree(V1_DATASET, v1)
    for path in (v1, v2):
        assert verify_dataset(path).num_examples() == 4
        assert verify_cli.run([str(path)]) == 0  # decodes every key, log_mel_norm included
        assert inspect_cli.run([str(path)]) == 0
        assert "log_mel_norm" in capsys.readouterr().out


@pytest.mark.parametrize(
    "dtype, relative",
    [("float16", 2.0**-11), ("bfloat16", 2.0**-8)],  # half an ulp: 2^-(mantissa bits + 1)
)
def test_feature_dtype_halves_features_within_the_error_bound(
    tmp_path_factory, v2, dtype, relative
):
    from replay import load_info

    narrow = _record(tmp_path_factory, "--feature_dtype", dtype)
    info = load_info(narrow)
    assert info.elements["log_mel"].stored_dtype == dtype
    assert info.tensor_specs()["log_mel"].dtype.name == "float32"  # read back as float32
    exact, rounded = _by_window(_replayed(v2)), _by_window(_replayed(narrow))
    smallest = 2.0**-14 if dtype == "float16" else 2.0**-126  # smallest normal value
    for window, element in exact.items():
        np.testing.assert_array_equal(rounded[window]["signal"], element["signal"])
        for name in FEATURES:
            x, y = element[name], rounded[window][name]
            bound = np.maximum(np.abs(x) * relative, smallest * relative)
            assert np.all(np.abs(y - x) <= bound), (name, np.max(np.abs(y - x) / bound))
            # the z-score of a rounded x: the same statistics, so the error is |dx| / std
            spec = info.elements[name + "_norm"].z_score
            norm_bound = bound / np.sqrt(spec.var) + 2.0**-22 * np.abs(element[name + "_norm"])
            norm_error = np.abs(rounded[window][name + "_norm"] - element[name + "_norm"])
            assert np.all(norm_error <= norm_bound + 1e-7), name
    v2_bytes = load_info(v2).shard_list()[0].num_bytes
    assert info.shard_list()[0].num_bytes < 0.85 * v2_bytes  # 2 of 4 bytes a feature value


def test_float16_refuses_values_beyond_its_range():
    import pyarrow as pa

    from transforms.stages.examples import raw_float_rows

    column = pa.array([[1.0, 70000.0], [2.0, 3.0]], pa.list_(pa.float32()))
    with pytest.raises(ValueError, match="spectrogram holds 70000, beyond float16's range"):
        raw_float_rows("spectrogram", column, stored_dtype="float16")
    ok = raw_float_rows("spectrogram", column, stored_dtype="bfloat16")
    assert len(ok[0].as_py()[0]) == 4  # two bfloat16 values
    assert np.frombuffer(ok[1].as_py()[0], "<f2").tolist() != [2.0, 3.0]  # not float16 bytes


def test_z_score_is_the_graphs_in_every_tensorflow_context(v2):
    """Eager, inside a tf.function (Grappler rewrites a division by a constant there) and in a
    tf.data map, the reader's z-score has the transform graph's bits."""
    import tensorflow as tf

    from replay import load_info
    from replay.parsing import z_score

    info = load_info(v2)
    rng = np.random.default_rng(0)
    x = {
        name: rng.normal(1, 5, (8, *info.elements[name].shape)).astype(np.float32)
        for name in FEATURES
    }
    transform = tf.saved_model.load(str(v2 / fmt.TRANSFORM_FN_DIR))
    graph = transform.transform_fn({"class": tf.constant([b"bird"] * 8), **x})
    for name in FEATURES:
        stats = info.elements[name + "_norm"].z_score
        fn = lambda v, s=stats: z_score(v, mean=s.mean, var=s.var)  # noqa: E731
        want = bits(graph[name + "_norm"].numpy())
        mapped = next(iter(tf.data.Dataset.from_tensors(x[name]).map(fn)))
        for got in (fn(tf.constant(x[name])), tf.function(fn)(tf.constant(x[name])), mapped):
            np.testing.assert_array_equal(bits(got.numpy()), want, err_msg=name)
