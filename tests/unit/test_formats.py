"""transforms.audio.wav beyond little-endian WAV: RIFX, FLAC, Ogg Vorbis, AIFF; input patterns.

Every file is generated here (tests/support/formatgen.py) and decoded samples are compared with
what was written and with an independent decoder: scipy.io.wavfile for RIFX, soundfile for the
others.
"""

from __future__ import annotations

import functools
import io
import struct
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.io.wavfile
import soundfile as sf
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support import formatgen, wavgen
from tests.support.wav_contract import run_contract
from transforms.audio import formats, wav

RIFX = [k for k, e in formatgen.ENCODINGS.items() if e.container == "RIFX"]
OTHERS = [k for k, e in formatgen.ENCODINGS.items() if e.container != "RIFX"]
BLOCKINGS = [(1000, 0), (777, 700), (4999, 3)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, tuple[str, np.ndarray]]:
    return formatgen.make_corpus(tmp_path_factory.mktemp("formats"))


def _decode(path: str) -> tuple[wav.WavInfo, np.ndarray]:
    with open(path, "rb") as f:
        return wav.decode(f, path=path)


def _check_blocks(path: str, info: wav.WavInfo, expected: np.ndarray) -> None:
    with open(path, "rb") as f:
        assert wav.read_info(f, path=path) == info
        for block_frames, overlap in BLOCKINGS:
            hop, parts = block_frames - overlap, []
            blocks = wav.read_blocks(
                f, path=path, block_frames=block_frames, overlap=overlap, info=info
            )
            for k, (start, block) in enumerate(blocks):
                assert start == k * hop and block.dtype == expected.dtype
                parts.append(block if k == 0 else block[overlap:])
            np.testing.assert_array_equal(np.concatenate(parts), expected)


