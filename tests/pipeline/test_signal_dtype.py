"""`--signal_dtype`: auto never rounds a sample; every mix of encodings replays bit-exact.

Encodings fall in five classes by what their samples need: integers of at most 16 bits, 24-bit
and 32-bit integers, float32 (float WAV/AIFF, Ogg Vorbis) and float64. For every pair of
encodings, auto must pick the narrowest of int16 < int32 < float32 < float64 that holds both
(the table below is written out independently of transforms.audio.dtypes). The pipeline runs cover
every pair: the run for dtype D holds every encoding D holds, so the pair (a, b) is recorded
together in the run of its own dtype, and each file is read back through `replay_dataset` and
compared with an independent decoder (tests/wavgen.expected_samples' own WAV decoder,
scipy.io.wavfile for RIFX, soundfile for FLAC / AIFF / Ogg). The RIFX files of other writers in
tests/fixtures/wav/rifx/ (sox -B, scipy; WAVE_FORMAT_EXTENSIBLE among them) are recorded too.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.io.wavfile
import soundfile as sf

from tests.support import formatgen, wavgen
from tests.support.record_helpers import cli_error, load_manifest, record
from transforms.audio import dtypes, wav

WAV_SUBTYPES = {  # label -> soundfile subtype of little-endian WAV files (tests/support/wavgen.py)
    "wavu8": "PCM_U8",
    "wav16": "PCM_16",
    "wav24": "PCM_24",
    "wav32": "PCM_32",
    "wavfloat": "FLOAT",
    "wavdouble": "DOUBLE",
    "wavulaw": "ULAW",
    "wavalaw": "ALAW",
    "wavima": "IMA_ADPCM",
    "wavms": "MS_ADPCM",
    "wavgsm": "GSM610",
}
CLASS = {"PCM_24": "i24", "PCM_32": "i32", "FLOAT": "f32", "VORBIS": "f32", "DOUBLE": "f64"}
JOIN = {  # (class, class) -> the narrowest dtype holding both exactly
    ("i16", "i16"): "int16",
    ("i16", "i24"): "int32",
    ("i16", "i32"): "int32",
    ("i16", "f32"): "float32",
    ("i16", "f64"): "float64",
    ("i24", "i24"): "int32",
    ("i24", "i32"): "int32",
    ("i24", "f32"): "float32",  # 24-bit integers fit float32's 24-bit mantissa
    ("i24", "f64"): "float64",
    ("i32", "i32"): "int32",
    ("i32", "f32"): "float64",  # int32 does not fit float32, float32 does not fit int32
    ("i32", "f64"): "float64",
    ("f32", "f32"): "float32",
    ("f32", "f64"): "float64",
    ("f64", "f64"): "float64",
}
RUNS = {  # run dtype -> the classes it holds
    "int16": ("i16",),
    "int32": ("i16", "i24", "i32"),
    "float32": ("i16", "i24", "f32"),
    "float64": ("i16", "i24", "i32", "f32", "f64"),
}
WIN = 1000


def _class(subtype: str) -> str:
    return CLASS.get(subtype, "i16")


def _write_corpus(directory: Path, labels: list[str]) -> dict[str, tuple[str, np.ndarray]]:
    """label -> (path, samples from an independent decoder), 4,500 frames at 16 kHz each."""
    out = {}
    for i, label in enumerate(labels):
        if label in WAV_SUBTYPES:
            subtype = WAV_SUBTYPES[label]
            path = wavgen.write_wav(
                directory / f"x_{label}.wav",
                wavgen.synth(4500, num_channels=2 if i % 2 else 1, seed=i),
                sample_rate=16000,
                subtype=subtype,
            )
            out[label] = (path, wavgen.expected_samples(path))  # its own numpy decoder
            continue
        enc = formatgen.ENCODINGS[label]
        path, _ = formatgen.write_file(
            directory / f"x_{label}{enc.suffix}", label, num_frames=4500, sample_rate=16000, seed=i
        )
        out[label] = (path, _independent(path, enc))
    return out


def _independent(path: str, enc: formatgen.Encoding) -> np.ndarray:
    """The file's samples by the value rule, decoded by scipy (RIFX) or soundfile (others)."""
    if enc.container == "RIFX":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, ref = scipy.io.wavfile.read(path)
        ref = ref.reshape(len(ref), -1)
        if enc.subtype == "PCM_U8":
            return ref.astype(np.int16) - 128
        return (ref >> 8 if enc.subtype == "PCM_24" else ref).astype(ref.dtype.newbyteorder("="))
    native = wav.signal_dtype_for(enc.subtype)
    read_as = {"PCM_S8": "int16", "PCM_24": "int32"}.get(enc.subtype, native)
    ref, _ = sf.read(path, dtype=read_as, always_2d=True)
    return ref >> 8 if enc.subtype in ("PCM_S8", "PCM_24") else ref


