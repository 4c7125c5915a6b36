"""Big-endian RIFX with WAVE_FORMAT_EXTENSIBLE decodes bit-exactly (issue 26, item 1).

libsndfile 1.2.2 refuses RIFX WAVE_FORMAT_EXTENSIBLE ("unimplemented format"), and writers store
the sub-format GUID in two layouts: Data1 / Data2 / Data3 big-endian (scipy's test file), or the
little-endian GUID bytes after a big-endian tag (sox -B, for every 24- and 32-bit file and every
8- and 16-bit one of more than 2 channels). `transforms.audio.riff` reads both and shows
libsndfile an equivalent plain fmt chunk in front of the untouched data.

The fixtures (tests/fixtures/wav/rifx/, see its README.md) come from independent writers; each is
compared, bit for bit, with scipy.io.wavfile's reading of it and / or the little-endian copy sox
made of it (scipy, soundfile). Float, u-law and A-law sub-formats, which sox writes plain, are
read again after rewriting their fmt chunk as WAVE_FORMAT_EXTENSIBLE in both GUID layouts.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from tests.support import formatgen
from transforms.audio import riff, wav

FIXTURES = formatgen.RIFX_FIXTURES
LE_REFS = ("scipy le", "soundfile le")


class Fixture(NamedTuple):
    """What a committed RIFX fixture holds and which independent decoders read it.

    Attributes:
      subtype: the soundfile subtype.
      channels: channels per frame.
      rate: frames per second.
      guid: the sub-format GUID layout of its WAVE_FORMAT_EXTENSIBLE fmt chunk, None if plain.
      refs: the keys of `formatgen.rifx_fixture_references` for it.
    """

    subtype: str
    channels: int
    rate: int
    guid: str | None
    refs: tuple[str, ...]


TABLE = {
    "sox-pcm8-3ch.wav": Fixture("PCM_U8", 3, 8000, "sox", LE_REFS),
    "sox-pcm16-3ch.wav": Fixture("PCM_16", 3, 8000, "sox", LE_REFS),
    "sox-pcm24-2ch.wav": Fixture("PCM_24", 2, 8000, "sox", LE_REFS),
    "sox-pcm32-1ch.wav": Fixture("PCM_32", 1, 8000, "sox", LE_REFS),
    "sox-float32-2ch.wav": Fixture("FLOAT", 2, 8000, None, ("scipy", *LE_REFS)),
    "sox-float64-1ch.wav": Fixture("DOUBLE", 1, 8000, None, ("scipy", *LE_REFS)),
    "sox-ulaw-1ch.wav": Fixture("ULAW", 1, 8000, None, ("soundfile le",)),  # scipy: no codecs
    "sox-alaw-2ch.wav": Fixture("ALAW", 2, 8000, None, ("soundfile le",)),
    "test-44100Hz-be-1ch-4bytes.wav": Fixture("PCM_32", 1, 44100, "fields", ("scipy",)),
    "test-44100Hz-2ch-32bit-float-be.wav": Fixture("FLOAT", 2, 44100, None, ("scipy",)),
    "test-8000Hz-be-3ch-5S-24bit.wav": Fixture("PCM_24", 3, 8000, None, ("scipy",)),
}
_KS_TAIL_LE = bytes.fromhex("000000001000800000aa00389b71")  # a little-endian GUID after its tag
_RIFX_LABELS = [k for k, e in formatgen.ENCODINGS.items() if e.container == "RIFX"]


def _assert_bit_exact(got: np.ndarray, want: np.ndarray, what: str) -> None:
    np.testing.assert_array_equal(got, want, err_msg=what)  # a readable diff first
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), what


def _decode_checked(raw: bytes, name: str, fx: Fixture) -> np.ndarray:
    """Decodes `raw` three ways (decode, read_info, read_blocks), which must agree."""
    info, samples = wav.decode(io.BytesIO(raw), path=name)
    assert (info.subtype, info.num_channels, info.sample_rate) == fx[:3], (name, info)
    assert info.container == "WAV" and info.num_frames == len(samples)
    assert samples.dtype == np.dtype(info.signal_dtype)
    assert wav.read_info(io.BytesIO(raw), path=name) == info
    blocks = wav.read_blocks(io.BytesIO(raw), path=name, block_frames=97, overlap=3, info=info)
    parts = [block if k == 0 else block[3:] for k, (_, block) in enumerate(blocks)]
    _assert_bit_exact(np.concatenate(parts), samples, f"{name}: read_blocks")
    return samples


def test_fixture_table_is_complete_and_headers_are_as_listed():
    assert sorted(p.name for p in FIXTURES.glob("*.wav")) == sorted(TABLE)
    sox = sorted(name for name in TABLE if name.startswith("sox-"))
    assert sorted(p.name for p in (FIXTURES / "le").glob("*.wav")) == sox
    for name, fx in TABLE.items():
        raw = (FIXTURES / name).read_bytes()
        assert len(raw) < 20_000 and raw[:4] == b"RIFX" and raw[12:16] == b"fmt ", name
        fmt = raw[20 : 20 + struct.unpack(">I", raw[16:20])[0]]
        assert (struct.unpack(">H", fmt[:2])[0] == riff.WAVE_FORMAT_EXTENSIBLE) == bool(fx.guid)
        if fx.guid == "sox":  # the tag big-endian, then the little-endian GUID bytes
            assert fmt[26:40] == _KS_TAIL_LE, name
        elif fx.guid == "fields":  # Data1 = 0x00000001, Data2 = 0, Data3 = 0x0010, big-endian
            assert fmt[24:32] == bytes.fromhex("0000000100000010"), name
    for name in sox:
        assert (FIXTURES / "le" / name).read_bytes()[:4] == b"RIFF", name


@pytest.mark.parametrize("name", sorted(TABLE))
def test_rifx_fixture_is_read_bit_exactly(name):
    fx = TABLE[name]
    samples = _decode_checked((FIXTURES / name).read_bytes(), name, fx)
    refs = formatgen.rifx_fixture_references(name, fx.subtype)
    assert sorted(refs) == sorted(fx.refs)  # no reference silently missing
    for ref_name, ref in refs.items():
        _assert_bit_exact(samples, ref, f"{name} vs {ref_name}")


@pytest.mark.parametrize("guid", formatgen.RIFX_GUIDS)
@pytest.mark.parametrize("name", sorted(TABLE))
def test_fixture_rewritten_as_extensible_reads_the_same(name, guid):
    """Every sub-format, in both GUID layouts, over data from an independent writer."""
    fx = TABLE[name]
    raw = formatgen.rifx_as_extensible((FIXTURES / name).read_bytes(), guid=guid)
    assert struct.unpack(">H", raw[20:22])[0] == riff.WAVE_FORMAT_EXTENSIBLE
    samples = _decode_checked(raw, name, fx._replace(guid=guid))
    for ref_name, ref in formatgen.rifx_fixture_references(name, fx.subtype).items():
        _assert_bit_exact(samples, ref, f"{name} ({guid} GUID) vs {ref_name}")


@pytest.mark.parametrize("variant", ["plain", "chunks", "datazero", "truncated"])
@pytest.mark.parametrize("guid", formatgen.RIFX_GUIDS)
@pytest.mark.parametrize("label", _RIFX_LABELS)
def test_generated_extensible_rifx_is_read_bit_exactly(tmp_path, label, guid, variant):
    enc = formatgen.ENCODINGS[label]
    samples = formatgen.values(enc.subtype, 1001, num_channels=enc.channels, seed=3)
    path = formatgen.write_rifx(
        tmp_path / "x.wav",
        samples,
        sample_rate=22050,
        subtype=enc.subtype,
        extra_chunks=variant == "chunks",
        data_size_override=0 if variant == "datazero" else None,
        guid=guid,
    )
    raw = Path(path).read_bytes()
    if variant == "truncated":  # a cut download: the whole frames before the cut
        frame_bytes = (len(raw) - 68) // len(samples)  # 68 header bytes: RIFX, fmt (40), data
        raw = raw[:-5]
        samples = samples[: (len(raw) - 68) // frame_bytes]
    fx = Fixture(enc.subtype, enc.channels, 22050, guid, ())
    decoded = _decode_checked(raw, label, fx)
    _assert_bit_exact(decoded, samples, f"{label} ({guid} GUID, {variant})")
    if guid == "fields" and variant in ("plain", "chunks"):  # scipy reads this layout
        scipy_ref = formatgen.scipy_samples(path, enc.subtype)
        _assert_bit_exact(decoded, scipy_ref, f"{label}: scipy")


def _fmt_body(guid: bytes, *, big_endian: bool) -> bytes:
    e = ">" if big_endian else "<"
    return struct.pack(e + "HHIIHHHHI", 0xFFFE, 2, 8000, 32000, 4, 16, 22, 16, 3) + guid


def _rifx_file(fmt_body: bytes, data: bytes) -> bytes:
    body = b"WAVEfmt " + struct.pack(">I", len(fmt_body)) + fmt_body
    body += b"data" + struct.pack(">I", len(data)) + data
    return b"RIFX" + struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("guid", formatgen.RIFX_GUIDS)
@pytest.mark.parametrize("tag,bits", [(1, 8), (1, 16), (1, 24), (1, 32), (3, 32), (3, 64)])
def test_parse_fmt_reads_both_rifx_guid_layouts(guid, tag, bits):
    plain = struct.pack(">HHIIHH", tag, 2, 8000, 8000 * bits // 4, bits // 4, bits)
    body = formatgen.rifx_extensible_fmt(plain, guid=guid)
    fmt = riff.parse_fmt(body, big_endian=True)
    assert (fmt.format_tag, fmt.extensible, fmt.big_endian) == (tag, True, True)
    assert (fmt.num_channels, fmt.sample_rate, fmt.block_align) == (2, 8000, bits // 4)
    assert fmt.bits_per_sample == bits and fmt.raw == body
    header = riff.canonical_header(fmt, 1000)
    assert header[:4] == b"RIFX" and header[12:16] == b"fmt "
    size = struct.unpack(">I", header[16:20])[0]
    assert size == (16 if tag == 1 else 18)  # plain PCM; others with cbSize = 0
    assert header[20 : 20 + size] == plain + b"\0\0" * (tag != 1) == riff.plain_fmt(fmt)
    assert header[20 + size :] == b"data" + struct.pack(">I", 1000)


def test_little_endian_extensible_keeps_its_fmt_chunk():
    body = _fmt_body(b"\x01\x00" + _KS_TAIL_LE, big_endian=False)
    fmt = riff.parse_fmt(body)
    assert (fmt.format_tag, fmt.extensible) == (1, True)
    header = riff.canonical_header(fmt, 1000)
    assert header[:4] == b"RIFF" and header[20:60] == body  # libsndfile reads it as it is


@pytest.mark.parametrize(
    "guid_hex",
    [
        "00000001072111d38644c8c1ca000000",  # KSDATAFORMAT_SUBTYPE_AMBISONIC_B_FORMAT_PCM
        "00000003000000108000000000000000",  # Data4 not KSDATAFORMAT's
        "0000000100000011800000aa00389b71",  # Data3 0x0011
        "0001000100000010800000aa00389b71",  # Data1 above 16 bits
        "99999999999999999999999999999999",
    ],
)
def test_big_endian_unknown_sub_format_is_refused_with_its_guid(guid_hex):
    body = _fmt_body(bytes.fromhex(guid_hex), big_endian=True)
    reason = f"unsupported encoding: WAVE_FORMAT_EXTENSIBLE sub-format {guid_hex}"
    with pytest.raises(riff.RiffError) as e:
        riff.parse_fmt(body, big_endian=True)
    assert str(e.value) == reason
    with pytest.raises(wav.WavDecodeError) as e:
        wav.decode(io.BytesIO(_rifx_file(body, bytes(40))), path="x.wav")
    assert e.value.reason == reason


def test_rifx_guid_bytes_copied_little_endian_name_the_tag_read():
    """A little-endian GUID copied as is into RIFX reads as tag 0x0100 (no writer known)."""
    body = _fmt_body(b"\x01\x00" + _KS_TAIL_LE, big_endian=True)
    with pytest.raises(wav.WavDecodeError) as e:
        wav.decode(io.BytesIO(_rifx_file(body, bytes(40))), path="x.wav")
    assert e.value.reason == "unsupported encoding: unknown (WAVE format tag 0x0100)"


def test_rifx_guid_layout_is_not_read_in_riff():
    guid = bytes.fromhex("0000000100000010800000aa00389b71")  # big-endian fields
    with pytest.raises(riff.RiffError, match=f"sub-format {guid.hex()}$"):
        riff.parse_fmt(_fmt_body(guid, big_endian=False))
