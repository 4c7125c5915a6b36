"""`replay_dataset` on what the record job itself wrote (`recorded`: tiny WAV files recorded once
per session with each ``--feature_dtype``, tests/support/replay_recorded.py): the decoded values
are checked against numpy, the stored bytes, the z-score and the rounding recomputed
independently.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import replay
from replay import format as fmt
from replay import load_info, replay_dataset
from tests.support import replay_fixtures
from tests.support.floats import bits
from tests.support.replay_elements import collect
from tests.support.replay_fixtures import stored_values, write_dataset, write_manifest
from tests.support.replay_recorded import decode_raw, stored_records

# --- real record runs ------------------------------------------------------------------------


def _replayed(path) -> dict[tuple[int, int], dict]:
    """Every element `replay_dataset` decodes, by (index, win_start_idx)."""
    out = {}
    for batch in collect(replay_dataset(path, batch_size=3, deterministic=True)):
        for i in range(len(batch[fmt.INDEX_KEY])):
            element = {key: value[i] for key, value in batch.items()}
            out[int(element[fmt.INDEX_KEY]), int(element[fmt.WIN_START_KEY])] = element
    return out


def _stored(path) -> dict[tuple[int, int], dict]:
    """Every record as stored (protobuf, not `replay`), by (index, win_start_idx)."""
    return {(r[fmt.INDEX_KEY][0], r[fmt.WIN_START_KEY][0]): r for r in stored_records(path)}


def test_numpy_rounding_of_the_expected_values_is_to_nearest_even():
    """`stored_values`, which the expected float16 / bfloat16 features come from, pinned by
    hand: an exact tie goes to the even neighbour, anything past it to the nearest."""
    x = np.array([*replay_fixtures.BFLOAT16_TIES, -1 - 2.0**-8, 1 + 2.0**-8 + 2.0**-20], np.float32)
    assert stored_values(x, "bfloat16").tolist() == [1, 1 + 2.0**-6, -1, 1 + 2.0**-7]
    x = np.array([*replay_fixtures.FLOAT16_TIES, 1 + 2.0**-11 + 2.0**-20], np.float32)
    assert stored_values(x, "float16").tolist() == [1, 1 + 2.0**-9, 1 + 2.0**-10]


def _manifest(path) -> dict:
    with open(os.path.join(path, fmt.MANIFEST_FILENAME)) as f:
        return json.load(f)


def _table(path, filename: str) -> list[dict]:
    """A source table (format version 3) read with json alone."""
    with open(os.path.join(path, filename)) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("dtype", fmt.FEATURE_DTYPES)
def test_recorded_layout_is_version_3_and_the_hand_made_one_matches_it(recorded, tmp_path, dtype):
    """What the record job writes now: format version 3 (the source files in files.jsonl,
    none in the manifest), ``log_mel`` as raw bytes of `dtype` (2 or 4 bytes a value),
    ``log_mel_norm`` in no record but a z_score key of ``log_mel`` whose float32 statistics are
    in the manifest (as version 2); and `write_dataset` (the other tests' datasets) describes
    its keys and tables the same way."""
    path = recorded["runs"][dtype]
    manifest = _manifest(path)
    assert manifest["format_version"] == fmt.FORMAT_VERSION and not {"files", "errors"} & set(
        manifest
    )
    assert manifest["num_files"] == len(_table(path, fmt.FILES_TABLE)) == 4
    feature, norm = manifest["elements"]["log_mel"], manifest["elements"]["log_mel_norm"]
    assert feature["encoding"] == "raw" and feature.get("stored_dtype", "float32") == dtype
    assert norm["encoding"] == "z_score" and norm["source"] == "log_mel"
    assert norm["shape"] == feature["shape"] == [4, 8]
    for stat in ("mean", "var"):
        assert float(np.float32(norm[stat])) == norm[stat]  # a float32 value, exact in JSON
    records = stored_records(path)
    assert len(records) == manifest["num_examples"] == 8
    width = 4 if dtype == "float32" else 2
    for record in records:
        assert "log_mel_norm" not in record and len(record["log_mel"]) == 32 * width
    hand_made_manifest = write_dataset(tmp_path, feature_dtype=dtype)["manifest"]
    assert list(hand_made_manifest) == [k for k in manifest if k != "analyzed_splits"]
    hand_made = hand_made_manifest["elements"]
    own = {"signal": ("shape",), "log_mel": (), "log_mel_norm": ("mean", "var")}  # its data's
    for key, differ in own.items():
        written = {k: v for k, v in manifest["elements"][key].items() if k not in differ}
        assert {k: v for k, v in hand_made[key].items() if k not in differ} == written, key


@pytest.mark.parametrize("dtype", fmt.FEATURE_DTYPES)
def test_recorded_norm_is_the_numpy_z_score_of_the_stored_feature(recorded, dtype):
    """`replay_dataset` on the record job's output: ``signal`` is the WAV file's samples bit
    for bit; ``log_mel`` is the stored bytes decoded in numpy (float16 with numpy's float16,
    bfloat16 by shifting its 16 bits into a float32); ``log_mel_norm`` is
    ``(log_mel - mean) / sqrt(var)`` computed in numpy float32 from those values and the
    manifest's statistics. Bit-equal: both sides compute it in this run on this machine, from
    the same float32 inputs, with correctly rounded IEEE float32 operations."""
    path = recorded["runs"][dtype]
    manifest = _manifest(path)
    spec = manifest["elements"]["log_mel_norm"]
    mean, var = np.float32(spec["mean"]), np.float32(spec["var"])
    assert abs(np.sqrt(var) - 1) > 0.1  # a z-score without its division cannot pass
    files = {f["index"]: f["path"] for f in _table(path, fmt.FILES_TABLE)}
    stored, replayed = _stored(path), _replayed(path)
    assert sorted(replayed) == sorted(stored) and len(stored) == 8
    for window, element in replayed.items():
        index, start = window
        samples = recorded["samples"][files[index]][start : start + 1024]
        np.testing.assert_array_equal(element["signal"], samples)
        assert element["signal"].dtype == np.int16
        feature = decode_raw(stored[window]["log_mel"], manifest["elements"]["log_mel"])
        assert element["log_mel"].dtype == element["log_mel_norm"].dtype == np.float32
        np.testing.assert_array_equal(bits(element["log_mel"]), bits(feature))
        want = (feature - mean) / np.sqrt(var)
        assert want.dtype == np.float32
        np.testing.assert_array_equal(bits(element["log_mel_norm"]), bits(want))


@pytest.mark.parametrize("dtype", fmt.STORED_DTYPES)
def test_recorded_narrow_features_are_the_writers_values_rounded(recorded, dtype):
    """``--feature_dtype float16 / bfloat16`` features read back as the float32 features of
    the float32 run (the values the writer was given: same input, computed in this session on
    this machine) rounded to nearest even by numpy (`stored_values`: numpy's float16, or the
    bfloat16 bit rounding the writer's ml_dtypes does); the z-score statistics are those of
    the float32 features in both runs."""
    exact, narrow = recorded["runs"]["float32"], recorded["runs"][dtype]
    assert (
        _manifest(narrow)["elements"]["log_mel_norm"]
        == _manifest(exact)["elements"]["log_mel_norm"]
    )
    given, got = _replayed(exact), _replayed(narrow)
    assert sorted(got) == sorted(given) and len(got) == 8
    rounded = 0
    for window, element in given.items():
        want = stored_values(element["log_mel"], dtype)
        np.testing.assert_array_equal(bits(got[window]["log_mel"]), bits(want), err_msg=window)
        rounded += int(np.sum(want != element["log_mel"]))
    assert rounded > 8 * 32 // 2  # most values are not representable: the rounding is tested


@pytest.mark.parametrize(("key", "shape"), [("log_mel_norm", [3, 5]), ("log_mel", [2, 16])])
def test_recorded_manifest_with_norm_shape_unlike_its_feature_is_refused(
    recorded, tmp_path, key, shape
):
    """A z_score key must have its source's shape: a manifest claiming ``log_mel_norm`` [3, 5]
    (or ``log_mel`` [2, 16], the same 32 values) next to a [4, 8] feature is refused before
    anything is read, naming the manifest, the key, its source and both shapes."""
    path = tmp_path / "dataset"
    shutil.copytree(recorded["runs"]["float32"], path)
    manifest = _manifest(path)
    manifest["elements"][key]["shape"] = shape
    write_manifest(path, manifest)
    norm_shape = manifest["elements"]["log_mel_norm"]["shape"]
    feature_shape = manifest["elements"]["log_mel"]["shape"]
    with pytest.raises(replay.ManifestError) as e:
        load_info(path)
    message = str(e.value)
    assert message.startswith(f"{path / fmt.MANIFEST_FILENAME}: elements.log_mel_norm"), message
    assert "'log_mel'" in message and str(norm_shape) in message, message
    assert f"(it is 'float32' {feature_shape})" in message, message  # both shapes named
    with pytest.raises(replay.ManifestError, match="log_mel_norm"):
        replay_dataset(path)