def _scipy(path: str, subtype: str) -> np.ndarray:
    """scipy.io.wavfile's reading (it reads RIFX), in the value rule."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns about chunks it skips
        _, ref = scipy.io.wavfile.read(path)
    ref = ref.reshape(len(ref), -1)
    if subtype == "PCM_U8":
        return ref.astype(np.int16) - 128
    return ref >> 8 if subtype == "PCM_24" else ref  # scipy left-justifies 24-bit samples


@pytest.mark.parametrize("variant", ["plain", "chunks", "datazero", "dataffff", "truncated"])
@pytest.mark.parametrize("label", RIFX)
def test_rifx_is_read_bit_exactly(tmp_path, label, variant):
    enc = formatgen.ENCODINGS[label]
    samples = formatgen.values(enc.subtype, 3001, num_channels=enc.channels, seed=7)
    override = {"datazero": 0, "dataffff": 0xFFFFFFFF}.get(variant)
    path = formatgen.write_rifx(
        tmp_path / "x.wav",
        samples,
        sample_rate=22050,
        subtype=enc.subtype,
        extra_chunks=variant == "chunks",
        data_size_override=override,
    )
    raw = Path(path).read_bytes()
    assert raw[:4] == b"RIFX" and struct.unpack(">I", raw[24:28])[0] == 22050  # big-endian
    if variant == "truncated":  # a download cut mid-frame: the whole frames are kept
        Path(path).write_bytes(raw[:-5])
        frame_bytes = samples.size and (len(raw) - 44) // len(samples)
        samples = samples[: (len(raw) - 44 - 5) // frame_bytes]
    info, decoded = _decode(path)
    assert (info.subtype, info.num_channels, info.sample_rate) == (enc.subtype, enc.channels, 22050)
    assert info.container == "WAV" and info.num_frames == len(samples)
    assert decoded.dtype == samples.dtype
    np.testing.assert_array_equal(decoded, samples)
    if variant in ("plain", "chunks"):  # scipy trusts the size fields
        np.testing.assert_array_equal(decoded, _scipy(path, enc.subtype).astype(decoded.dtype))
    np.testing.assert_array_equal(decoded, wavgen.expected_samples(path))
    _check_blocks(path, info, samples)


def test_malformed_rifx_gets_the_riff_reasons(tmp_path):
    riff = wavgen.make_broken_corpus(tmp_path / "riff")
    rifx = wavgen.make_broken_corpus(tmp_path / "rifx", big_endian=True)
    for name, (path, reason) in rifx.items():
        got = {}
        for endian, p in (("riff", riff[name][0]), ("rifx", path)):
            with open(p, "rb") as f, pytest.raises(wav.WavDecodeError) as e:
                wav.read_info(f, path="x.wav")
            got[endian] = e.value.reason
        assert got["rifx"] == got["riff"], name  # word for word, numbers included
        assert reason in got["rifx"], (name, got["rifx"])


@pytest.mark.parametrize("label", OTHERS)
def test_flac_ogg_aiff_decode_exactly(corpus, label):
    path, expected = corpus[label]
    enc = formatgen.ENCODINGS[label]
    info, samples = _decode(path)
    assert (info.container, info.subtype) == (enc.container, enc.subtype)
    assert (info.num_frames, info.num_channels, info.sample_rate) == (5000, enc.channels, 16000)
    assert samples.dtype == expected.dtype == np.dtype(info.signal_dtype)
    np.testing.assert_array_equal(samples, expected)  # the values written (lossless)
    dtype = "int32" if enc.subtype in ("PCM_24", "PCM_S8") else info.signal_dtype
    ref, _ = sf.read(path, dtype="int16" if enc.subtype == "PCM_S8" else dtype, always_2d=True)
    if enc.subtype in ("PCM_24", "PCM_S8"):
        ref = ref >> 8  # soundfile left-justifies in the container dtype
    np.testing.assert_array_equal(samples, ref)  # and soundfile's own decode
    assert bool(formats.lossy_fields(info.subtype)) == enc.lossy
    if enc.lossy:
        assert info.signal_dtype == "float32" and info.full_scale == 1.0
    _check_blocks(path, info, expected)


def test_non_audio_and_unreadable_containers_are_rejected_with_a_reason(tmp_path):
    opus = tmp_path / "x.opus"  # libsndfile's Opus decode depends on read sizes: refused
    sf.write(opus, wavgen.synth(3000), 16000, subtype="OPUS", format="OGG")
    cases = {
        opus.read_bytes(): "unsupported encoding: OGG OPUS (libsndfile 1.2.2 decodes",
        b"fLaC" + b"\0" * 40: "libsndfile cannot decode it",
        b"OggS" + bytes(range(60)): "libsndfile cannot decode it",
        b"FORM\0\0\0\x04AIFF": "libsndfile cannot decode it",
        b"%PDF-1.7\n" * 10: "not a RIFF/WAVE file (starts with b'%PDF'), nor FLAC, Ogg or AIFF",
    }
    for raw, reason in cases.items():
        with pytest.raises(wav.WavDecodeError) as e:
            wav.decode(io.BytesIO(raw), path="x")
        assert reason in e.value.reason, e.value.reason


def test_sniff_and_brace_patterns():
    assert formats.sniff(b"RIFX\0\0\0\0WAVE") == formats.sniff(b"RIFF") == "WAV"
    assert formats.sniff(b"FORM\0\0\0\0AIFC") == "AIFF"
    assert formats.sniff(b"FORM\0\0\0\08SVX") is None and formats.sniff(b"") is None
    assert formats.expand_braces("a/**/*.{wav,flac}") == ["a/**/*.wav", "a/**/*.flac"]
    assert formats.expand_braces("{x,y}/*.{a,b}") == ["x/*.a", "x/*.b", "y/*.a", "y/*.b"]
    assert formats.expand_braces("a/{b}/*.{wav,wav}") == ["a/{b}/*.wav"]


def test_input_patterns_pick_formats(tmp_path):
    from pipelines.plan import match_inputs

    names = ["a/x_flac16.flac", "a/b/x_flac24.flac", "a/x_vorbis.ogg", "a/b/x_aiff16.aiff"]
    for name in names:
        label = name.rsplit("_", 1)[1].split(".")[0]
        formatgen.write_file(tmp_path / name, label, num_frames=100, sample_rate=8000)
    wavgen.write_wav(
        tmp_path / "a" / "x_pcm.wav", wavgen.synth(100), sample_rate=8000, subtype="PCM_16"
    )

    def matched(pattern: str) -> list[str]:
        return [
            str(Path(p).relative_to(tmp_path)) for p, _ in match_inputs(str(tmp_path / pattern))
        ]

    assert matched("**/*.flac") == ["a/b/x_flac24.flac", "a/x_flac16.flac"]
    assert matched("a/**/*.{flac,ogg}") == ["a/b/x_flac24.flac"]  # Beam's ** needs a directory
    assert matched("a/*.{flac,ogg,wav}") == ["a/x_flac16.flac", "a/x_pcm.wav", "a/x_vorbis.ogg"]
    assert len(matched("**/*")) == 5  # every file; one that is not audio becomes an error entry


# --- hostile input: the same contract as tests/reliability/test_reliability_wav.py ---


@functools.cache
def _seeds() -> tuple[bytes, ...]:
    with tempfile.TemporaryDirectory() as d:
        corpus = formatgen.make_corpus(d, num_frames=700)
        return tuple(Path(p).read_bytes() for p, _ in corpus.values())


def _mutate(seed: int, edits: list[tuple[int, int, int]], cut: int) -> bytes:
    raw = bytearray(_seeds()[seed % len(_seeds())])
    for kind, pos, value in edits:
        pos = 4 + pos % (min(len(raw), 160) - 8)  # the headers, past the magic bytes
        if kind == 0:
            raw[pos] = value & 0xFF
        else:  # a size / count field, either byte order
            number = (0, 1, value, 0xFFFFFFFF, 0x7FFFFFFF)[value % 5] & 0xFFFFFFFF
            raw[pos : pos + 4] = number.to_bytes(4, "big" if kind == 1 else "little")
    return bytes(raw[: len(raw) - cut % len(raw)]) if cut else bytes(raw)


def test_a_flac_whose_count_is_searched_reads_its_file_a_bounded_number_of_times():
    """A STREAMINFO total the stream does not hold (found by the fuzzer below): the search for
    the real count re-read this 2,643-byte file at each of its ~30 steps, 327,335 bytes in all;
    a file that small is now searched from memory."""
    raw = _mutate(98, [(0, 18, 1)], 1)
    run = run_contract(raw, path="fuzz")
    assert (run.outcome, run.container) == ("decoded", "FLAC")
    for read in run.bytes_read:  # the fuzzer's bound
        assert read <= 6 * len(raw) + (256 << 10), (read, len(raw))


_EDITS = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 200), st.integers(0, 2**32 - 1)), max_size=5
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.builds(_mutate, st.integers(0, 100), _EDITS, st.integers(0, 5000)))
def test_fuzz_other_containers_decode_or_raise_wav_decode_error(raw):
    """Mutated RIFX / FLAC / Ogg / AIFF headers: samples or WavDecodeError, bounded memory."""
    run = run_contract(raw, path="fuzz")
    event(f"decoded {run.container}" if run.outcome == "decoded" else run.outcome)
    # A lossless codec expands a compressed byte into a few samples (FLAC), a lossy one into
    # more; nothing may scale with a size or count *field*.
    assert run.peak_bytes < 4 * max(len(raw), run.output_bytes) + (8 << 20)
    for read in run.bytes_read:  # header + last-frame check (+ a counting pass for a wrong count)
        assert read <= 6 * len(raw) + (256 << 10), (read, len(raw))
