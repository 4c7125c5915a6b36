"""Plain PCM and IEEE-float WAV samples read straight from the data chunk, without libsndfile.

For these encodings the samples *are* the data chunk's bytes: integers of 1, 2, 3 or 4 bytes
(8-bit unsigned, the others two's complement) or IEEE floats of 4 or 8 bytes, frames of
`num_channels` samples, in the file's byte order (RIFF little-endian, RIFX big-endian). Once
`transforms.audio.riff.walk` has found the fmt chunk and the data's real extent, numpy reads them
with one read per block. libsndfile would parse the header a second time through Python
callbacks (most of a short clip's decoding time) and return the same values: `plain` says which
layouts take this path; every other one stays with libsndfile (`transforms.audio.wav`).

Values follow `transforms.audio.wav`'s rule: PCM_U8 -> int16 (stored byte - 128), PCM_16 ->
int16, PCM_24 -> int32 in [-2**23, 2**23), PCM_32 -> int32, FLOAT -> float32 and DOUBLE ->
float64 with the stored bits (NaN payloads and -0.0 included).
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from transforms.audio import riff

# subtype -> (bytes per sample, numpy type of a stored sample without its byte order, or "" for
# 24-bit, which numpy has no type for)
_STORED = {
    "PCM_U8": (1, "u1"),
    "PCM_16": (2, "i2"),
    "PCM_24": (3, ""),
    "PCM_32": (4, "i4"),
    "FLOAT": (4, "f4"),
    "DOUBLE": (8, "f8"),
}
_OUT = {"PCM_U8": np.int16, "PCM_16": np.int16, "PCM_24": np.int32, "PCM_32": np.int32}
_OUT |= {"FLOAT": np.float32, "DOUBLE": np.float64}
_PIECE_BYTES = 128 << 10  # 128 KiB: the most read and converted at once (memory: the output)


def plain(layout: riff.WaveLayout, subtype: str) -> bool:
    """Whether the walked `layout` (of `subtype`, from `wavfmt.subtype_for`) stores plain
    samples this module reads as libsndfile does: a whole number of bytes per sample, frames of
    exactly `block_align` bytes, the data chunk after the fmt chunk (libsndfile skips a data
    chunk before it in some containers)."""
    if subtype not in _STORED or layout.data_offset < layout.fmt_offset:
        return False
    fmt, width = layout.fmt, _STORED[subtype][0]
    return fmt.bits_per_sample == 8 * width and fmt.block_align == width * fmt.num_channels


def _decode_into(
    out: np.ndarray, data: bytes | memoryview, subtype: str, *, big_endian: bool
) -> None:
    """Stored sample bytes -> `out` ([frames, channels] of the subtype's dtype), in place."""
    code = _STORED[subtype][1]
    order = ">" if big_endian else "<"
    if subtype == "PCM_24":  # each sample into the high bytes of an int32, shifted back down
        triples = np.frombuffer(data, np.uint8).reshape(-1, 3)
        wide = np.zeros((len(triples), 4), np.uint8)
        (wide[:, :3] if big_endian else wide[:, 1:])[...] = triples
        out.reshape(-1)[...] = wide.view(order + "i4").reshape(-1)
        out >>= 8  # arithmetic shift: keeps the sign
        return
    out[...] = np.frombuffer(data, order + code).reshape(out.shape)
    if subtype == "PCM_U8":
        out -= 128


class PlainSamples:
    """The frames of a plain PCM / float data chunk, read block by block from a file object.

    Args:
      fileobj: the WAV file (seekable); each read seeks to where the previous one ended.
      layout: its walked layout (`riff.walk`), with `plain(layout, subtype)` true.
      subtype: the soundfile subtype `wavfmt.subtype_for` gave.
    """

    def __init__(self, fileobj: BinaryIO, layout: riff.WaveLayout, subtype: str):
        self._file = fileobj
        self._subtype = subtype
        self._channels = layout.fmt.num_channels
        self._big_endian = layout.fmt.big_endian
        self._frame_bytes = layout.fmt.block_align
        self._pos = layout.data_offset
        self.num_frames = layout.data_size // self._frame_bytes

    def read(self, frames: int) -> np.ndarray:
        """The next `frames` frames or fewer (fewer when the file ends early), [n, channels].

        Read in pieces of at most `_PIECE_BYTES`: memory is the output plus about two pieces.
        """
        dtype = _OUT[self._subtype]
        out = np.empty((frames, self._channels), dtype)
        per_piece = max(1, _PIECE_BYTES // self._frame_bytes)
        done = 0
        self._file.seek(self._pos)
        while done < frames:
            data = _read_fully(self._file, min(per_piece, frames - done) * self._frame_bytes)
            n = len(data) // self._frame_bytes
            _decode_into(
                out[done : done + n],
                memoryview(data)[: n * self._frame_bytes],
                self._subtype,
                big_endian=self._big_endian,
            )
            done += n
            self._pos += n * self._frame_bytes
            if n * self._frame_bytes < len(data) or not n:  # the file ends early
                break
        return out[:done] if done < frames else out


def _read_fully(fileobj: BinaryIO, n: int) -> bytes:
    """Up to `n` bytes from the current position (fewer only at the end of the file)."""
    data = fileobj.read(n)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:  # raw / network streams may return short reads
        part = fileobj.read(n - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)
