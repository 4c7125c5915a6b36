"""transforms.audio.wav on real files: every format bit-exact, the real recording, broken files,
fuzz."""

from __future__ import annotations

import functools
import io
import pickle
import struct
import tempfile
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.io.wavfile
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support import wavgen
from tests.support.counting_io import CountingBytesIO
from tests.support.record_helpers import TUG_WAV
from transforms.audio import wav

TUG = TUG_WAV  # the real 24-bit 64 kHz hydrophone excerpt in tests/fixtures/audio/

# The value rule, written out independently of transforms.audio.wav.
DTYPES = {"PCM_U8": "int16", "PCM_16": "int16", "PCM_24": "int32", "PCM_32": "int32"}
DTYPES |= {"FLOAT": "float32", "DOUBLE": "float64"}
DTYPES |= {s: "int16" for s in ("ULAW", "ALAW", "IMA_ADPCM", "MS_ADPCM", "GSM610")}
FULL_SCALES = {"PCM_U8": 128.0, "PCM_24": 2.0**23, "PCM_32": 2.0**31, "FLOAT": 1.0, "DOUBLE": 1.0}
# (block_frames, overlap) for reassembly checks
BLOCKINGS = [(1000, 0), (4096, 1024), (777, 700), (19999, 3), (50000, 10)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, str]:
    return wavgen.make_format_corpus(tmp_path_factory.mktemp("formats"))


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> dict[str, tuple[str, str]]:
    return wavgen.make_broken_corpus(tmp_path_factory.mktemp("broken"))


def _decode(path) -> tuple[wav.WavInfo, np.ndarray]:
    with open(path, "rb") as f:
        return wav.decode(f, path=str(path))


def _reassemble(blocks: list[tuple[int, np.ndarray]], block_frames: int, overlap: int):
    """Check the block layout contract and glue the blocks back together."""
    hop = block_frames - overlap
    parts = []
    for k, (start, block) in enumerate(blocks):
        assert start == k * hop
        assert len(block) <= block_frames
        if k + 1 < len(blocks):
            assert len(block) == block_frames
            np.testing.assert_array_equal(block[hop:], blocks[k + 1][1][:overlap])
        if k > 0:
            assert len(block) > overlap  # every block brings new frames
        parts.append(block if k == 0 else block[overlap:])
    return np.concatenate(parts) if parts else None


@pytest.mark.parametrize("label", wavgen.FORMAT_LABELS)
def test_every_format_decodes_bit_exactly(corpus, label):
    path = corpus[label]
    expected = wavgen.expected_samples(path)
    info, samples = _decode(path)
    subtype = wavgen.SUBTYPES[label]
    assert info.subtype == subtype
    assert samples.dtype == np.dtype(DTYPES[subtype]) and info.signal_dtype == DTYPES[subtype]
    assert info.full_scale == FULL_SCALES.get(subtype, 32768.0)
    assert samples.shape == expected.shape == (info.num_frames, wavgen.CHANNELS[label])
    assert info.num_frames >= 19000 and info.sample_rate == 16000
    np.testing.assert_array_equal(samples, expected)
    with open(path, "rb") as f:  # one handle for all calls, as the pipeline does
        assert wav.read_info(f, path=path) == info
        for block_frames, overlap in BLOCKINGS:
            blocks = list(
                wav.read_blocks(f, path=path, block_frames=block_frames, overlap=overlap, info=info)
            )
            np.testing.assert_array_equal(_reassemble(blocks, block_frames, overlap), expected)
            assert all(b.dtype == samples.dtype for _, b in blocks)


_SCIPY_LABELS = [
    k
    for k in wavgen.FORMAT_LABELS
    if wavgen.SUBTYPES[k].startswith(("PCM", "FLOAT", "DOUBLE"))
    and not any(w in k for w in ("data", "riff", "trunc"))  # scipy trusts the size fields
]


