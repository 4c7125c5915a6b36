"""End-to-end record pipeline on the DirectRunner: every WAV format, the real recording, bad files.

Shards are read back with plain tf.data (tests/support/record_helpers.py) and compared against an
independent decoder (tests/wavgen.expected_samples: scipy / stdlib wave), window by window.
"""

from __future__ import annotations

import collections
import math
from pathlib import Path

import numpy as np
import pytest

from tests.support import wavgen
from tests.support.feature_reference import assert_within_stated_bound, reference_features
from tests.support.record_helpers import (
    copy_tug,
    load_manifest,
    read_records,
    record,
    without_times,
)

WIN = 4096
RUN_ARGS = ("--win_len", str(WIN), "--features", "log_mel,mfcc,spectrogram", "--num_shards", "3")

pytestmark = pytest.mark.slow


def _expected_count(num_frames: int, *, win: int, hop: int, pad: bool) -> int:
    if pad:
        return math.ceil(num_frames / hop) if num_frames else 0
    return 0 if num_frames < win else 1 + (num_frames - win) // hop


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("corpus")
    good = wavgen.make_format_corpus(root / "good", num_frames=20000, sample_rate=16000)
    broken = wavgen.make_broken_corpus(root / "broken")
    tug = copy_tug(root / "good")
    short = wavgen.write_wav(
        root / "good" / "tiny_short.wav", wavgen.synth(1000), sample_rate=16000, subtype="PCM_16"
    )
    return {"root": root, "good": good, "broken": broken, "tug": tug, "short": short}


