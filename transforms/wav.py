"""Decode WAV files bit-exactly into int16 / int32 / float32 sample arrays.

libsndfile (through soundfile) decodes; `transforms.riff` checks the header first so that a bad
file fails with a specific reason, and repairs a wrong data-chunk size (see its docstring).

Sample value rule (`signal_dtype_for`, `full_scale_for`):

=======================================  =======  ==============================  ==========
encoding (soundfile subtype)             dtype    values                          full_scale
=======================================  =======  ==============================  ==========
PCM_U8                                   int16    stored byte - 128               128
PCM_16                                   int16    as stored                       32768
PCM_24                                   int32    as stored, in [-2**23, 2**23)   2**23
PCM_32                                   int32    as stored                       2**31
FLOAT, DOUBLE                            float32  as stored (DOUBLE rounded)      1.0
ULAW, ALAW, IMA_ADPCM, MS_ADPCM, GSM610  int16    libsndfile's 16-bit decode      32768
=======================================  =======  ==============================  ==========

Any other encoding is rejected with `WavDecodeError("unsupported encoding: ...")`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
import soundfile as sf

from transforms import riff

_SIGNAL_DTYPES = {
    "PCM_U8": "int16",
    "PCM_16": "int16",
    "PCM_24": "int32",
    "PCM_32": "int32",
    "FLOAT": "float32",
    "DOUBLE": "float32",
    "ULAW": "int16",
    "ALAW": "int16",
    "IMA_ADPCM": "int16",
    "MS_ADPCM": "int16",
    "GSM610": "int16",
}
_FULL_SCALES = {"PCM_U8": 128.0, "PCM_24": float(2**23), "PCM_32": float(2**31)}
# What soundfile is asked for, and the right shift that turns it into the stored value:
# libsndfile left-justifies PCM_U8 into int16 ((x - 128) << 8) and PCM_24 into int32 (x << 8).
_READ_AS = {"PCM_U8": ("int16", 8), "PCM_24": ("int32", 8)}

# WAVE format tags libsndfile decodes for us -> soundfile subtype (PCM by container width).
_CODEC_TAGS = {
    0x0002: "MS_ADPCM",
    0x0006: "ALAW",
    0x0007: "ULAW",
    0x0011: "IMA_ADPCM",
    0x0031: "GSM610",
}
_BLOCK_CODECS = ("IMA_ADPCM", "MS_ADPCM", "GSM610")
# Names for the tags people most often find inside a .wav, for the rejection message.
_TAG_NAMES = {
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
_MAX_CHANNELS = 1024  # libsndfile's SF_MAX_CHANNELS


class WavDecodeError(ValueError):
    """Specific, user-facing decode failure.

    Attributes:
      path: the file (for messages only).
      reason: why it cannot be decoded, e.g. "empty file" or "no data chunk".
    """

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self):  # pickle (Beam ships exceptions between processes) with both fields
        return (type(self), (self.path, self.reason))


@dataclasses.dataclass(frozen=True)
class WavInfo:
    """What a WAV file holds.

    Attributes:
      sample_rate: frames per second.
      num_channels: channels per frame.
      num_frames: frames really decodable (after repairing a wrong data-chunk size).
      subtype: soundfile subtype name (PCM_16, PCM_24, FLOAT, ULAW, IMA_ADPCM, ...).
      signal_dtype: "int16" | "int32" | "float32" (`signal_dtype_for`).
      full_scale: divisor that maps samples to [-1, 1) (`full_scale_for`).
    """

    sample_rate: int
    num_channels: int
    num_frames: int
    subtype: str
    signal_dtype: str
    full_scale: float


def signal_dtype_for(subtype: str) -> str:
    """The sample dtype for a soundfile subtype (raises ValueError for unsupported ones)."""
    try:
        return _SIGNAL_DTYPES[subtype]
    except KeyError:
        raise ValueError(f"unsupported encoding: {subtype}") from None


def full_scale_for(subtype: str) -> float:
    """The divisor mapping samples of `subtype` (as returned here) to [-1, 1)."""
    dtype = signal_dtype_for(subtype)
    return _FULL_SCALES.get(subtype, 1.0 if dtype == "float32" else 32768.0)


def _subtype_for(fmt: riff.FmtChunk) -> str:
    """The soundfile subtype a fmt chunk means, or RiffError naming the unsupported encoding."""
    tag, bits = fmt.format_tag, fmt.bits_per_sample
    if fmt.num_channels == 0:
        raise riff.RiffError("zero channels")
    if fmt.sample_rate == 0:
        raise riff.RiffError("zero sample rate")
    if fmt.sample_rate > 2**31 - 1:  # libsndfile's sample rate is a C int
        raise riff.RiffError(f"sample rate {fmt.sample_rate} out of range")
    if fmt.num_channels > _MAX_CHANNELS:
        raise riff.RiffError(f"too many channels ({fmt.num_channels} > {_MAX_CHANNELS})")
    if tag == 0x0001:
        if not 1 <= bits <= 32:
            raise riff.RiffError(f"unsupported encoding: {bits}-bit integer PCM")
        return ("PCM_U8", "PCM_16", "PCM_24", "PCM_32")[(bits + 7) // 8 - 1]
    if tag == 0x0003:
        if bits not in (32, 64):
            raise riff.RiffError(f"unsupported encoding: {bits}-bit IEEE float")
        return "FLOAT" if bits == 32 else "DOUBLE"
    subtype = _CODEC_TAGS.get(tag)
    if subtype is None or (fmt.extensible and subtype in _BLOCK_CODECS):
        name = _TAG_NAMES.get(tag, "unknown")
        raise riff.RiffError(f"unsupported encoding: {name} (WAVE format tag 0x{tag:04X})")
    if subtype in _BLOCK_CODECS:
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


def _frames_present(layout: riff.WaveLayout, subtype: str) -> int:
    """Whole frames in the data bytes really present (whole blocks for block codecs)."""
    fmt = layout.fmt
    if subtype in _BLOCK_CODECS:
        return (layout.data_size // fmt.block_align) * fmt.samples_per_block
    bytes_per_sample = 1 if subtype in ("ULAW", "ALAW") else (fmt.bits_per_sample + 7) // 8
    return layout.data_size // (bytes_per_sample * fmt.num_channels)


class _Opened:
    """A soundfile.SoundFile on a (possibly repaired) WAV file, plus its WavInfo."""

    def __init__(self, fileobj: BinaryIO, *, path: str):
        try:
            layout = riff.walk(fileobj)
            subtype = _subtype_for(layout.fmt)
        except riff.RiffError as e:
            raise WavDecodeError(path, str(e)) from None
        frames = _frames_present(layout, subtype)
        self._path = path
        want = (subtype, layout.fmt.num_channels, layout.fmt.sample_rate)
        self._guard = riff.GuardedReader(fileobj)
        error: WavDecodeError | None = None
        try:
            self.sound = self._open(self._guard)
            s = self.sound
            repair = s.frames < frames or (s.subtype, s.channels, s.samplerate) != want
            if repair:
                s.close()
        except WavDecodeError as e:
            error, repair = e, True
        if repair:
            # libsndfile reads 0 frames when the data size is 0 (streaming writers) and gives up
            # on some chunk layouts that the walk got through (a chunk id with non-ASCII bytes, an
            # odd-sized chunk without its pad byte). Show it a canonical header announcing the
            # whole frames / blocks really present, followed by the untouched audio bytes.
            unit = layout.fmt.block_align if subtype in _BLOCK_CODECS else 1
            length = layout.data_size - layout.data_size % unit
            header = riff.canonical_header(layout.fmt, length)
            offset = layout.data_offset
            view = riff.SplicedReader(fileobj, header=header, offset=offset, length=length)
            self._guard = riff.GuardedReader(view)
            try:
                self.sound = self._open(self._guard)
            except WavDecodeError:
                if error is not None:
                    raise error from None
                raise
        s = self.sound
        if (s.subtype, s.channels, s.samplerate) != want:
            s.close()
            raise WavDecodeError(
                path,
                f"libsndfile reads it as {s.subtype}, {s.channels} channels, {s.samplerate} Hz; "
                f"the header says {subtype}, {want[1]} channels, {want[2]} Hz",
            )
        self.info = WavInfo(
            sample_rate=s.samplerate,
            num_channels=s.channels,
            num_frames=min(frames, s.frames),
            subtype=subtype,
            signal_dtype=signal_dtype_for(subtype),
            full_scale=full_scale_for(subtype),
        )
        self._read_as, self._shift = _READ_AS.get(subtype, (self.info.signal_dtype, 0))
        self._left = self.info.num_frames

    def _open(self, guard: riff.GuardedReader) -> sf.SoundFile:
        try:
            guard.seek(0)  # libsndfile takes the current position as the start of the file
            sound = sf.SoundFile(guard)
        except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
            guard.check()
            message = getattr(e, "error_string", str(e))
            raise WavDecodeError(self._path, f"libsndfile cannot decode it: {message}") from None
        guard.check()
        return sound

    def read(self, frames: int) -> np.ndarray:
        """Up to `frames` more frames, [n, channels] in info.signal_dtype (n == 0 at the end)."""
        n = min(frames, self._left)
        try:
            out = self.sound.read(n, dtype=self._read_as, always_2d=True)
        except (sf.LibsndfileError, RuntimeError) as e:
            self._guard.check()
            raise WavDecodeError(self._path, f"libsndfile cannot decode it: {e}") from None
        self._guard.check()
        if self._shift:
            out >>= self._shift  # arithmetic shift: exact, keeps the sign
            out = out.astype(self.info.signal_dtype, copy=False)
        self._left -= len(out)
        if len(out) < n:  # short read (file changed under us): never return more than decoded
            self._left = 0
        return out

    def close(self) -> None:
        self.sound.close()

    def __enter__(self) -> _Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_info(fileobj: BinaryIO, *, path: str) -> WavInfo:
    """Read a WAV file's header (cheap: a few small reads, no audio).

    Args:
      fileobj: seekable binary file object (open(path, "rb"), io.BytesIO, Beam FileSystems).
      path: the file's name, for messages only.

    Raises:
      WavDecodeError: the file cannot be decoded; `.reason` says why.
    """
    with _Opened(fileobj, path=path) as opened:
        return opened.info


def read_blocks(
    fileobj: BinaryIO,
    *,
    path: str,
    block_frames: int,
    overlap: int = 0,
    info: WavInfo | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Decode a WAV file block by block, in memory bounded by `block_frames`.

    Block k starts at frame k * (block_frames - overlap) and holds `block_frames` frames (the
    last block may be shorter); a block is only yielded when it holds frames not yet yielded,
    so a file of 0 frames yields nothing.

    Args:
      fileobj: seekable binary file object.
      path: the file's name, for messages only.
      block_frames: frames per block (> overlap).
      overlap: frames shared by consecutive blocks (>= 0).
      info: the file's WavInfo from `read_info`, if known; checked against the file.

    Yields:
      (start_frame, samples) with samples [frames, channels] in info.signal_dtype. Each array
      is new (safe to keep).

    Raises:
      ValueError: bad block_frames / overlap (at the call), or `info` describes another file.
      WavDecodeError: the file cannot be decoded (when iteration starts).
    """
    if overlap < 0 or block_frames <= overlap:
        raise ValueError(f"need 0 <= overlap < block_frames, got {overlap=} {block_frames=}")
    return _blocks(fileobj, path=path, block_frames=block_frames, overlap=overlap, info=info)


def _blocks(
    fileobj: BinaryIO, *, path: str, block_frames: int, overlap: int, info: WavInfo | None
) -> Iterator[tuple[int, np.ndarray]]:
    hop = block_frames - overlap
    with _Opened(fileobj, path=path) as opened:
        if info is not None and info != opened.info:
            raise ValueError(f"{path}: info {info} does not describe this file ({opened.info})")
        block = opened.read(block_frames)
        start = 0
        while len(block):
            yield start, block
            if len(block) < block_frames:
                return
            new = opened.read(hop)
            if not len(new):
                return
            block = np.concatenate([block[hop:], new])
            start += hop


def decode(fileobj: BinaryIO, *, path: str) -> tuple[WavInfo, np.ndarray]:
    """Decode a whole WAV file.

    Args:
      fileobj: seekable binary file object.
      path: the file's name, for messages only.

    Returns:
      (info, samples) with samples [info.num_frames, info.num_channels] in info.signal_dtype.

    Raises:
      WavDecodeError: the file cannot be decoded.
    """
    with _Opened(fileobj, path=path) as opened:
        info = opened.info
        samples = opened.read(info.num_frames)
    if len(samples) != info.num_frames:
        info = dataclasses.replace(info, num_frames=len(samples))
    return info, samples