@pytest.mark.parametrize("label", _SCIPY_LABELS)
def test_pcm_and_float_agree_with_scipy(corpus, label):
    """A second reference where scipy reads the file (it knows PCM and float only)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, ref = scipy.io.wavfile.read(corpus[label])
    ref = ref.reshape(len(ref), -1)
    subtype = wavgen.SUBTYPES[label]
    if subtype == "PCM_U8":
        ref = ref.astype(np.int16) - 128
    elif subtype == "PCM_24":
        ref = ref >> 8  # scipy left-justifies 24-bit samples in int32
    _, samples = _decode(corpus[label])
    np.testing.assert_array_equal(samples, ref.astype(samples.dtype))


def test_real_24_bit_recording():
    info, samples = _decode(TUG)
    assert info == wav.WavInfo(64000, 1, 320_000, "PCM_24", "int32", 2.0**23)  # the 5 s excerpt
    _, ref = scipy.io.wavfile.read(TUG)
    assert ref.dtype == np.int32 and not (ref & 0xFF).any()  # scipy: left-justified 24-bit
    np.testing.assert_array_equal(samples[:, 0], ref >> 8)
    assert samples.min() >= -(2**23) and samples.max() < 2**23
    np.testing.assert_array_equal(samples, wavgen.expected_samples(TUG))
    with open(TUG, "rb") as f:
        blocks = list(wav.read_blocks(f, path=str(TUG), block_frames=65536, overlap=4096))
    assert max(len(b) for _, b in blocks) == 65536
    np.testing.assert_array_equal(_reassemble(blocks, 65536, 4096), samples)


def test_beam_filesystems_file_object(corpus):
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    path = corpus["pcm24datazerochunks"]  # the repaired-view path, through Beam's reader
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        info, samples = wav.decode(f, path=path)
    np.testing.assert_array_equal(samples, wavgen.expected_samples(path))
    assert info.num_frames == 20000


def test_every_broken_file_is_rejected_with_its_reason(broken):
    reasons = {}
    for name, (path, reason) in broken.items():
        for call in (
            lambda f, p: wav.decode(f, path=p),
            lambda f, p: wav.read_info(f, path=p),
            lambda f, p: list(wav.read_blocks(f, path=p, block_frames=100)),
        ):
            with open(path, "rb") as f, pytest.raises(wav.WavDecodeError) as e:
                call(f, path)
            assert reason in e.value.reason, (name, e.value.reason)
            assert e.value.path == path and str(e.value) == f"{path}: {e.value.reason}"
        reasons[name] = e.value.reason
    assert broken["mp3"][1] in reasons["mp3"] and "b'ID3\\x04'" in reasons["mp3"]
    assert "MPEG Layer 3" in reasons["mp3inwav"] and "0x0055" in reasons["mp3inwav"]


def _raw_wav(tag: int, bits: int, payload: bytes) -> bytes:
    width = (bits + 7) // 8
    fmt = struct.pack("<HHIIHH", tag, 1, 8000, 8000 * width, width, bits)
    body = b"WAVE" + wavgen._chunk(b"fmt ", fmt) + wavgen._chunk(b"data", payload)
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize(
    ("bits", "stored", "expected"),
    [
        (8, bytes([0, 1, 127, 128, 255]), [-128, -127, -1, 0, 127]),
        (16, struct.pack("<4h", -32768, -1, 0, 32767), [-32768, -1, 0, 32767]),
        (24, b"\x00\x00\x80\xff\xff\xff\x01\x00\x00\xff\xff\x7f", [-(2**23), -1, 1, 2**23 - 1]),
        (32, struct.pack("<4i", -(2**31), -1, 1, 2**31 - 1), [-(2**31), -1, 1, 2**31 - 1]),
    ],
)
def test_pcm_extremes_are_exact(bits, stored, expected):
    _, samples = wav.decode(io.BytesIO(_raw_wav(1, bits, stored)), path="x.wav")
    assert samples[:, 0].tolist() == expected


@pytest.mark.parametrize(("tag", "alaw"), [(6, True), (7, False)])
def test_every_g711_code(tag, alaw):
    codes = bytes(range(256))
    _, samples = wav.decode(io.BytesIO(_raw_wav(tag, 8, codes)), path="x.wav")
    expected = wavgen._g711(np.frombuffer(codes, np.uint8), alaw=alaw)
    np.testing.assert_array_equal(samples[:, 0], expected)
    assert samples.dtype == np.int16


@pytest.mark.parametrize("bits", [32, 64])
def test_float_values_are_kept_as_stored(bits):
    values = np.array([0.0, -0.0, 3.5, -7.25, 1e30, np.inf, -np.inf, np.nan, 2.0**-149])
    stored = values.astype(f"<f{bits // 8}")
    _, samples = wav.decode(io.BytesIO(_raw_wav(3, bits, stored.tobytes())), path="x.wav")
    assert samples.dtype == np.dtype(f"float{bits}")  # the stored bits, NaN / -0.0 included
    uint = np.dtype(f"uint{bits}")
    np.testing.assert_array_equal(samples[:, 0].view(uint), stored.view(uint))


def test_absurd_data_size_is_bounded_by_the_file(tmp_path):
    samples = wavgen.synth(100_000)
    path = wavgen.write_wav(
        tmp_path / "x.wav", samples, sample_rate=8000, subtype="PCM_16",
        data_size_override=0xFFFFFFF0,
    )  # fmt: skip
    tracemalloc.start()
    try:
        info, decoded = _decode(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.num_frames == 100_000
    assert peak < 2_000_000  # 200 kB of samples; nothing sized by the 4 GiB header
    np.testing.assert_array_equal(decoded, wavgen.expected_samples(path))


def test_unpatched_data_size_beyond_4_gib(tmp_path):
    """A streaming writer's 5 GiB file (sparse on disk): repaired through an RF64 view."""
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    body = b"WAVE" + wavgen._chunk(b"fmt ", fmt) + b"data\0\0\0\0"
    pcm = np.arange(-500, 500, dtype="<i2")
    path = tmp_path / "long.wav"
    with open(path, "wb") as f:
        f.write(b"RIFF\0\0\0\0" + body + pcm.tobytes())
        f.truncate(8 + len(body) + (5 << 30))
    with open(path, "rb") as f:
        info = wav.read_info(f, path=str(path))
        assert info.num_frames == (5 << 30) // 2
        _, block = next(wav.read_blocks(f, path=str(path), block_frames=2000, info=info))
    np.testing.assert_array_equal(block[:1000, 0], pcm)
    assert not block[1000:].any()


