"""More promises of docs/ (options.md, output-layout.md, guarantees.md), each pinned by a real
record run on tiny generated files (read back with plain tf.data or `replay`), against
expectations computed here from the docs' words:

- `--feature_dtype float16`: an out-of-range file goes to `errors`; `stored_dtype:` schema tags;
- `--compression AUTO`: GZIP only when zlib halves the records, else NONE;
- `--channel_mode mean` on float32 files: the mean of the channels, not rounded;
- `python -m pipelines.record --help` lists every option and its default;
- Ogg Vorbis: `"lossy": true` with a `lossy_reason`, `signal` libsndfile's float32 decode;
- the reader's limits: a manifest over 1 GiB, an element of more than 2^28 values.

Annotation promises: test_readme_promises_annotations.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from tests.support.docs import page
from tests.support.feature_reference import reference_features
from tests.support.record_helpers import load_manifest, raw_manifest, read_records, record
from transforms.audio.features import FeatureConfig

ROOT = Path(__file__).resolve().parents[2]
OPTION_TABLES = page("options.md") + page("annotations.md")  # every option table of the docs
RATE = 8000
FLOAT16_MAX = 65504.0  # docs/options.md: "float16's range (±65504)"
LIMIT_VALUES = 2**28  # docs/guarantees.md, 8: "element shapes (positive, at most 2^28 values)"


def _wav(path: Path, samples: np.ndarray, subtype: str, rate: int = RATE) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), samples, rate, subtype=subtype)
    return str(path)


def _tone(seconds: float, hz: float = 440.0) -> np.ndarray:
    return np.sin(2 * np.pi * hz * np.arange(int(seconds * RATE)) / RATE)


def _serialized(out: Path) -> list[bytes]:
    """Every record of every shard, as stored (plain tf.data, the manifest's compression)."""
    import tensorflow as tf

    manifest = load_manifest(out)
    compression = "" if manifest["compression"] == "NONE" else manifest["compression"]
    shards = [str(out / s["filename"]) for sp in manifest["splits"].values() for s in sp["shards"]]
    return [r.numpy() for r in tf.data.TFRecordDataset(shards, compression_type=compression)]


# --- --feature_dtype float16: per-file range errors, and the schema's stored_dtype tag ----------


@pytest.fixture(scope="module")
def float16_run(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("float16")
    quiet = _wav(root / "in" / "a_quiet.wav", (0.3 * _tone(2) * 32767).astype(np.int16), "PCM_16")
    # IEEE float WAV may hold samples far beyond ±1.0: spectrogram magnitudes beyond 65504
    loud = _wav(root / "in" / "b_loud.wav", (1000.0 * _tone(2)).astype(np.float32), "FLOAT")
    out = root / "out"
    args = ["--win_len", str(RATE), "--features", "spectrogram,log_mel", "--feature_dtype"]
    summary = record(str(root / "in" / "*.wav"), out, *args, "float16")
    return {"out": out, "summary": summary, "quiet": quiet, "loud": loud}


@pytest.mark.slow
def test_float16_overflow_sends_the_file_to_errors_and_the_run_goes_on(float16_run):
    """options.md: "a file holding a value beyond float16's range (±65504) goes to `errors`"."""
    out, loud = float16_run["out"], float16_run["loud"]
    manifest = load_manifest(out)
    (error,) = manifest["errors"]
    assert error["path"] == loud
    reason = error["reason"]
    assert "\n" not in reason and reason.startswith("spectrogram: "), reason  # names the feature
    assert "float16" in reason and "log_mel" not in reason  # log-mel values are far inside it
    loud_windows = sf.read(loud, dtype="float64")[0].reshape(-1, RATE)  # full scale 1.0 (float)
    spectrogram = reference_features(
        loud_windows, sample_rate=RATE, config=FeatureConfig(names=("spectrogram",))
    )["spectrogram"]
    assert spectrogram.max() > FLOAT16_MAX
    assert float(reason.split()[1]) == pytest.approx(spectrogram.max(), rel=2e-5)  # the value
    # ... and the run went on: the other file is recorded whole, the summary counts one failure
    assert float16_run["summary"].num_failed == 1
    assert [f["path"] for f in manifest["files"]] == [float16_run["quiet"]]
    records = read_records(out)
    assert [r["filepath"] for r in records] == [float16_run["quiet"]] * 2
    assert manifest["num_examples"] == 2


@pytest.mark.slow
def test_schema_pbtxt_tags_float16_features_with_stored_dtype(float16_run):
    """docs/output-layout.md: schema.pbtxt's "annotation tags `dtype:`, ..., `stored_dtype:`"."""
    out = float16_run["out"]
    schema = text_format.Parse((out / "schema.pbtxt").read_text(), schema_pb2.Schema())
    tags = {f.name: list(f.annotation.tag) for f in schema.feature}
    frames = 1 + (RATE - 400) // 160  # docs/options.md defaults: frame_length 400, frame_step 160
    bins = {"spectrogram": 512 // 2 + 1, "log_mel": 64}  # fft_length 512, 64 mel bins
    for name, n in bins.items():
        assert tags[name] == [
            "dtype:float32",
            f"shape:{frames},{n}",
            "encoding:raw",
            "stored_dtype:float16",
        ]
    assert not [t for t in tags["signal"] if t.startswith("stored_dtype:")]  # int16 as it is
    # the tag says what the bytes are: two bytes a value, read back as float32
    import tensorflow as tf

    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in bins}
    for serialized in _serialized(out):
        parsed = tf.io.parse_single_example(serialized, spec)
        for name, n in bins.items():
            assert len(parsed[name].numpy()) == frames * n * 2
    for record_ in read_records(out):
        assert record_["log_mel"].dtype == np.float32
        assert np.isfinite(record_["spectrogram"]).all()


# --- --compression AUTO -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("content, chosen", [("silence", "GZIP"), ("noise", "NONE")])
def test_auto_compression_is_gzip_only_when_zlib_halves_the_records(tmp_path, content, chosen):
    """options.md --compression: "`AUTO`: GZIP only when zlib halves a sample of the records"."""
    rng = np.random.default_rng(0)
    for name in ("a_x.wav", "b_x.wav"):
        samples = rng.normal(0, 3000, 2 * RATE) if content == "noise" else np.zeros(2 * RATE)
        _wav(tmp_path / "in" / name, samples.astype(np.int16), "PCM_16")
    out = tmp_path / "out"
    summary = record(str(tmp_path / "in" / "*.wav"), out, "--win_len", str(RATE))
    manifest = load_manifest(out)
    assert manifest["params"]["compression"] == "AUTO"  # the default
    assert manifest["compression"] == chosen
    (shard,) = [s["filename"] for s in manifest["splits"]["all"]["shards"]]
    assert shard == "audiorecords.tfrecord-00000-of-00001" + (".gz" if chosen == "GZIP" else "")
    assert ((out / shard).read_bytes()[:2] == b"\x1f\x8b") == (chosen == "GZIP")  # gzip magic
    # plain tf.data with compression_type=manifest["compression"] reads every record back ...
    records = _serialized(out)
    assert len(records) == manifest["num_examples"] == summary.num_examples == 4
    raw = b"".join(records)
    saving = 1 - len(zlib.compress(raw, 1)) / len(raw)
    assert (saving >= 0.5) == (chosen == "GZIP"), saving  # ... and the rule holds for them
    elements = read_records(out)
    assert all((e["signal"] == 0).all() for e in elements) == (content == "silence")
    if chosen == "GZIP":
        from replay import replay_dataset

        assert len(list(replay_dataset(out, features=["signal"]))) == 4


# --- --channel_mode mean on float files ---------------------------------------------------------


@pytest.mark.slow
def test_channel_mode_mean_of_float32_channels_is_their_mean(tmp_path):
    """options.md --channel_mode: "`mean` of channels (rounded for integer formats)": not float."""
    win = RATE // 2
    rng = np.random.default_rng(1)
    samples = rng.uniform(-0.9, 0.9, (5 * win + 123, 3)).astype(np.float32)
    path = _wav(tmp_path / "in" / "a_x.wav", samples, "FLOAT")
    out = tmp_path / "out"
    args = ["--win_len", str(win), "--channel_mode", "mean", "--features", "none"]
    record(str(tmp_path / "in" / "*.wav"), out, *args)
    manifest = load_manifest(out)
    assert manifest["elements"]["signal"]["dtype"] == "float32"
    assert "channel" not in manifest["elements"]
    mean = samples.astype(np.float64).mean(axis=1).astype(np.float32)
    records = sorted(read_records(out), key=lambda r: r["win_start_idx"])
    assert [r["win_start_idx"] for r in records] == list(range(0, 5 * win, win))
    for r in records:
        assert r["filepath"] == path and r["signal"].dtype == np.float32
        start = r["win_start_idx"]
        np.testing.assert_array_equal(r["signal"], mean[start : start + win])
        assert not np.array_equal(r["signal"], samples[start : start + win, 0])
    assert not np.array_equal(mean, np.rint(mean))  # float means are not rounded


# --- --help ---------------------------------------------------------------------------------------

# Defaults of the docs' option tables (docs/options.md, docs/annotations.md), as --help shows.
DOCUMENTED_DEFAULTS = {
    "--win_len": "32768",
    "--hop_len": "win_len",
    "--label_source": "filename",
    "--channel_mode": "first",
    "--signal_dtype": "auto",
    "--features": "log_mel",
    "--feature_dtype": "float32",
    "--frame_length": "400",
    "--frame_step": "160",
    "--fft_length": "512",
    "--num_mel_bins": "64",
    "--lower_edge_hz": "20.0",
    "--upper_edge_hz": "rate/2",
    "--num_mfccs": "13",
    "--compression": "AUTO",
    "--dataset_name": "audiorecords",
    "--shard_by": "hash",
    "--unknown_class": "error",
    "--annotation_format": "auto",
    "--annotation_column": "Annotation",
    "--min_label_overlap": "0.25",
    "--min_label_fraction": "0.5",
    "--background_class": "background",
    "--event_windows": "grid",
    "--background_per_file": "0",
    "--background_seed": "0",
}


def _help_entries(text: str) -> dict[str, str]:
    """{--option: its help text, joined into one line} from argparse's options section."""
    entries: dict[str, str] = {}
    current = None
    for line in text.split("\noptions:\n", 1)[1].splitlines():
        m = re.match(r"  (--\w+)", line)
        if m:
            current = m.group(1)
            entries[current] = line[m.end() :].strip()
        elif line.startswith("    ") and current:
            entries[current] += " " + line.strip()
        else:
            current = None
    return {k: re.sub(r"^[A-Z_]+|^\{[^}]*\}", "", v).strip() for k, v in entries.items()}


def test_help_lists_every_option_with_its_default():
    """options.md: "`python -m pipelines.record --help` lists every option" and their defaults."""
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.record", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    entries = _help_entries(done.stdout)
    tables = re.findall(r"^\| ((?:`--\w+`(?: / )?)+) \|", OPTION_TABLES, flags=re.M)
    documented = {flag for row in tables for flag in re.findall(r"`(--\w+)`", row)}
    documented -= {"--runner"}  # "any standard Beam pipeline option"
    assert len(documented) > 40 and documented <= set(entries), documented - set(entries)
    for flag, default in DOCUMENTED_DEFAULTS.items():
        assert f"(default {default})" in entries[flag], (flag, entries[flag])
    for flag in ("--input_pattern", "--output_dir"):
        assert entries[flag].endswith("(required)")
    assert "by size" in entries["--num_shards"]  # docs/options.md: "by size"
    assert "Beam pipeline option" in done.stdout  # "[Beam options]"


# --- Ogg Vorbis: lossy, lossy_reason ------------------------------------------------------------


@pytest.mark.slow
def test_vorbis_files_entry_says_lossy_with_a_lossy_reason(tmp_path):
    """options.md: Vorbis "`signal` is libsndfile's float32 decode ... with a `lossy_reason`"."""
    rate, win = 16000, 4000
    tone = 0.5 * np.sin(2 * np.pi * 440 * np.arange(3 * win) / rate)
    ogg = str(tmp_path / "in" / "a_tone.ogg")
    (tmp_path / "in").mkdir()
    sf.write(ogg, tone, rate, format="OGG", subtype="VORBIS")
    wav = _wav(tmp_path / "in" / "b_tone.wav", (tone * 32767).astype(np.int16), "PCM_16", rate)
    out = tmp_path / "out"
    args = ["--win_len", str(win), "--features", "none"]
    record(str(tmp_path / "in" / "*.{ogg,wav}"), out, *args)
    manifest = load_manifest(out)
    files = {f["path"]: f for f in manifest["files"]}
    assert files[ogg]["subtype"] == "VORBIS" and files[ogg]["lossy"] is True
    reason = files[ogg]["lossy_reason"]
    assert isinstance(reason, str) and "Vorbis" in reason and "lossy" in reason, reason
    assert "lossy" not in files[wav] and "lossy_reason" not in files[wav]  # lossless: no note
    assert manifest["elements"]["signal"]["dtype"] == "float32"
    decoded = sf.read(ogg, dtype="float32")[0]
    windows = sorted(
        (r["win_start_idx"], r["signal"]) for r in read_records(out) if r["filepath"] == ogg
    )
    assert len(windows) == files[ogg]["num_windows"] == len(decoded) // win
    for start, signal in windows:
        np.testing.assert_array_equal(signal, decoded[start : start + win])


# --- the reader's limits: manifest size, values per key -------------------------------------------


@pytest.fixture(scope="module")
def limit_run(tmp_path_factory) -> Path:
    """A real dataset whose `signal` has exactly 2^28 values (--win_len 268435456; its one
    file is shorter than a window, so it holds no record and costs nothing)."""
    root = tmp_path_factory.mktemp("limit")
    _wav(root / "in" / "a_x.wav", (0.3 * _tone(1) * 32767).astype(np.int16), "PCM_16")
    out = root / "out"
    args = ["--win_len", str(LIMIT_VALUES), "--features", "log_mel", "--no_normalize"]
    record(str(root / "in" / "*.wav"), out, *args)
    return out


def _with_manifest(dataset: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    manifest = raw_manifest(copy)  # as written (format version 3: no source lists)
    edit(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


@pytest.mark.slow
def test_an_element_of_more_than_2_28_values_is_refused(limit_run, tmp_path):
    """docs/guarantees.md, 8: "element shapes (positive, at most 2^28 values)" in a manifest."""
    from replay import ManifestError, load_info

    info = load_info(limit_run)  # the writer's own dataset, at the limit: accepted
    assert info.elements["signal"].shape == (LIMIT_VALUES,) and info.num_examples() == 0

    def shape(key, dims):
        return lambda m: m["elements"][key].update(shape=dims)

    at_limit = _with_manifest(limit_run, tmp_path / "2d", shape("log_mel", [2**14, 2**14]))
    assert load_info(at_limit).elements["log_mel"].shape == (2**14, 2**14)  # 2^28 values in 2-D
    over = _with_manifest(limit_run, tmp_path / "1d", shape("signal", [LIMIT_VALUES + 1]))
    with pytest.raises(ManifestError, match=r"elements\.signal\.shape\[0\]: 268435457 outside"):
        load_info(over)
    over = _with_manifest(limit_run, tmp_path / "2d+", shape("log_mel", [2**14, 2**14 + 1]))
    with pytest.raises(
        ManifestError,
        match=r"manifest\.json: elements\.log_mel\.shape: \[16384, 16385\] holds 268451840 "
        "values, over the limit",
    ):
        load_info(over)


@pytest.mark.slow
def test_a_manifest_over_the_size_limit_is_refused(limit_run, tmp_path, monkeypatch):
    """docs/guarantees.md, 8: "a manifest that is a FIFO or over 1 GiB" is refused."""
    from replay import ManifestError, load_info, replay_dataset
    from replay import manifest as schema

    assert schema.MAX_MANIFEST_BYTES == 2**30  # "over 1 GiB"
    copy = _with_manifest(limit_run, tmp_path, lambda m: None)
    manifest = copy / "manifest.json"
    raw = manifest.read_bytes()
    os.truncate(manifest, 2**30 + 1)  # sparse: refused from its size, before any read
    refused = rf"{re.escape(str(manifest))}: manifest: unreadable \(larger than {2**30} bytes\)"
    for read in (load_info, replay_dataset):
        with pytest.raises(ManifestError, match=refused):
            read(copy)
    # The boundary, at a lower limit: exactly the limit is accepted, one byte more is not.
    limit = len(raw) + 1000
    monkeypatch.setattr(schema, "MAX_MANIFEST_BYTES", limit)
    manifest.write_bytes(raw + b" " * (limit - len(raw)))
    assert load_info(copy).num_examples() == 0
    os.truncate(manifest, limit + 1)  # one byte over (a sparse NUL byte)
    refused = rf"{re.escape(str(manifest))}: manifest: unreadable \(larger than {limit} bytes\)"
    with pytest.raises(ManifestError, match=refused):
        load_info(copy)
