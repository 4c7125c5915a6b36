"""Record options end to end: channel modes, resampling, label sources, --strict, signal dtype."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
from scipy.signal import resample_poly

from tests.support import wavgen
from tests.support.record_helpers import load_manifest, read_records, record

pytestmark = pytest.mark.slow
WIN = 2000


def _by_start(records, **match):
    rows = [r for r in records if all(r[k] == v for k, v in match.items())]
    return sorted(rows, key=lambda r: (r.get("channel", 0), r["win_start_idx"]))


@pytest.fixture(scope="module")
def stereo(tmp_path_factory):
    d = tmp_path_factory.mktemp("stereo")
    path = wavgen.write_wav(
        d / "dog" / "a_1_dog.wav",
        wavgen.synth(9000, num_channels=2),
        sample_rate=16000,
        subtype="PCM_16",
    )
    wavgen.write_wav(
        d / "cat" / "b_2_cat.wav", wavgen.synth(5000, seed=3), sample_rate=8000, subtype="PCM_24"
    )
    return d, path


@pytest.mark.parametrize("mode", ["first", "mean", "split"])
def test_channel_modes(stereo, tmp_path, mode):
    d, path = stereo
    out = tmp_path / mode
    record(
        str(d / "dog" / "*.wav"),
        out,
        "--win_len",
        str(WIN),
        "--channel_mode",
        mode,
        "--features",
        "none",
    )
    samples = wavgen.expected_samples(path)
    records = _by_start(read_records(out))
    if mode == "first":
        want = [samples[s : s + WIN, 0] for s in range(0, 7001, WIN)]
    elif mode == "mean":
        mean = np.rint(samples.astype(np.float64).mean(axis=1)).astype(np.int16)
        want = [mean[s : s + WIN] for s in range(0, 7001, WIN)]
    else:
        want = [samples[s : s + WIN, c] for c in (0, 1) for s in range(0, 7001, WIN)]
        assert [r["channel"] for r in records] == [0] * 4 + [1] * 4
    assert ("channel" in load_manifest(out)["elements"]) == (mode == "split")
    assert len(records) == len(want)
    for r, w in zip(records, want, strict=True):
        np.testing.assert_array_equal(r["signal"], w)


def test_mixed_rates_and_formats_keep_rates_dirname_labels_and_widest_dtype(stereo, tmp_path):
    d, _ = stereo
    out = tmp_path / "mixed"
    record(
        str(d / "**" / "*.wav"),
        out,
        *f"--win_len {WIN} --label_source dirname --features log_mel".split(),
        *"--frame_length 256 --frame_step 128 --fft_length 256".split(),
    )
    manifest = load_manifest(out)
    assert manifest["elements"]["signal"]["dtype"] == "int32"  # 16-bit + 24-bit -> int32
    records = read_records(out)
    assert {(r["class"], r["sample_rate"]) for r in records} == {("dog", 16000), ("cat", 8000)}
    cat = _by_start(records, **{"class": "cat"})
    raw = wavgen.expected_samples(d / "cat" / "b_2_cat.wav")[:, 0]
    np.testing.assert_array_equal(cat[0]["signal"], raw[:WIN])


def _tones(t: np.ndarray) -> np.ndarray:
    """Three tones below 4 kHz (the Nyquist rate of 8 kHz), in [-0.6, 0.6]."""
    return (
        0.3 * np.sin(2 * np.pi * 300 * t)
        + 0.2 * np.sin(2 * np.pi * 1100 * t + 0.5)
        + 0.1 * np.sin(2 * np.pi * 2300 * t + 1.0)
    )


# Resampling accuracy, in fractions of full scale. Tones: a band-limited signal is the same
# function of time at any rate, so the 16 kHz records must follow the tones; resample_poly's
# FIR filter (passband ripple) left 7.4e-4 at most on this signal (measured 2026-11-25), linear
# interpolation 0.058 and sample repetition 0.2. The first and last EDGE output samples are left
# out: there the filter runs past the file's ends (zeros), errors up to 0.07.
TONES_TOL = 2e-3
EDGE = 20


def test_resampling_to_one_rate(stereo, tmp_path):
    """Pins ``--sample_rate 16000`` on 8 kHz 24-bit files: twice the frames, at 16000 Hz, equal
    (a) to the tones a file was made of, evaluated at the 16 kHz sample times (independent of
    any resampler), within TONES_TOL of full scale away from the ends, and (b) to scipy's
    resample_poly (the method docs/options.md names) of the file as an independent decoder reads it,
    rounded to 24-bit, within 1 LSB."""
    d, _ = stereo
    tones = wavgen.write_wav(
        tmp_path / "in" / "t_3_tone.wav",
        _tones(np.arange(5000) / 8000),
        sample_rate=8000,
        subtype="PCM_24",
    )
    out = tmp_path / "resampled"
    record(
        str(tmp_path / "in" / "*.wav"),
        out,
        *f"--win_len {WIN} --sample_rate 16000 --features none".split(),
    )
    records = _by_start(read_records(out))
    assert len(records) == 10000 // WIN and all(r["sample_rate"] == 16000 for r in records)
    got = np.concatenate([r["signal"] for r in records]).astype(np.float64)
    assert [r["win_start_idx"] for r in records] == list(range(0, 10000, WIN))
    full_scale = 2.0**23
    want = _tones(np.arange(10000) / 16000)
    error = np.abs(got / full_scale - want)[EDGE:-EDGE]
    assert error.max() < TONES_TOL, error.max()
    raw = wavgen.expected_samples(tones)[:, 0].astype(np.float64)
    poly = np.clip(np.rint(resample_poly(raw, 2, 1)), -(2**23), 2**23 - 1)
    assert np.abs(got - poly).max() <= 1

    cat = tmp_path / "cat"  # the fixture's 8 kHz noise file: same rule, whole file
    record(
        str(d / "cat" / "*.wav"),
        cat,
        *f"--win_len {WIN} --sample_rate 16000 --features none".split(),
    )
    raw = wavgen.expected_samples(d / "cat" / "b_2_cat.wav")[:, 0].astype(np.float64)
    poly = np.clip(np.rint(resample_poly(raw, 2, 1)), -(2**23), 2**23 - 1)
    records = _by_start(read_records(cat))
    got = np.concatenate([r["signal"] for r in records]).astype(np.float64)
    assert len(got) == len(poly) == 10000 and np.abs(got - poly).max() <= 1


def test_csv_labels_and_files_missing_from_the_csv_are_errors(stereo, tmp_path):
    d, _ = stereo
    csv = tmp_path / "labels.csv"
    csv.write_text("filename,category\na_1_dog.wav,canine\n")
    out = tmp_path / "csv"
    record(
        str(d / "**" / "*.wav"),
        out,
        "--win_len",
        str(WIN),
        "--label_source",
        f"csv:{csv}",
        "--features",
        "none",
    )
    manifest = load_manifest(out)
    assert manifest["classes"] == ["canine"]
    assert manifest["errors"] == [
        {"path": str(d / "cat" / "b_2_cat.wav"), "reason": "not listed in the label CSV"}
    ]


def test_strict_fails_on_the_first_bad_file_and_fixed_dtype_rejects_lossy_files(tmp_path):
    d = tmp_path / "in"
    wavgen.write_wav(d / "ok_x.wav", wavgen.synth(4000), sample_rate=16000, subtype="PCM_16")
    (d / "bad_x.wav").write_bytes(b"not a wav at all")
    with pytest.raises(Exception, match="not a RIFF/WAVE file"):
        record(
            str(d / "*.wav"),
            tmp_path / "strict",
            "--win_len",
            str(WIN),
            "--strict",
            "--features",
            "none",
        )
    out = tmp_path / "int16"
    record(str(d / "*.wav"), out, *f"--win_len {WIN} --signal_dtype int16 --features none".split())
    reasons = {e["path"].rsplit("/", 1)[-1]: e["reason"] for e in load_manifest(out)["errors"]}
    assert "not a RIFF/WAVE file" in reasons["bad_x.wav"]
    sf_info = sf.info(str(d / "ok_x.wav"))
    assert load_manifest(out)["files"][0]["num_frames"] == sf_info.frames
    # A fixed dtype that would round a file's samples stops the run up front (one line).
    wavgen.write_wav(d / "wide_x.wav", wavgen.synth(4000), sample_rate=16000, subtype="PCM_24")
    with pytest.raises(Exception, match="--signal_dtype int16 would round the samples of 1 file"):
        record(str(d / "*.wav"), tmp_path / "i16", *f"--win_len {WIN} --signal_dtype int16".split())
