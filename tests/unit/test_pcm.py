"""transforms.audio.pcm: plain PCM / float WAV read without libsndfile gives libsndfile's result.

Every file is decoded twice by `transforms.audio.wav`: through `pcm` (the default) and through
libsndfile (`plain=False`, the path every other encoding takes); the two must agree on the header
and on every sample's bits, or reject the file with the same reason. Inputs: the format corpus,
the committed RIFX fixtures, big-endian files of every width and mutated headers (hypothesis).
"""

from __future__ import annotations

import functools
import io
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fuzz.wav_target import check_wav
from tests.support import formatgen, wavgen
from transforms.audio import pcm, riff, wav


def _outcome(raw: bytes, *, plain: bool) -> tuple:
    """(info, dtype, sample bytes) of `raw` decoded one way, or ("rejected", reason)."""
    try:
        info, samples = wav._decode(io.BytesIO(raw), path="x.wav", plain=plain)
    except wav.WavDecodeError as e:
        return ("rejected", e.reason)
    return (info, samples.dtype.str, samples.shape, samples.tobytes())


def _same_both_ways(raw: bytes) -> tuple:
    """Our outcome, checked against libsndfile's: equal, or libsndfile alone refuses the file
    (it sniffs the samples of a valid PCM file for other codecs' signatures: the fuzz corpus
    holds two such files)."""
    ours, theirs = _outcome(raw, plain=True), _outcome(raw, plain=False)
    if ours[0] != "rejected" and theirs[0] == "rejected":
        assert theirs[1].startswith(wav.LIBSNDFILE_REFUSES), theirs
        event("libsndfile alone refuses")
    else:
        assert ours == theirs
    return ours


@functools.cache
def _corpus_files() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as d:
        corpus = wavgen.make_format_corpus(d, num_frames=3001)
        return {label: Path(p).read_bytes() for label, p in corpus.items()}


@pytest.mark.parametrize("label", wavgen.FORMAT_LABELS)
def test_the_format_corpus_decodes_as_libsndfile_decodes_it(label):
    info = _same_both_ways(_corpus_files()[label])[0]
    assert info.subtype == wavgen.SUBTYPES[label]


@pytest.mark.parametrize(
    "path", sorted(formatgen.RIFX_FIXTURES.glob("*.wav")), ids=lambda p: p.name
)
def test_committed_rifx_files_decode_as_libsndfile_decodes_them(path):
    _same_both_ways(path.read_bytes())


def _wav(
    tag: int, bits: int, channels: int, payload: bytes, *, e: str = "<", block_align: int = 0
) -> bytes:
    width = (bits + 7) // 8
    align = block_align or width * channels
    fmt = struct.pack(e + "HHIIHH", tag, channels, 8000, 8000 * align, align, bits)
    body = b"WAVE" + wavgen._chunk(b"fmt ", fmt, e=e) + wavgen._chunk(b"data", payload, e=e)
    return (b"RIFX" if e == ">" else b"RIFF") + struct.pack(e + "I", len(body)) + body