def test_empty_data_chunk_followed_by_a_chunk_is_empty(tmp_path):
    path = wavgen.write_wav(
        tmp_path / "x.wav", wavgen.synth(0), sample_rate=8000, subtype="PCM_16", extra_chunks=True
    )
    info, samples = _decode(path)
    assert info.num_frames == 0 and samples.shape == (0, 1)
    with open(path, "rb") as f:
        assert list(wav.read_blocks(f, path=path, block_frames=10)) == []


def test_missing_pad_byte_rf64_and_file_position(tmp_path):
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    pcm = np.arange(-50, 50, dtype="<i2")
    body = b"WAVE" + wavgen._chunk(b"fmt ", fmt) + b"odd \x03\0\0\0abc"  # no pad byte
    body += wavgen._chunk(b"data", pcm.tobytes())
    raw = b"RIFF" + struct.pack("<I", len(body)) + body
    f = io.BytesIO(raw)
    f.seek(17)  # decoding does not depend on where the file object was left
    np.testing.assert_array_equal(wav.decode(f, path="nopad")[1][:, 0], pcm)

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, wavgen.synth(3000, num_channels=2), 8000, subtype="PCM_24", format="RF64")
    buf.seek(0)
    info, samples = wav.decode(buf, path="x.rf64")
    assert info.num_frames == 3000 and samples.dtype == np.int32


