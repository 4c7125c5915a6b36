"""Decode audio files bit-exactly into int16 / int32 / float32 / float64 sample arrays.

WAV (RIFF, RF64, BW64, big-endian RIFX), FLAC, Ogg Vorbis and AIFF / AIFF-C, recognised
by their first bytes (`transforms.audio.formats`). libsndfile (through soundfile) decodes, except
plain PCM / IEEE-float WAV, whose samples `transforms.audio.pcm` reads from the data chunk. For WAV,
`transforms.audio.riff` / `transforms.audio.wavfmt` check the header first so that a bad file fails
with a specific reason, and repair a wrong data-chunk size or show libsndfile a plain header for
RIFX WAVE_FORMAT_EXTENSIBLE, which it does not implement (see their docstrings). For the others,
libsndfile parses the header and the frame count it reports is checked by decoding the last frame
(FLAC's STREAMINFO may say 0 = unknown, or more than the stream holds); when that fails the frames
are counted by decoding (`transforms.audio.framecount`): like a truncated WAV file, a stream that
breaks off (a cut download) keeps the frames decodable before the break.

Sample value rule (`signal_dtype_for`, `full_scale_for`), the same in every container:

=======================================  =======  ==============================  ==========
encoding (soundfile subtype)             dtype    values                          full_scale
=======================================  =======  ==============================  ==========
PCM_U8                                   int16    stored byte - 128               128
PCM_S8                                   int16    as stored                       128
PCM_16                                   int16    as stored                       32768
PCM_24                                   int32    as stored, in [-2**23, 2**23)   2**23
PCM_32                                   int32    as stored                       2**31
FLOAT                                    float32  as stored                       1.0
DOUBLE                                   float64  as stored                       1.0
ULAW, ALAW, IMA_ADPCM, MS_ADPCM, GSM610  int16    libsndfile's 16-bit decode      32768
VORBIS (lossy)                           float32  libsndfile's float decode       1.0
=======================================  =======  ==============================  ==========

Any other encoding is rejected with `WavDecodeError("unsupported encoding: ...")`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
import soundfile as sf

from transforms.audio import formats, framecount, pcm, riff, wavfmt

_SIGNAL_DTYPES = {
    "PCM_U8": "int16",
    "PCM_S8": "int16",
    "PCM_16": "int16",
    "PCM_24": "int32",
    "PCM_32": "int32",
    "FLOAT": "float32",
    "DOUBLE": "float64",
    "ULAW": "int16",
    "ALAW": "int16",
    "IMA_ADPCM": "int16",
    "MS_ADPCM": "int16",
    "GSM610": "int16",
    "VORBIS": "float32",
}
# Encodings libsndfile decodes but not reproducibly: rejected with the reason.
_REFUSED = {
    "OPUS": "libsndfile 1.2.2 decodes the stream's last packets differently by read size",
}
_FULL_SCALES = {"PCM_U8": 128.0, "PCM_S8": 128.0, "PCM_24": 2.0**23, "PCM_32": 2.0**31}
# What soundfile is asked for, and the right shift that turns it into the stored value:
# libsndfile left-justifies 8-bit PCM into int16 ((x - 128) << 8, x << 8) and PCM_24 into int32.
_READ_AS = {"PCM_U8": ("int16", 8), "PCM_S8": ("int16", 8), "PCM_24": ("int32", 8)}
LIBSNDFILE_REFUSES = "libsndfile cannot decode it"  # a reason's first words
_SOUNDFILE_ERRORS = (sf.LibsndfileError, RuntimeError, TypeError, ValueError)


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


@dataclasses.dataclass(frozen=True, slots=True)
class WavInfo:
    """What an audio file holds (slotted and pickled as its values: planning keeps one per
    file; equal headers share one, `pipelines.plan.reads.scan_headers`).

    Attributes:
      sample_rate: frames per second.
      num_channels: channels per frame.
      num_frames: frames really decodable (after repairing a wrong data-chunk size).
      subtype: soundfile subtype name (PCM_16, PCM_24, FLOAT, ULAW, IMA_ADPCM, ...).
      signal_dtype: "int16" | "int32" | "float32" | "float64" (`signal_dtype_for`).
      full_scale: divisor that maps samples to [-1, 1) (`full_scale_for`).
      container: WAV, FLAC, OGG or AIFF (`transforms.audio.formats`).
    """

    sample_rate: int
    num_channels: int
    num_frames: int
    subtype: str
    signal_dtype: str
    full_scale: float
    container: str = formats.WAV

    def __reduce__(self):
        return (type(self), tuple(getattr(self, name) for name in self.__slots__))


def signal_dtype_for(subtype: str) -> str:
    """The sample dtype for a soundfile subtype (raises ValueError for unsupported ones)."""
    try:
        return _SIGNAL_DTYPES[subtype]
    except KeyError:
        raise ValueError(f"unsupported encoding: {subtype}") from None


def full_scale_for(subtype: str) -> float:
    """The divisor mapping samples of `subtype` (as returned here) to [-1, 1)."""
    dtype = signal_dtype_for(subtype)
    return _FULL_SCALES.get(subtype, 1.0 if dtype.startswith("float") else 32768.0)


class _Opened:
    """A soundfile.SoundFile on a (possibly repaired) audio file, plus its WavInfo."""

    def __init__(self, fileobj: BinaryIO, *, path: str, plain: bool = True):
        self._path = path
        # plain PCM / float WAV read by `transforms.audio.pcm` (`plain=False`: by libsndfile, as
        # every other encoding; the tests compare the two)
        self._plain: pcm.PlainSamples | None = None
        self._plain_allowed = plain
        head = riff.read_head(fileobj)
        container = formats.sniff(head)
        skip = formats.id3_size(head)
        if (
            container is None
            and skip
            and formats.sniff(riff.read_head(fileobj, at=skip)) == formats.FLAC
        ):
            container = formats.FLAC  # an ID3v2 tag before the stream (MP3s stay refused)
        if container in (None, formats.WAV):  # the walk names what is wrong with a non-WAV file
            self.info = self._open_wav(fileobj)
        else:
            self.info = self._open_other(fileobj, container)
        self._read_as, self._shift = _READ_AS.get(self.info.subtype, (self.info.signal_dtype, 0))
        self._left = self.info.num_frames

    def _open_wav(self, fileobj: BinaryIO) -> WavInfo:
        path = self._path
        try:
            layout = riff.walk(fileobj)
            subtype = wavfmt.subtype_for(layout.fmt)
        except riff.RiffError as e:
            raise WavDecodeError(path, str(e)) from None
        frames = wavfmt.frames_present(layout, subtype)
        if self._plain_allowed and pcm.plain(layout, subtype):
            self._plain = pcm.PlainSamples(fileobj, layout, subtype)
            return WavInfo(
                sample_rate=layout.fmt.sample_rate,
                num_channels=layout.fmt.num_channels,
                num_frames=frames,
                subtype=subtype,
                signal_dtype=signal_dtype_for(subtype),
                full_scale=full_scale_for(subtype),
            )
        want = (subtype, layout.fmt.num_channels, layout.fmt.sample_rate)
        self._guard = riff.GuardedReader(fileobj)
        error: WavDecodeError | None = None
        if layout.fmt.big_endian and layout.fmt.extensible:
            # libsndfile 1.2.2 does not implement RIFX WAVE_FORMAT_EXTENSIBLE ("unimplemented
            # format"): straight to the canonical header, which has a plain fmt chunk for it.
            repair = True
        else:
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
            unit = layout.fmt.block_align if subtype in wavfmt.BLOCK_CODECS else 1
            length = layout.data_size - layout.data_size % unit
            try:
                header = riff.canonical_header(layout.fmt, length)
            except riff.RiffError as e:
                raise WavDecodeError(path, str(e)) from None
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
        return WavInfo(
            sample_rate=s.samplerate,
            num_channels=s.channels,
            num_frames=min(frames, s.frames),
            subtype=subtype,
            signal_dtype=signal_dtype_for(subtype),
            full_scale=full_scale_for(subtype),
        )

    def _open_other(self, fileobj: BinaryIO, container: str) -> WavInfo:
        """FLAC / Ogg / AIFF: libsndfile reads the header; its frame count is checked."""
        self._guard = riff.GuardedReader(fileobj)
        s = self.sound = self._open(self._guard)
        reason = None
        if s.format not in formats.SOUNDFILE_FORMATS[container]:
            reason = f"libsndfile reads it as {s.format}, not {container}"
        elif s.subtype not in _SIGNAL_DTYPES:
            why = f" ({_REFUSED[s.subtype]})" if s.subtype in _REFUSED else ""
            reason = f"unsupported encoding: {container} {s.subtype}{why}"
        elif s.channels <= 0 or s.samplerate <= 0:
            reason = f"corrupt {container} header ({s.channels} channels, {s.samplerate} Hz)"
        if reason is not None:
            s.close()
            raise WavDecodeError(self._path, reason)
        info = WavInfo(
            sample_rate=s.samplerate,
            num_channels=s.channels,
            num_frames=s.frames,
            subtype=s.subtype,
            signal_dtype=signal_dtype_for(s.subtype),
            full_scale=full_scale_for(s.subtype),
            container=container,
        )
        s.close()
        self._guard, frames = framecount.settle(
            fileobj,
            open_sound=self._open,
            claim=info.num_frames,
            dtype=_READ_AS.get(s.subtype, (info.signal_dtype, 0))[0],
            flac=container == formats.FLAC,
        )
        self.sound = self._open(self._guard)
        return dataclasses.replace(info, num_frames=frames)

    def _open(self, guard: riff.GuardedReader) -> sf.SoundFile:
        try:
            guard.seek(0)  # libsndfile takes the current position as the start of the file
            sound = sf.SoundFile(guard)
        except _SOUNDFILE_ERRORS as e:
            guard.check()
            message = getattr(e, "error_string", str(e))
            raise WavDecodeError(self._path, f"{LIBSNDFILE_REFUSES}: {message}") from None
        guard.check()
        return sound

    def read(self, frames: int) -> np.ndarray:
        """Up to `frames` more frames, [n, channels] in info.signal_dtype (n == 0 at the end)."""
        n = min(frames, self._left)
        if n <= 0:  # never ask libsndfile: its FLAC reader fails on a 0-frame read past the end
            return np.zeros((0, self.info.num_channels), self.info.signal_dtype)
        if self._plain is not None:
            out = self._plain.read(n)
            self._left = 0 if len(out) < n else self._left - n
            return out
        try:
            out = self.sound.read(n, dtype=self._read_as, always_2d=True)
        except (sf.LibsndfileError, RuntimeError) as e:
            self._guard.check()
            raise WavDecodeError(self._path, f"{LIBSNDFILE_REFUSES}: {e}") from None
        self._guard.check()
        if self._shift:
            out >>= self._shift  # arithmetic shift: exact, keeps the sign
            out = out.astype(self.info.signal_dtype, copy=False)
        self._left -= len(out)
        if len(out) < n:  # short read (file changed under us): never return more than decoded
            self._left = 0
        return out

    def close(self) -> None:
        if self._plain is None:
            self.sound.close()

    def __enter__(self) -> _Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_info(fileobj: BinaryIO, *, path: str) -> WavInfo:
    """Read an audio file's header (cheap: a few small reads; FLAC / Ogg / AIFF: also the last
    frame, or every frame when the header's frame count is wrong).

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
    return _decode(fileobj, path=path)


def _decode(fileobj: BinaryIO, *, path: str, plain: bool = True) -> tuple[WavInfo, np.ndarray]:
    """`decode`; `plain=False` decodes plain PCM / float WAV with libsndfile too."""
    with _Opened(fileobj, path=path, plain=plain) as opened:
        info = opened.info
        samples = opened.read(info.num_frames)
    if len(samples) != info.num_frames:
        info = dataclasses.replace(info, num_frames=len(samples))
    return info, samples