def _all_labels() -> dict[str, str]:
    """label -> subtype of every encoding this test mixes."""
    labels = dict(WAV_SUBTYPES)
    labels.update({k: e.subtype for k, e in formatgen.ENCODINGS.items()})
    return labels


@pytest.fixture(scope="module")
def headers(tmp_path_factory) -> dict[str, tuple[str, wav.WavInfo, np.ndarray]]:
    corpus = _write_corpus(tmp_path_factory.mktemp("encodings"), list(_all_labels()))
    out = {}
    for label, (path, samples) in corpus.items():
        with open(path, "rb") as f:
            out[label] = (path, wav.read_info(f, path=path), samples)
    return out


def _exact_in(samples: np.ndarray, dtype: str) -> bool:
    """Value-level check, independent of transforms.audio.dtypes: does the cast lose anything?"""
    with np.errstate(invalid="ignore", over="ignore"):  # floats cast to integers
        back = samples.astype(dtype).astype(samples.dtype)
    return bool(np.array_equal(back, samples, equal_nan=True))


def test_auto_takes_the_narrowest_exact_dtype_for_every_pair(headers):
    labels = sorted(headers)
    assert len(labels) >= 25
    order = dtypes.STORED_DTYPES
    for a, b in itertools.combinations_with_replacement(labels, 2):
        (pa, ia, sa), (pb, ib, sb) = headers[a], headers[b]
        got = dtypes.resolve("auto", [(pa, ia), (pb, ib)])
        want = JOIN[tuple(sorted((_class(ia.subtype), _class(ib.subtype)), key=_rank))]
        assert got == want, (a, b)
        assert _exact_in(sa, got) and _exact_in(sb, got), (a, b)
        for narrower in order[: order.index(got)]:  # nothing narrower would do, on the values
            if narrower != "float32" or got != "int32":  # (int32 and float32 are both 4 bytes)
                assert not (_exact_in(sa, narrower) and _exact_in(sb, narrower)), (a, b, narrower)


def _rank(cls: str) -> int:
    return ("i16", "i24", "i32", "f32", "f64").index(cls)


def test_explicit_dtype_that_would_round_is_refused_naming_files(headers):
    files = [(headers[k][0], headers[k][1]) for k in ("wav16", "wav32", "rifxdouble")]
    with pytest.raises(ValueError) as e:
        dtypes.resolve("float32", files)
    message = str(e.value)
    assert "\n" not in message and "would round the samples of 2 file(s)" in message
    assert headers["wav32"][0] in message and headers["rifxdouble"][0] in message
    assert "(PCM_32 fits int32 or float64)" in message and "(DOUBLE fits float64)" in message
    assert message.endswith("; every file fits --signal_dtype float64 or auto")
    assert dtypes.resolve("float64", files) == "float64"
    assert dtypes.resolve("int32", files[:2]) == "int32"


def test_auto_stops_when_no_dtype_holds_every_file(headers):
    # No encoding we read is beyond float64; a 64-bit integer one would be (not a real file).
    wide = wav.WavInfo(8000, 1, 10, "PCM_64", "int64", 2.0**63)
    files = [(headers["wav16"][0], headers["wav16"][1]), ("/d/wide.wav", wide)]
    with pytest.raises(ValueError, match=r"^--signal_dtype auto: no signal dtype holds every "):
        dtypes.resolve("auto", files)
    with pytest.raises(ValueError, match=r"/d/wide.wav \(PCM_64 fits none\); record them"):
        dtypes.resolve("auto", files)
    assert dtypes.resolve("auto", []) == "int16"