def test_io_errors_propagate_as_themselves(corpus):
    class Flaky(io.BytesIO):
        def read(self, n=-1):
            if self.tell() + n > 5000:  # the connection drops mid-file
                raise OSError("connection reset")
            return super().read(n)

    raw = Path(corpus["pcm16"]).read_bytes()
    with pytest.raises(OSError, match="connection reset"):
        wav.decode(Flaky(raw), path="flaky")


def test_parameters_and_helpers(corpus):
    path = corpus["pcm16"]
    for block_frames, overlap in [(10, 10), (10, 11), (0, 0), (10, -1)]:
        with open(path, "rb") as f, pytest.raises(ValueError, match="overlap"):
            wav.read_blocks(f, path=path, block_frames=block_frames, overlap=overlap)  # eager
    with open(corpus["pcm24"], "rb") as f:
        other = wav.read_info(f, path="pcm24")
    with open(path, "rb") as f, pytest.raises(ValueError, match="does not describe"):
        next(wav.read_blocks(f, path=path, block_frames=10, info=other))
    for subtype, dtype in DTYPES.items():
        assert wav.signal_dtype_for(subtype) == dtype
    with pytest.raises(ValueError, match="unsupported encoding: G721_32"):
        wav.signal_dtype_for("G721_32")
    err = pickle.loads(pickle.dumps(wav.WavDecodeError("gs://b/a.wav", "no data chunk")))
    assert (err.path, err.reason, str(err)) == ("gs://b/a.wav", "no data chunk", err.args[0])
    assert isinstance(err, ValueError) and str(err) == "gs://b/a.wav: no data chunk"


@functools.cache
def _seed_files() -> tuple[bytes, ...]:
    with tempfile.TemporaryDirectory() as d:
        corpus = wavgen.make_format_corpus(d, num_frames=600)
        return tuple(Path(p).read_bytes() for p in corpus.values())


def _mutate(seed: int, edits: list[tuple[int, int, int]], cut: int) -> bytes:
    raw = bytearray(_seed_files()[seed % len(_seed_files())])
    for kind, pos, value in edits:
        pos = 4 + pos % (min(len(raw), 120) - 8)  # the header, past the RIFF id
        if kind == 0:
            raw[pos] = value & 0xFF
        else:  # a size / count field: small, huge, or 0
            width = 4 if kind == 1 else 2
            choices = (0, 1, 3, value, 0xFFFFFFFF, 0x7FFFFFFF) if width == 4 else (0, 1, value)
            number = choices[value % len(choices)] & (0xFFFFFFFF if width == 4 else 0xFFFF)
            raw[pos : pos + width] = number.to_bytes(width, "little")
    return bytes(raw[: len(raw) - cut % len(raw)]) if cut else bytes(raw)


_EDITS = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 200), st.integers(0, 2**32 - 1)), max_size=6
)
_MUTATED = st.builds(_mutate, st.integers(0, 100), _EDITS, st.integers(0, 3000))
_INPUTS = st.one_of(st.binary(max_size=300), _MUTATED, _MUTATED, _MUTATED)


# No per-example deadline (a loaded machine would trip it): the work is bounded in bytes read,
# a small multiple of the input whatever its header claims.
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_INPUTS)
def test_fuzz_decodes_or_raises_wav_decode_error(raw):
    fh = CountingBytesIO(raw)
    try:
        info, samples = wav.decode(fh, path="fuzz.wav")
    except wav.WavDecodeError as e:
        assert fh.bytes_read <= 3 * len(raw) + (64 << 10)
        assert e.reason and str(e).startswith("fuzz.wav: ")
        event(e.reason.split(" (")[0].split(":")[0])
        return
    event("decoded")
    assert fh.bytes_read <= 3 * len(raw) + (64 << 10)
    assert samples.shape == (info.num_frames, info.num_channels)
    assert str(samples.dtype) == info.signal_dtype
    blocks = list(wav.read_blocks(io.BytesIO(raw), path="fuzz.wav", block_frames=256, overlap=5))
    if info.num_frames:
        np.testing.assert_array_equal(_reassemble(blocks, 256, 5), samples)
