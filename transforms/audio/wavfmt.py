"""What a WAVE fmt chunk means: the soundfile subtype, the checks libsndfile would fail vaguely.

`subtype_for` maps a parsed fmt chunk (`transforms.audio.riff.FmtChunk`, RIFF or RIFX) to the
soundfile subtype libsndfile must report for it, or raises `riff.RiffError` with a precise reason
(an unsupported encoding by name, zero channels, a corrupt ADPCM / GSM block layout), before
libsndfile sees the file. `frames_present` counts the whole frames (or codec blocks) really in the
data chunk.
"""

from __future__ import annotations

from transforms.audio import riff

# WAVE format tags libsndfile decodes for us -> soundfile subtype (PCM by container width).
CODEC_TAGS = {
    0x0002: "MS_ADPCM",
    0x0006: "ALAW",
    0x0007: "ULAW",
    0x0011: "IMA_ADPCM",
    0x0031: "GSM610",
}
BLOCK_CODECS = ("IMA_ADPCM", "MS_ADPCM", "GSM610")
# Names for the tags people most often find inside a .wav, for the rejection message.
TAG_NAMES = {
    0x0040: "G.721 ADPCM",
    0x0045: "G.726 ADPCM",
    0x0050: "MPEG audio",
    0x0055: "MPEG Layer 3 (MP3)",
    0x0064: "G.726 ADPCM",
    0x0092: "Dolby AC-3 SPDIF",
    0x00FF: "AAC",
    0x0161: "Windows Media Audio",
    0x0162: "Windows Media Audio Pro",
    0x0163: "Windows Media Audio Lossless",
    0x1610: "HE-AAC",
    0x2000: "Dolby AC-3",
    0xF1AC: "FLAC",
}
MAX_CHANNELS = 1024  # libsndfile's SF_MAX_CHANNELS


def subtype_for(fmt: riff.FmtChunk) -> str:
    """The soundfile subtype a fmt chunk means, or RiffError naming the unsupported encoding."""
    tag, bits = fmt.format_tag, fmt.bits_per_sample
    if fmt.num_channels == 0:
        raise riff.RiffError("zero channels")
    if fmt.sample_rate == 0:
        raise riff.RiffError("zero sample rate")
    if fmt.sample_rate > 2**31 - 1:  # libsndfile's sample rate is a C int
        raise riff.RiffError(f"sample rate {fmt.sample_rate} out of range")
    if fmt.num_channels > MAX_CHANNELS:
        raise riff.RiffError(f"too many channels ({fmt.num_channels} > {MAX_CHANNELS})")
    if tag == 0x0001:
        if not 1 <= bits <= 32:
            raise riff.RiffError(f"unsupported encoding: {bits}-bit integer PCM")
        return ("PCM_U8", "PCM_16", "PCM_24", "PCM_32")[(bits + 7) // 8 - 1]
    if tag == 0x0003:
        if bits not in (32, 64):
            raise riff.RiffError(f"unsupported encoding: {bits}-bit IEEE float")
        return "FLOAT" if bits == 32 else "DOUBLE"
    subtype = CODEC_TAGS.get(tag)
    if subtype is None or (fmt.extensible and subtype in BLOCK_CODECS):
        name = TAG_NAMES.get(tag, "unknown")
        raise riff.RiffError(f"unsupported encoding: {name} (WAVE format tag 0x{tag:04X})")
    if subtype in BLOCK_CODECS:
        _check_block_codec(fmt, subtype)
    return subtype


def _check_block_codec(fmt: riff.FmtChunk, subtype: str) -> None:
    """The block layout checks libsndfile makes, with a reason instead of "internal error"."""
    ba, spb, ch = fmt.block_align, fmt.samples_per_block, fmt.num_channels
    if subtype == "GSM610":
        if ch != 1:  # libsndfile decodes mono GSM 6.10 only
            raise riff.RiffError(f"unsupported encoding: GSM610 with {ch} channels")
        if (ba, spb) != (65, 320):
            raise riff.RiffError(
                f"corrupt GSM610 header (block align {ba}, {spb} samples per block; "
                f"expected 65 and 320)"
            )
        return
    if ch > 2:  # libsndfile's ADPCM decoders handle mono and stereo only
        raise riff.RiffError(f"unsupported encoding: {subtype} with {ch} channels")
    if fmt.bits_per_sample != 4:
        raise riff.RiffError(f"corrupt {subtype} header ({fmt.bits_per_sample} bits per sample)")
    header = 4 if subtype == "IMA_ADPCM" else 7  # block header bytes per channel
    if ba <= header * ch:
        raise riff.RiffError(f"corrupt {subtype} header (block align {ba})")
    expected = 2 * (ba - 4 * ch) // ch + 1 if subtype == "IMA_ADPCM" else 2 * (ba - 6 * ch) // ch
    if spb != expected:
        raise riff.RiffError(
            f"corrupt {subtype} header (block align {ba} holds {expected} samples per block, "
            f"the header says {spb})"
        )


def frames_present(layout: riff.WaveLayout, subtype: str) -> int:
    """Whole frames in the data bytes really present (whole blocks for block codecs)."""
    fmt = layout.fmt
    if subtype in BLOCK_CODECS:
        return (layout.data_size // fmt.block_align) * fmt.samples_per_block
    bytes_per_sample = 1 if subtype in ("ULAW", "ALAW") else (fmt.bits_per_sample + 7) // 8
    return layout.data_size // (bytes_per_sample * fmt.num_channels)