@pytest.mark.slow
def test_cli_refuses_a_narrower_dtype_up_front(tmp_path, capsys):
    d = tmp_path / "in"
    wavgen.write_wav(d / "a_x.wav", wavgen.synth(3000), sample_rate=16000, subtype="PCM_16")
    wavgen.write_wav(d / "b_x.wav", wavgen.synth(3000), sample_rate=16000, subtype="PCM_24")
    out = tmp_path / "out"
    line = cli_error(
        capsys, "--input_pattern", str(d / "*.wav"), "--output_dir", str(out),
        "--signal_dtype", "int16", "--win_len", "1000", "--features", "none",
    )  # fmt: skip
    assert "--signal_dtype int16 would round the samples of 1 file(s)" in line
    assert str(d / "b_x.wav") in line and line.endswith("int32 or float32 or float64 or auto")
    assert not out.exists()  # stopped before any work


@pytest.mark.slow
@pytest.mark.parametrize("run_dtype", list(RUNS))
def test_every_encoding_mix_replays_bit_exact(tmp_path, run_dtype):
    from replay import replay_dataset

    labels = [k for k, s in _all_labels().items() if _class(s) in RUNS[run_dtype]]
    corpus = _write_corpus(tmp_path / "in", labels)
    out = tmp_path / "out"
    pattern = str(tmp_path / "in" / "*.{wav,flac,ogg,aif,aiff,aifc}")
    features = "log_mel" if run_dtype == "float32" else "none"
    record(pattern, out, "--win_len", str(WIN), "--features", features, "--num_shards", "2")
    manifest = load_manifest(out)
    assert manifest["elements"]["signal"]["dtype"] == run_dtype
    assert manifest["errors"] == []
    by_path = {f["path"]: f for f in manifest["files"]}
    assert sorted(by_path) == sorted(path for path, _ in corpus.values())
    windows: dict[str, dict[int, np.ndarray]] = {path: {} for path in by_path}
    for element in replay_dataset(out).as_numpy_iterator():
        path = element["filepath"].decode()
        assert element["signal"].dtype == np.dtype(run_dtype)
        windows[path][int(element["win_start_idx"])] = element["signal"]
    for label, (path, expected) in corpus.items():
        entry = by_path[path]
        assert entry["num_windows"] == len(expected) // WIN == len(windows[path]), label
        assert entry.get("lossy", False) == (entry["subtype"] == "VORBIS"), label
        for start, signal in windows[path].items():
            want = expected[start : start + WIN, 0]
            assert _exact_in(want, run_dtype), label  # the dtype holds the file exactly ...
            np.testing.assert_array_equal(signal, want.astype(run_dtype), err_msg=label)
            # ... so the replayed values are the file's values: cast back, bit for bit
            np.testing.assert_array_equal(signal.astype(want.dtype), want, err_msg=label)
    if features != "none":  # RIFX / FLAC / AIFF / Ogg windows went through the feature path
        assert manifest["elements"]["log_mel"]["shape"] == [4, 64]


@pytest.mark.slow
def test_rifx_fixtures_of_other_writers_replay_bit_exact(tmp_path):
    """sox -B and scipy RIFX files, WAVE_FORMAT_EXTENSIBLE among them, through the real pipeline.

    The expected samples are those of the fixtures' independent decoders (scipy.io.wavfile, or
    the little-endian copy sox made: tests/fixtures/wav/rifx/README.md).
    """
    from replay import replay_dataset

    out = tmp_path / "out"
    record(str(formatgen.RIFX_FIXTURES / "*.wav"), out, "--win_len", "5", "--features", "none")
    manifest = load_manifest(out)
    assert manifest["errors"] == [] and manifest["elements"]["signal"]["dtype"] == "float64"
    by_path = {f["path"]: f for f in manifest["files"]}
    names = sorted(Path(path).name for path in by_path)
    assert names == sorted(p.name for p in formatgen.RIFX_FIXTURES.glob("*.wav"))
    assert len(names) == 11
    windows: dict[str, dict[int, np.ndarray]] = {path: {} for path in by_path}
    for element in replay_dataset(out).as_numpy_iterator():
        windows[element["filepath"].decode()][int(element["win_start_idx"])] = element["signal"]
    for path, entry in by_path.items():
        refs = formatgen.rifx_fixture_references(Path(path).name, entry["subtype"])
        assert refs, path
        for expected in refs.values():
            assert entry["num_windows"] == len(expected) // 5 == len(windows[path]), path
            for start, signal in windows[path].items():
                want = expected[start : start + 5, 0]
                np.testing.assert_array_equal(signal.astype(want.dtype), want, err_msg=path)
                np.testing.assert_array_equal(signal, want.astype("float64"), err_msg=path)