_PLAIN = [(1, 8), (1, 16), (1, 24), (1, 32), (3, 32), (3, 64)]  # (format tag, bits)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("e", ["<", ">"])
@pytest.mark.parametrize(("tag", "bits"), _PLAIN)
def test_every_width_both_byte_orders_and_a_cut_frame(tag, bits, e, channels):
    payload = np.random.default_rng(bits).integers(0, 256, 60 * channels * bits // 8, np.uint8)
    for cut in (0, 1):  # a last frame cut short is left out by both
        raw = _wav(tag, bits, channels, payload.tobytes()[: len(payload) - cut], e=e)
        info, dtype, shape, _ = _same_both_ways(raw)
        assert shape == (info.num_frames, channels) == (60 - cut, channels)
        assert pcm.plain(riff.walk(io.BytesIO(raw)), info.subtype)


def test_big_endian_values_are_the_stored_ones():
    stored = [-(2**23), -1, 1, 2**23 - 1]
    raw = _wav(1, 24, 1, b"".join(v.to_bytes(3, "big", signed=True) for v in stored), e=">")
    _, samples = wav.decode(io.BytesIO(raw), path="x.wav")
    assert samples[:, 0].tolist() == stored and samples.dtype == np.int32
    floats = np.array([-0.0, np.nan, 2.0**-1074], ">f8")
    _, samples = wav.decode(io.BytesIO(_wav(3, 64, 1, floats.tobytes(), e=">")), path="x.wav")
    np.testing.assert_array_equal(samples[:, 0].view(np.uint64), floats.view(">u8"))


@pytest.mark.parametrize(
    ("tag", "bits", "channels", "block_align", "expected"),
    [
        (1, 16, 2, 4, True),
        (1, 16, 2, 6, False),  # padded frames: libsndfile's reading
        (1, 12, 1, 2, False),  # 12 bits in 16: libsndfile's reading
        (1, 20, 2, 6, False),
        (3, 32, 1, 4, True),
        (7, 8, 1, 1, False),  # u-law: a codec
    ],
)
def test_which_layouts_are_plain(tag, bits, channels, block_align, expected):
    raw = _wav(tag, bits, channels, bytes(60), block_align=block_align)
    subtype = wav._Opened(io.BytesIO(raw), path="x.wav").info.subtype
    assert pcm.plain(riff.walk(io.BytesIO(raw)), subtype) is expected
    _same_both_ways(raw)


def test_a_data_chunk_before_the_fmt_chunk_is_left_to_libsndfile():
    """An RF64 file with a 28-byte data chunk before fmt and another after it: libsndfile reads
    the second (found by atheris); such a layout keeps libsndfile's reading."""
    raw = (formatgen.RIFX_FIXTURES.parents[1] / "fuzz_wav" / _DATA_FIRST).read_bytes()
    layout = riff.walk(io.BytesIO(raw))
    assert layout.data_offset < layout.fmt_offset
    assert not pcm.plain(layout, "PCM_U8")
    assert _same_both_ways(raw)[0].num_frames == 28
    assert check_wav(raw) == "decoded"


def test_large_reads_come_in_pieces_into_one_array(tmp_path):
    """Memory: the output plus one piece, whatever is asked for at once."""
    import tracemalloc

    frames = (pcm._PIECE_BYTES // 4) * 30 + 5  # 30 pieces and a bit, stereo 16-bit
    samples = wavgen.synth(frames, num_channels=2)
    path = wavgen.write_wav(tmp_path / "x.wav", samples, sample_rate=8000, subtype="PCM_16")
    with open(path, "rb") as f:
        tracemalloc.start()
        try:
            _, decoded = wav.decode(f, path=str(path))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < decoded.nbytes + 2.5 * pcm._PIECE_BYTES
    np.testing.assert_array_equal(decoded, wavgen.expected_samples(path))


@functools.cache
def _seed_files() -> tuple[bytes, ...]:
    return tuple(
        raw for label, raw in _corpus_files().items() if wavgen.SUBTYPES[label] in pcm._STORED
    )


def _mutate(seed: int, edits: list[tuple[int, int, int]], cut: int) -> bytes:
    raw = bytearray(_seed_files()[seed % len(_seed_files())])
    for kind, pos, value in edits:
        pos = 4 + pos % (min(len(raw), 120) - 8)  # the header, past the RIFF id
        width = (1, 2, 4)[kind]
        choices = (0, 1, 3, value, 0xFFFFFFFF, 0x7FFFFFFF)
        number = (value if kind == 0 else choices[value % len(choices)]) % (1 << 8 * width)
        raw[pos : pos + width] = number.to_bytes(width, "little")
    return bytes(raw[: len(raw) - cut % len(raw)]) if cut else bytes(raw)


_EDITS = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 200), st.integers(0, 2**32 - 1)), max_size=4
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.builds(_mutate, st.integers(0, 100), _EDITS, st.integers(0, 5000)))
def test_mutated_headers_decode_or_fail_as_with_libsndfile(raw):
    ours = _same_both_ways(raw)
    event("rejected" if ours[0] == "rejected" else ours[0].subtype)


_DATA_FIRST = "1671955351a1d1ca994c218c1e3fbac6e832b015"
_SNIFFED = ("6aabea0498fa1ccb913c49880bd5f5278522c95e", "9c76d4de548689875db3bb4162791cfcf52dbb05")


@pytest.mark.parametrize("name", _SNIFFED)
def test_plain_pcm_libsndfile_sniffs_as_another_codec_is_read_as_stored(name, tmp_path):
    """Samples that start with b"OggS": libsndfile 1.2.2 says "Data is in WAVPACK format" or
    "No 'data' chunk marker"; the walk found a valid 8-bit / 64-bit float data chunk."""
    raw = (formatgen.RIFX_FIXTURES.parents[1] / "fuzz_wav" / name).read_bytes()
    assert _outcome(raw, plain=False)[0] == "rejected"
    (tmp_path / "x.wav").write_bytes(raw)
    _, samples = wav.decode(io.BytesIO(raw), path="x.wav")
    expected = wavgen.expected_samples(tmp_path / "x.wav")
    np.testing.assert_array_equal(
        samples.view(f"u{samples.itemsize}"), expected.view(f"u{samples.itemsize}")
    )
    assert check_wav(raw) == "decoded"
