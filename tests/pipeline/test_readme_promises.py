"""Promises of the README and docs/ that only a real record run can show, each against an
expectation computed here from the docs' own words (not from a reference run of the same code):

- the element table -> the `schema.pbtxt` the job writes (tensorflow_metadata, annotation tags);
- "Shard count: ... one per 128 MiB of estimated output";
- "each shard holds its windows in (index, win_start_idx, channel) order";
- the Beam counters files_read, files_failed, bytes_written, shards_written;
- `--no_normalize` -> no `<feature>_norm` key anywhere (records, manifest, schemas, transform);
- features of files with different sample rates -> values of the float64 reference at each
  file's own rate, and the serving graph: `feature_fn/` reproduces the stored features when the
  dataset has one rate, and is not written (load_transform refuses, naming why) when it has several.

Two recordings, one per configuration: the README's quick-start command (tests/conftest.py's
`sample_run`), and a mixed-rate corpus (16, 22.05 and 64 kHz; 16- and 24-bit; two broken files).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.signal
import soundfile as sf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from tests.support.feature_reference import assert_within_stated_bound, reference_features
from tests.support.record_helpers import (
    SAMPLE_DIR,
    TUG_WAV,
    load_manifest,
    read_records,
    read_records_by_shard,
    record,
)
from transforms.audio.features import FeatureConfig

pytestmark = pytest.mark.slow

SHARD_TARGET_BYTES = 128 << 20  # docs/output-layout.md: "one per 128 MiB of estimated output"
SAMPLE_WIN_LEN = 16000  # the README's command
# docs/options.md defaults: frame_length 400, frame_step 160, fft_length 512, 64 mel bins, 13 MFCCs.
FRAME_LENGTH, FRAME_STEP, FFT_LENGTH, MEL_BINS, MFCCS = 400, 160, 512, 64, 13

MIXED_WIN_LEN, MIXED_HOP = 8000, 6000
MIXED_FEATURES = ("spectrogram", "log_mel", "mfcc")
MIXED_SHARDS = 3
# file name -> (sample rate, full scale of its format: 2^15 for 16-bit, 2^23 for 24-bit)
MIXED_FILES = {
    **{p.name: (16000, 2.0**15) for p in sorted(SAMPLE_DIR.glob("*.wav"))},
    TUG_WAV.name: (64000, 2.0**23),
    "resampled_22k_tug.wav": (22050, 2.0**15),
}
REFUSED = "header_noise.wav"  # no WAV header: refused at planning, never read
CORRUPT = "corrupt_frames.flac"  # a valid FLAC header, then zeroed frames: fails while read


def _frames(win_len: int) -> int:
    return 1 + (win_len - FRAME_LENGTH) // FRAME_STEP


def _shards(out: Path) -> list[tuple[str, int]]:
    """(file name, num_examples) of every shard the manifest lists, in order."""
    manifest = load_manifest(out)
    return [
        (s["filename"], s["num_examples"])
        for sp in manifest["splits"].values()
        for s in sp["shards"]
    ]


@pytest.fixture(scope="session")
def mixed_run(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("mixed")
    corpus = root / "in"
    corpus.mkdir()
    for path in SAMPLE_DIR.glob("*.wav"):
        shutil.copy(path, corpus / path.name)
    shutil.copy(TUG_WAV, corpus / TUG_WAV.name)
    tug, _ = sf.read(TUG_WAV, dtype="float64")
    resampled = scipy.signal.resample_poly(tug, 441, 1280)  # 64 kHz -> 22.05 kHz
    sf.write(corpus / "resampled_22k_tug.wav", resampled, 22050, subtype="PCM_16")
    (corpus / REFUSED).write_bytes(b"RIFF\x10\x00\x00\x00WAVEnot a wav file")
    sf.write(corpus / CORRUPT, resampled[:48000], 22050, subtype="PCM_16")
    flac = bytearray((corpus / CORRUPT).read_bytes())
    flac[len(flac) // 2 : len(flac) // 2 + 2000] = bytes(2000)  # libsndfile: "lost sync"
    (corpus / CORRUPT).write_bytes(bytes(flac))
    out = root / "out"
    args = ["--win_len", str(MIXED_WIN_LEN), "--hop_len", str(MIXED_HOP)]
    args += ["--features", ",".join(MIXED_FEATURES), "--num_shards", str(MIXED_SHARDS)]
    summary = record(str(corpus / "*.{wav,flac}"), out, *args, "--no_normalize")
    return {"in": corpus, "out": out, "summary": summary}


# --- the README's element table -> schema.pbtxt ------------------------------------------------


def _readme_elements(win_len: int, features: dict[str, int]) -> dict[str, tuple[str, tuple, str]]:
    """{key: (dtype, shape, encoding)} from the README's element table and the storage notes of
    docs/output-layout.md (format version 2): `signal` and every float tensor one bytes value of
    little-endian values, scalars one-element lists (strings bytes lists), `<feature>_norm` not
    stored (encoding z_score: computed by the reader)."""
    scalars = {"class": "string", "target": "int64", "num_classes": "int64", "filepath": "string"}
    scalars |= {"index": "int64", "win_start_idx": "int64", "sample_rate": "int64"}
    want = {k: (d, (), "bytes_list" if d == "string" else "int64_list") for k, d in scalars.items()}
    want["signal"] = ("int16", (win_len,), "raw")
    for name, bins in features.items():
        encoding = "z_score" if name.endswith("_norm") else "raw"
        want[name] = ("float32", (_frames(win_len), bins), encoding)
    return want


def _schema(path: Path) -> schema_pb2.Schema:
    return text_format.Parse(path.read_text(), schema_pb2.Schema())


def test_schema_pbtxt_says_what_the_readme_table_says(sample_dataset):
    schema = _schema(sample_dataset / "schema.pbtxt")
    want = _readme_elements(SAMPLE_WIN_LEN, {"log_mel": MEL_BINS, "log_mel_norm": MEL_BINS})
    kinds = {"bytes_list": schema_pb2.BYTES, "raw": schema_pb2.BYTES}
    kinds |= {"int64_list": schema_pb2.INT, "float_list": schema_pb2.FLOAT}
    stored_keys = [k for k, v in want.items() if v[2] != "z_score"]  # what the records hold
    assert sorted(f.name for f in schema.feature) == sorted(stored_keys)
    for feature in schema.feature:
        dtype, shape, encoding = want[feature.name]
        tags = list(feature.annotation.tag)
        assert tags == [
            f"dtype:{dtype}",
            "shape:" + ",".join(map(str, shape)),
            f"encoding:{encoding}",
        ]
        assert feature.type == kinds[encoding], feature.name
        stored = (1,) if encoding == "raw" else shape  # raw samples: one bytes value
        assert feature.HasField("shape") and tuple(d.size for d in feature.shape.dim) == stored
        assert feature.presence.min_fraction == 1.0, feature.name
    manifest = load_manifest(sample_dataset)  # the manifest says the same
    got = {
        k: (s["dtype"], tuple(s["shape"]), s["encoding"]) for k, s in manifest["elements"].items()
    }
    assert got == want
    assert manifest["elements"]["log_mel_norm"]["source"] == "log_mel"


# --- shard count, order inside a shard, counters ----------------------------------------------


def test_default_shard_count_is_one_per_128_mib_of_output(sample_run):
    """18 windows of int16 [16000] + log_mel float32 [98, 64] (log_mel_norm not stored): 1 MB."""
    windows = sum(len(sf.read(p)[0]) // SAMPLE_WIN_LEN for p in SAMPLE_DIR.glob("*.wav"))
    per_window = SAMPLE_WIN_LEN * 2 + _frames(SAMPLE_WIN_LEN) * MEL_BINS * 4
    assert len(_shards(sample_run["out"])) == math.ceil(windows * per_window / SHARD_TARGET_BYTES)
    # (the multi-shard case, 2,636 windows -> 3 shards: tests/reliability/test_reliability_large.py)


def test_each_shard_holds_its_windows_in_index_start_channel_order(mixed_run):
    shards = [
        [(int(r["index"]), int(r["win_start_idx"]), int(r.get("channel", 0))) for r in records]
        for records in read_records_by_shard(mixed_run["out"]).values()
    ]
    assert len(shards) == MIXED_SHARDS and all(shards), [len(s) for s in shards]
    for shard in shards:
        assert shard == sorted(shard)
    # ... and the shards are a partition of every window, spread by hash (not file order)
    every = sorted(k for shard in shards for k in shard)
    assert len(set(every)) == len(every)
    assert any(shard != every[: len(shard)] for shard in shards)


def _expected_windows(path: Path) -> int:
    frames = sf.info(str(path)).frames
    return 0 if frames < MIXED_WIN_LEN else 1 + (frames - MIXED_WIN_LEN) // MIXED_HOP


def test_counters_match_the_inputs_and_outputs(mixed_run):
    counters, out = mixed_run["summary"].counters, mixed_run["out"]
    decodable = [mixed_run["in"] / name for name in MIXED_FILES]
    assert counters["files_read"] == len(decodable)
    # files_failed counts every failed file: CORRUPT (read stage) and REFUSED (header refused
    # at planning), as the summary line and the manifest's errors do.
    assert counters["files_failed"] == mixed_run["summary"].num_failed == 2
    assert counters["windows"] == sum(_expected_windows(p) for p in decodable)
    shard_files = sorted(out.glob("*.tfrecord-*"))
    assert counters["shards_written"] == len(shard_files) == MIXED_SHARDS
    assert counters["bytes_written"] == sum(p.stat().st_size for p in shard_files)
    errors = sorted(e["path"] for e in load_manifest(out)["errors"])
    assert errors == [str(mixed_run["in"] / CORRUPT), str(mixed_run["in"] / REFUSED)]


# --- --no_normalize ----------------------------------------------------------------------------


def test_no_normalize_leaves_no_norm_key_anywhere(mixed_run):
    import tensorflow_transform as tft

    from replay import replay_dataset

    out = mixed_run["out"]
    manifest = load_manifest(out)
    records = read_records(out)
    schemas = {}
    for name in ("schema.pbtxt", "metadata/schema.pbtxt", "transformed_metadata/schema.pbtxt"):
        schemas[name] = {f.name for f in _schema(out / name).feature}
    output = tft.TFTransformOutput(str(out))
    raw_spec = output.raw_feature_spec()
    # The shards store features as raw bytes (format version 2): the graph's inputs come from
    # replay, as docs/output-layout.md says.
    batch = next(iter(replay_dataset(out, features=list(raw_spec), batch_size=4)))
    transformed = output.transform_raw_features(batch)
    key_sets = {
        "manifest elements": set(manifest["elements"]),
        "records": set(records[0]),
        **schemas,
        "transformed feature spec": set(output.transformed_feature_spec()),
        "transform outputs": set(transformed),
    }
    for where, keys in key_sets.items():
        assert not [k for k in keys if k.endswith("_norm")], (where, sorted(keys))
    assert set(MIXED_FEATURES) <= set(records[0]) and set(MIXED_FEATURES) <= schemas["schema.pbtxt"]


# --- features at several sample rates, and the serving graph -------------------------------------


def _config(names) -> FeatureConfig:
    return FeatureConfig(names=tuple(names))  # docs/options.md defaults for every parameter


def test_mixed_rate_features_match_the_float64_reference_at_each_files_rate(mixed_run):
    records = read_records(mixed_run["out"])
    by_file: dict[str, list[dict]] = {}
    for r in records:
        by_file.setdefault(Path(r["filepath"]).name, []).append(r)
    assert set(by_file) == set(MIXED_FILES)
    config = _config(MIXED_FEATURES)
    for name, rows in by_file.items():
        rate, full_scale = MIXED_FILES[name]
        assert {int(r["sample_rate"]) for r in rows} == {rate}
        waveforms = np.stack([r["signal"] for r in rows]).astype(np.float64) / full_scale
        reference = reference_features(waveforms, sample_rate=rate, config=config)
        got = {f: np.stack([r[f] for r in rows]) for f in MIXED_FEATURES}
        assert_within_stated_bound(got, reference, config=config, what=name)


def test_mixed_rates_have_no_serving_graph_and_load_transform_says_why(mixed_run):
    from replay import ReplayError, load_transform

    assert not (mixed_run["out"] / "feature_fn").exists()
    with pytest.raises(
        ReplayError, match="no single serving transform: files differ in sample rate"
    ):
        load_transform(mixed_run["out"])


def test_feature_fn_reproduces_the_stored_features_of_a_one_rate_dataset(sample_dataset):
    """The serving graph, loaded with plain tf.saved_model.load, on the stored int16 windows."""
    import tensorflow as tf

    records = read_records(sample_dataset)
    waveforms = np.stack([r["signal"] for r in records]).astype(np.float32) / 2.0**15
    reference = reference_features(waveforms, sample_rate=16000, config=_config(["log_mel"]))
    served = tf.saved_model.load(str(sample_dataset / "feature_fn"))(tf.constant(waveforms))
    assert list(served) == ["log_mel"]
    config = _config(["log_mel"])
    assert_within_stated_bound(
        {"log_mel": served["log_mel"].numpy()}, reference, config=config, what="feature_fn"
    )
    stored = {"log_mel": np.stack([r["log_mel"] for r in records])}
    assert_within_stated_bound(stored, reference, config=config, what="stored")
