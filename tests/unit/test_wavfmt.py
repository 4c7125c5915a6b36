"""transforms.audio.wavfmt: the soundfile subtype a WAVE fmt chunk means, and the reason for one
libsndfile would refuse vaguely. Files written by libsndfile itself (soundfile), in every WAV
encoding it writes, are walked (`riff.walk`) and their fmt chunk must mean the subtype and frame
count libsndfile reports (GSM 6.10: the whole blocks there, one fewer than libsndfile claims);
fmt chunks edited field by field must be refused with their reason."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import soundfile as sf

from transforms.audio import riff, wavfmt

WRITTEN = [
    ("PCM_U8", 1),
    ("PCM_16", 2),
    ("PCM_24", 1),
    ("PCM_32", 3),
    ("FLOAT", 2),
    ("DOUBLE", 1),
    ("ULAW", 1),
    ("ALAW", 2),
    ("IMA_ADPCM", 1),
    ("IMA_ADPCM", 2),
    ("MS_ADPCM", 1),
    ("MS_ADPCM", 2),
    ("GSM610", 1),
]


def _written(subtype: str, channels: int) -> bytes:
    rng = np.random.default_rng(len(subtype) + channels)
    samples = rng.uniform(-0.5, 0.5, (4001, channels))
    out = io.BytesIO()
    sf.write(out, samples, 8000, subtype=subtype, format="WAV")
    return out.getvalue()


@pytest.mark.parametrize(("subtype", "channels"), WRITTEN)
def test_a_written_files_fmt_chunk_means_libsndfiles_subtype_and_frames(subtype, channels):
    raw = _written(subtype, channels)
    layout = riff.walk(io.BytesIO(raw))
    info = sf.info(io.BytesIO(raw))
    assert info.subtype == subtype
    assert wavfmt.subtype_for(layout.fmt) == subtype
    frames = wavfmt.frames_present(layout, subtype)
    if subtype == "GSM610":  # 13 whole blocks of 65 bytes; libsndfile counts the pad byte of
        assert layout.data_size == 13 * 65 and frames == 13 * 320  # the odd-sized data chunk
        assert info.frames == frames + 320  # as a 14th block: decoding reads the blocks there
    else:
        assert frames == info.frames


PCM16 = riff.FmtChunk(
    format_tag=1,
    extensible=False,
    num_channels=1,
    sample_rate=8000,
    block_align=2,
    bits_per_sample=16,
    samples_per_block=0,
    raw=b"",
)
IMA = dataclasses.replace(
    PCM16, format_tag=0x11, block_align=256, bits_per_sample=4, samples_per_block=505
)
MS = dataclasses.replace(IMA, format_tag=0x2, samples_per_block=500)
GSM = dataclasses.replace(
    PCM16, format_tag=0x31, block_align=65, bits_per_sample=0, samples_per_block=320
)


@pytest.mark.parametrize(
    ("fmt", "subtype"),
    [
        (dataclasses.replace(PCM16, bits_per_sample=8), "PCM_U8"),
        (dataclasses.replace(PCM16, bits_per_sample=12), "PCM_16"),  # by container width
        (dataclasses.replace(PCM16, bits_per_sample=20), "PCM_24"),
        (dataclasses.replace(PCM16, bits_per_sample=32, extensible=True), "PCM_32"),
        (dataclasses.replace(PCM16, format_tag=3, bits_per_sample=32), "FLOAT"),
        (dataclasses.replace(PCM16, format_tag=3, bits_per_sample=64), "DOUBLE"),
        (dataclasses.replace(PCM16, format_tag=6, bits_per_sample=8), "ALAW"),
        (dataclasses.replace(PCM16, format_tag=7, bits_per_sample=8), "ULAW"),
        (dataclasses.replace(PCM16, num_channels=wavfmt.MAX_CHANNELS), "PCM_16"),
        (dataclasses.replace(PCM16, sample_rate=2**31 - 1), "PCM_16"),
        (IMA, "IMA_ADPCM"),
        (dataclasses.replace(IMA, num_channels=2, samples_per_block=249), "IMA_ADPCM"),
        (MS, "MS_ADPCM"),
        (dataclasses.replace(MS, num_channels=2, samples_per_block=244), "MS_ADPCM"),
        (GSM, "GSM610"),
    ],
)
def test_subtype_for_each_encoding(fmt, subtype):
    assert wavfmt.subtype_for(fmt) == subtype


@pytest.mark.parametrize(
    ("fmt", "reason"),
    [
        (dataclasses.replace(PCM16, num_channels=0), "zero channels"),
        (dataclasses.replace(PCM16, sample_rate=0), "zero sample rate"),
        (dataclasses.replace(PCM16, sample_rate=2**31), "sample rate 2147483648 out of range"),
        (dataclasses.replace(PCM16, num_channels=1025), "too many channels (1025 > 1024)"),
        (
            dataclasses.replace(PCM16, bits_per_sample=33),
            "unsupported encoding: 33-bit integer PCM",
        ),
        (
            dataclasses.replace(PCM16, bits_per_sample=0),
            "unsupported encoding: 0-bit integer PCM",
        ),
        (
            dataclasses.replace(PCM16, format_tag=3, bits_per_sample=16),
            "unsupported encoding: 16-bit IEEE float",
        ),
        (
            dataclasses.replace(PCM16, format_tag=0x55),
            "unsupported encoding: MPEG Layer 3 (MP3) (WAVE format tag 0x0055)",
        ),
        (
            dataclasses.replace(PCM16, format_tag=0x1234),
            "unsupported encoding: unknown (WAVE format tag 0x1234)",
        ),
        (
            dataclasses.replace(IMA, extensible=True),
            "unsupported encoding: unknown (WAVE format tag 0x0011)",
        ),
        (
            dataclasses.replace(GSM, num_channels=2),
            "unsupported encoding: GSM610 with 2 channels",
        ),
        (
            dataclasses.replace(GSM, block_align=64),
            "corrupt GSM610 header (block align 64, 320 samples per block; expected 65 and 320)",
        ),
        (
            dataclasses.replace(IMA, num_channels=3),
            "unsupported encoding: IMA_ADPCM with 3 channels",
        ),
        (
            dataclasses.replace(MS, bits_per_sample=3),
            "corrupt MS_ADPCM header (3 bits per sample)",
        ),
        (dataclasses.replace(IMA, block_align=4), "corrupt IMA_ADPCM header (block align 4)"),
        (dataclasses.replace(MS, block_align=7), "corrupt MS_ADPCM header (block align 7)"),
        (
            dataclasses.replace(IMA, samples_per_block=500),
            "corrupt IMA_ADPCM header (block align 256 holds 505 samples per block, the header "
            "says 500)",
        ),
        (
            dataclasses.replace(MS, samples_per_block=505),
            "corrupt MS_ADPCM header (block align 256 holds 500 samples per block, the header "
            "says 505)",
        ),
    ],
)
def test_an_encoding_libsndfile_would_refuse_is_refused_with_its_reason(fmt, reason):
    with pytest.raises(riff.RiffError) as e:
        wavfmt.subtype_for(fmt)
    assert str(e.value) == reason


def test_frames_present_counts_whole_frames_or_whole_blocks():
    def layout(fmt: riff.FmtChunk, data_size: int) -> riff.WaveLayout:
        return riff.WaveLayout(
            file_size=44 + data_size,
            fmt=fmt,
            data_offset=44,
            declared_data_size=data_size,
            data_size=data_size,
        )

    stereo24 = dataclasses.replace(PCM16, num_channels=2, bits_per_sample=24, block_align=6)
    assert wavfmt.frames_present(layout(stereo24, 6 * 100 + 5), "PCM_24") == 100
    ulaw = dataclasses.replace(PCM16, format_tag=7, bits_per_sample=8, num_channels=3)
    assert wavfmt.frames_present(layout(ulaw, 3 * 7 + 2), "ULAW") == 7
    assert wavfmt.frames_present(layout(IMA, 256 * 3 + 255), "IMA_ADPCM") == 3 * 505
    assert wavfmt.frames_present(layout(GSM, 65 * 2), "GSM610") == 2 * 320