@pytest.fixture(scope="module")
def recorded(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "out"
    record(str(corpus["root"] / "**" / "*.wav"), out, *RUN_ARGS)
    return out


def test_every_input_file_is_in_the_records_or_the_error_list(corpus, recorded):
    manifest = load_manifest(recorded)
    decoded = {f["path"] for f in manifest["files"]}
    failed = {e["path"] for e in manifest["errors"]}
    matched = {str(p) for p in Path(corpus["root"]).rglob("*.wav")}
    assert decoded | failed == matched
    assert not decoded & failed
    for name, (path, reason) in corpus["broken"].items():
        entry = [e for e in manifest["errors"] if e["path"] == str(path)]
        assert entry, f"{name} not in the error list"
        assert reason in entry[0]["reason"], (name, entry[0]["reason"])


def test_windows_are_bit_exact_and_counted_by_the_rule(corpus, recorded):
    manifest = load_manifest(recorded)
    records = read_records(recorded)
    assert len(records) == manifest["num_examples"]
    by_file = collections.defaultdict(list)
    for r in records:
        by_file[r["filepath"]].append(r)
    dtype = np.dtype(manifest["elements"]["signal"]["dtype"])
    for f in manifest["files"]:
        expected = wavgen.expected_samples(f["path"])[:, 0]
        windows = sorted(by_file[f["path"]], key=lambda r: r["win_start_idx"])
        want = _expected_count(len(expected), win=WIN, hop=WIN, pad=False)
        assert len(windows) == want == f["num_windows"], f["path"]
        for i, w in enumerate(windows):
            start = w["win_start_idx"]
            assert start == i * WIN
            assert w["signal"].dtype == dtype
            np.testing.assert_array_equal(
                w["signal"], expected[start : start + WIN].astype(dtype), err_msg=f["path"]
            )
            assert w["index"] == f["index"]
            assert w["sample_rate"] == f["sample_rate"]
            assert w["class"] == f["label"]
    assert (
        manifest["files"][[f["path"] for f in manifest["files"]].index(str(corpus["short"]))][
            "num_windows"
        ]
        == 0
    )


def test_real_recording_keeps_24_bit_integer_values(corpus, tmp_path):
    out = tmp_path / "tug"
    record(str(corpus["tug"]), out, "--win_len", "32768", "--features", "none")
    manifest = load_manifest(out)
    assert manifest["elements"]["signal"]["dtype"] == "int32"
    records = sorted(read_records(out), key=lambda r: r["win_start_idx"])
    expected = wavgen.expected_samples(corpus["tug"])[:, 0]
    assert len(expected) == 320_000  # the 5 s excerpt in tests/fixtures/audio
    assert len(records) == 320_000 // 32768
    for r in records:
        s = r["win_start_idx"]
        np.testing.assert_array_equal(r["signal"], expected[s : s + 32768])
        assert r["signal"].min() >= -(2**23) and r["signal"].max() < 2**23
        assert r["class"] == "tug" and r["sample_rate"] == 64000


def test_target_is_the_class_vocabulary_index(recorded):
    manifest = load_manifest(recorded)
    classes = manifest["classes"]
    paths = [f["path"] for f in manifest["files"]] + [e["path"] for e in manifest["errors"]]
    # Every file's label, sorted by name: known at planning, so a file that fails to decode or
    # has no window does not shift the ids of the others.
    assert classes == sorted({Path(p).stem.rsplit("_", 1)[-1] for p in paths})
    for r in read_records(recorded):
        assert classes[r["target"]] == r["class"]
        assert r["num_classes"] == len(classes)


def test_features_match_the_feature_functions_and_are_z_scored(recorded):
    """Pins the stored features against an independent float64 computation from their
    definitions (tests/support/feature_reference.py: numpy FFT, HTK mel bank, DCT-II), within
    the accuracy bound transforms/audio/features.py states, with the parameters of RUN_ARGS
    and the documented defaults written out; and ``<feature>_norm`` against a numpy z-score of
    the stored values (rtol / atol 1e-3: float32 statistics over the whole dataset)."""
    from transforms.audio.features import FeatureConfig

    manifest = load_manifest(recorded)
    config = FeatureConfig(  # RUN_ARGS' features; docs/options.md defaults for the rest
        names=("log_mel", "mfcc", "spectrogram"),
        frame_length=400,
        frame_step=160,
        fft_length=512,
        num_mel_bins=64,
        lower_edge_hz=20.0,
        upper_edge_hz=None,
        num_mfccs=13,
        log_offset=1e-6,
    )
    frames = 1 + (WIN - 400) // 160
    shapes = {"log_mel": [frames, 64], "mfcc": [frames, 13], "spectrogram": [frames, 257]}
    for name, shape in shapes.items():
        assert manifest["elements"][name] == {"dtype": "float32", "shape": shape, "encoding": "raw"}
    scale = {f["path"]: f["full_scale"] for f in manifest["files"]}
    records = read_records(recorded)
    rates = set()
    for r in records[:: max(1, len(records) // 40)]:
        waveform = (r["signal"].astype(np.float32) / np.float32(scale[r["filepath"]]))[None]
        rate = int(r["sample_rate"])
        rates.add(rate)
        want = reference_features(waveform, sample_rate=rate, config=config)
        got = {name: r[name][None] for name in config.names}
        assert_within_stated_bound(got, want, config=config, what=r["filepath"])
    assert rates == {16000, 64000}  # the synthetic corpus and the real 64 kHz recording
    for name in config.names:
        raw = np.stack([r[name] for r in records]).astype(np.float64)
        norm = np.stack([r[name + "_norm"] for r in records]).astype(np.float64)
        np.testing.assert_allclose(norm, (raw - raw.mean()) / raw.std(), rtol=1e-3, atol=1e-3)


def test_two_runs_give_identical_records(corpus, recorded, tmp_path):
    again = tmp_path / "again"
    record(str(corpus["root"] / "**" / "*.wav"), again, *RUN_ARGS)
    first, second = load_manifest(recorded), load_manifest(again)
    for m in (first, second):
        without_times(m)
        m["params"].pop("input_pattern")
        for commit in m.get("commits", ()):
            commit.pop("input_pattern")
    assert first == second
    for split in first["splits"].values():
        for shard in split["shards"]:
            name = shard["filename"]
            assert (recorded / name).read_bytes() == (again / name).read_bytes(), name


def test_pad_and_hop_and_max_windows(corpus, tmp_path):
    out = tmp_path / "pad"
    path = corpus["good"]["pcm16"]
    record(
        str(path),
        out,
        "--win_len",
        "3000",
        "--hop_len",
        "1000",
        "--pad",
        "--max_windows_per_signal",
        "15",
        "--features",
        "none",
    )
    expected = wavgen.expected_samples(path)[:, 0]
    records = sorted(read_records(out), key=lambda r: r["win_start_idx"])
    want = min(15, _expected_count(len(expected), win=3000, hop=1000, pad=True))
    assert len(records) == want
    padded = np.concatenate([expected, np.zeros(3000, expected.dtype)])
    for r in records:
        s = r["win_start_idx"]
        np.testing.assert_array_equal(r["signal"], padded[s : s + 3000])
