"""A minimal RIFF/WAVE chunk walk, and a repaired view of a WAV file for libsndfile.

Little-endian RIFF (and RF64 / BW64) and big-endian RIFX (every size and fmt field, and the
samples, big-endian; libsndfile decodes it) are walked alike, with the same rejection reasons.
In RIFX, a WAVE_FORMAT_EXTENSIBLE sub-format GUID is accepted in either layout writers use:
its Data1 / Data2 / Data3 fields big-endian (scipy's test file), or the little-endian GUID bytes
with the format tag big-endian in front (sox -B).

libsndfile (via soundfile) does the real decoding of every encoding but plain PCM / IEEE float
(`transforms.audio.pcm` reads those after this walk). This module exists for what libsndfile does
not do well:

- precise, user-facing rejection reasons (libsndfile reports "Format not recognised" or
  "Error in WAV file" for most malformed headers), checked before libsndfile sees the file;
- RIFX with WAVE_FORMAT_EXTENSIBLE, which libsndfile 1.2.2 refuses ("unimplemented format"):
  `canonical_header` writes a plain fmt chunk for it (tag, channels, rate, byte rate, block align
  and bits as stored), which libsndfile decodes, in front of the untouched data (below);
- the data chunk's real extent when its size field is wrong. libsndfile 1.2.2 copes with a size
  of 0xFFFFFFFF or one larger than the file for plain PCM, but reads 0 frames when the size is 0
  (streaming writers), and for IMA ADPCM / GSM 6.10 decodes a partial or missing last block as
  garbage. `walk` finds where the data really ends; `SplicedReader` shows libsndfile a canonical
  header with the corrected size in front of the untouched data bytes.

Everything here reads only headers (a few small reads); memory never depends on a size field.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Callable
from typing import Any, BinaryIO

RIFF_IDS = (b"RIFF", b"RF64", b"BW64", b"RIFX")  # RF64 / BW64: 64-bit sizes in a ds64 chunk
_DS64_IDS = (b"RF64", b"BW64")
WAVE_FORMAT_EXTENSIBLE = 0xFFFE
# Every KSDATAFORMAT_SUBTYPE_* GUID is {tag-0000-0010-8000-00AA00389B71}: Data1 (u32) is the
# format tag, Data2 (u16) 0, Data3 (u16) 0x0010, Data4 these 8 bytes (a byte array: no byte order).
_GUID_DATA4 = b"\x80\x00\x00\xaa\x00\x38\x9b\x71"
# The 14 bytes after the tag of a little-endian GUID (Data1's high half, Data2, Data3, Data4).
_GUID_TAIL = b"\x00\x00\x00\x00\x10\x00" + _GUID_DATA4
_MAX_FMT_SIZE = 1 << 16  # a fmt chunk is 16..~60 bytes; anything huge is a corrupt header
_MAX_CHUNKS = 10_000  # bound on the walk before the data chunk (no pathological crawl)
_U32_MAX = 0xFFFFFFFF


class RiffError(ValueError):
    """The header is malformed; str() is the user-facing reason (no path)."""


@dataclasses.dataclass(frozen=True)
class FmtChunk:
    """The fields of a WAVE fmt chunk that decoding needs.

    Attributes:
      format_tag: the encoding's WAVE format tag; for WAVE_FORMAT_EXTENSIBLE the sub-format's.
      extensible: whether the header used WAVE_FORMAT_EXTENSIBLE.
      num_channels: channels per frame.
      sample_rate: frames per second.
      block_align: bytes per frame (PCM) or per compressed block (ADPCM, GSM).
      bits_per_sample: container bits per sample (4 for IMA ADPCM, 0 for GSM).
      samples_per_block: frames per compressed block from the fmt extension, else 0.
      raw: the chunk body exactly as stored.
      big_endian: the fields (and samples) are big-endian: a RIFX file.
    """

    format_tag: int
    extensible: bool
    num_channels: int
    sample_rate: int
    block_align: int
    bits_per_sample: int
    samples_per_block: int
    raw: bytes
    big_endian: bool = False


@dataclasses.dataclass(frozen=True)
class WaveLayout:
    """Where a WAV file's audio is.

    Attributes:
      file_size: bytes in the file.
      fmt: the parsed fmt chunk.
      data_offset: file offset of the first audio byte.
      declared_data_size: the data chunk's size field (RF64: from ds64).
      data_size: bytes of audio really there: the declared size, or up to end of file when the
        size field is 0 / 0xFFFFFFFF / larger than the file.
      fmt_offset: file offset of the fmt chunk's body (before `data_offset` in the usual layout).
    """

    file_size: int
    fmt: FmtChunk
    data_offset: int
    declared_data_size: int
    data_size: int
    fmt_offset: int = 0


def file_size(fileobj: BinaryIO) -> int:
    """Size in bytes of a seekable file object (leaves the position at 0)."""
    size = fileobj.seek(0, io.SEEK_END)
    if size is None:  # some wrappers return None from seek()
        size = fileobj.tell()
    fileobj.seek(0)
    return size


def _read_at(fileobj: BinaryIO, offset: int, n: int) -> bytes:
    fileobj.seek(offset)
    out = b""
    while len(out) < n:  # raw / network streams may return short reads
        part = fileobj.read(n - len(out))
        if not part:
            break
        out += part
    return out


def read_head(fileobj: BinaryIO, n: int = 12, *, at: int = 0) -> bytes:
    """`n` bytes of a file from offset `at` (fewer when it is shorter)."""
    return _read_at(fileobj, at, n)


def _looks_like_chunk_id(cid: bytes) -> bool:
    return len(cid) == 4 and all(0x20 <= c <= 0x7E for c in cid) and cid.strip() != b""


def _looks_like_chunk(header: bytes, room: int, endian: str = "<") -> bool:
    """Whether 8 bytes plausibly start a chunk that fits into `room` bytes."""
    if len(header) < 8 or not _looks_like_chunk_id(header[:4]):
        return False
    return struct.unpack(endian + "I", header[4:8])[0] <= room - 8


def _sub_format_tag(guid: bytes, *, big_endian: bool) -> int | None:
    """The format tag of a KSDATAFORMAT_SUBTYPE_* GUID as stored, or None for any other GUID.

    RIFF stores the GUID little-endian. RIFX files come in two layouts: Data1 / Data2 / Data3
    big-endian (the whole structure in the file's byte order; scipy's test file), or the
    little-endian bytes with the tag big-endian in Data1's low half (what sox -B writes).
    """
    e = ">" if big_endian else "<"
    if guid[2:] == _GUID_TAIL:
        return struct.unpack(e + "H", guid[:2])[0]
    if big_endian:
        data1, data2, data3 = struct.unpack(">IHH", guid[:8])
        if data1 <= 0xFFFF and (data2, data3) == (0, 0x0010) and guid[8:] == _GUID_DATA4:
            return data1
    return None


def plain_fmt(fmt: FmtChunk) -> bytes:
    """A non-extensible fmt chunk body meaning what the WAVE_FORMAT_EXTENSIBLE `fmt` means.

    The sub-format's tag, then channels, rate, byte rate, block align and bits as stored; 16 bytes
    for integer PCM, 18 (cbSize 0) for the others. In the chunk's byte order.
    """
    e = ">" if fmt.big_endian else "<"
    body = struct.pack(e + "H", fmt.format_tag) + fmt.raw[2:16]
    return body if fmt.format_tag == 0x0001 else body + struct.pack(e + "H", 0)


def parse_fmt(raw: bytes, *, big_endian: bool = False) -> FmtChunk:
    """Parse a fmt chunk body (raises RiffError when it is too short to be one)."""
    if len(raw) < 16:
        raise RiffError(f"truncated header (fmt chunk has {len(raw)} bytes, needs 16)")
    e = ">" if big_endian else "<"
    tag, channels, rate, _, block_align, bits = struct.unpack(e + "HHIIHH", raw[:16])
    extensible = tag == WAVE_FORMAT_EXTENSIBLE
    if extensible:
        if len(raw) < 40:
            raise RiffError(
                f"truncated header (WAVE_FORMAT_EXTENSIBLE fmt chunk of {len(raw)} bytes)"
            )
        sub_format = _sub_format_tag(raw[24:40], big_endian=big_endian)
        if sub_format is None:
            raise RiffError(
                f"unsupported encoding: WAVE_FORMAT_EXTENSIBLE sub-format {raw[24:40].hex()}"
            )
        tag = sub_format
    samples_per_block = 0
    if not extensible and len(raw) >= 20 and struct.unpack(e + "H", raw[16:18])[0] >= 2:
        samples_per_block = struct.unpack(e + "H", raw[18:20])[0]
    return FmtChunk(
        tag, extensible, channels, rate, block_align, bits, samples_per_block, raw, big_endian
    )


def walk(fileobj: BinaryIO) -> WaveLayout:
    """Walk the chunks of a WAV file up to its data chunk.

    The RIFF size field is ignored (often wrong; the file size is what counts). Odd-sized chunks
    are followed by a pad byte; a missing pad byte is tolerated when the next chunk id shows it.

    Args:
      fileobj: seekable binary file object, positioned anywhere.

    Returns:
      The layout; `data_size` is bounded by the bytes really in the file.

    Raises:
      RiffError: not a WAV file, truncated or missing chunks (the message is the reason).
    """
    size = file_size(fileobj)
    head = _riff_head(fileobj, size)
    big_endian = head[:4] == b"RIFX"
    e = ">" if big_endian else "<"

    fmt: FmtChunk | None = None
    fmt_offset = 0
    data: tuple[int, int, int] | None = None  # (offset, declared size, real size)
    ds64_data_size: int | None = None
    pos = 12
    for _ in range(_MAX_CHUNKS):
        header = _read_at(fileobj, pos, 8)
        if len(header) < 8:
            if data is None and len(header) > 0:
                raise RiffError(f"truncated header (file ends inside a chunk header at byte {pos})")
            break
        cid, csize = header[:4], struct.unpack(e + "I", header[4:8])[0]
        body = pos + 8
        room = size - body
        if cid == b"ds64" and head[:4] in _DS64_IDS and csize >= 16 and room >= 16:
            ds64_data_size = struct.unpack("<Q", _read_at(fileobj, body + 8, 8))[0]
        if cid == b"fmt " and fmt is None:
            fmt = _fmt_chunk(fileobj, body, csize, room, big_endian=big_endian)
            fmt_offset = body
        elif cid == b"data" and data is None:
            data = _data_chunk(fileobj, body, csize, room, ds64_data_size, e)
            if data[2] != data[1]:
                break  # audio runs to end of file: nothing after it to walk
        elif data is None and csize > room:
            raise RiffError(
                f"truncated header (file ends inside the {cid.decode('latin-1')!r} chunk "
                f"before any data chunk)"
            )
        if fmt is not None and data is not None:
            break
        pos = _next_chunk(fileobj, body, csize)
    else:
        if data is None:
            raise RiffError(f"no data chunk (gave up after {_MAX_CHUNKS} chunks)")
    if fmt is None:
        raise RiffError("no fmt chunk")
    if data is None:
        raise RiffError("no data chunk")
    return WaveLayout(size, fmt, data[0], data[1], data[2], fmt_offset)


def _riff_head(fileobj: BinaryIO, size: int) -> bytes:
    """The file's first 12 bytes, checked to be a RIFF/RIFX/RF64 WAVE header (`walk`)."""
    if size == 0:
        raise RiffError("empty file")
    head = _read_at(fileobj, 0, 12)
    if head[:4] not in RIFF_IDS:
        if len(head) < 4 and any(rid.startswith(head) for rid in RIFF_IDS):
            raise RiffError(f"truncated header ({size} bytes)")
        raise RiffError(f"not a RIFF/WAVE file (starts with {head[:4]!r}), nor FLAC, Ogg or AIFF")
    if len(head) < 12:
        raise RiffError(f"truncated header ({size} bytes)")
    if head[8:12] != b"WAVE":
        raise RiffError(f"not a RIFF/WAVE file (RIFF form type {head[8:12]!r})")
    return head


def _fmt_chunk(
    fileobj: BinaryIO, body: int, csize: int, room: int, *, big_endian: bool
) -> FmtChunk:
    """The fmt chunk of `csize` bytes at `body`, `room` bytes before the end of the file."""
    if csize > room:
        raise RiffError(
            f"truncated header (fmt chunk declares {csize} bytes, {max(room, 0)} remain)"
        )
    if csize > _MAX_FMT_SIZE:
        raise RiffError(f"corrupt header (fmt chunk of {csize} bytes)")
    return parse_fmt(_read_at(fileobj, body, csize), big_endian=big_endian)


def _data_chunk(
    fileobj: BinaryIO, body: int, csize: int, room: int, ds64_data_size: int | None, e: str
) -> tuple[int, int, int]:
    """(offset, declared size, real size) of the data chunk at `body` (`walk`): the real size
    is the rest of the file when the declared one overruns it or is a streaming writer's 0."""
    declared = csize
    if csize == _U32_MAX and ds64_data_size is not None:
        declared = ds64_data_size
    real = declared
    if declared > room:  # 0xFFFFFFFF placeholder, or a truncated file
        real = room
    elif declared == 0 and room > 0:
        # A streaming writer that never came back to patch the size, unless what follows
        # is a real chunk (a genuinely empty data chunk followed by e.g. LIST).
        if not _looks_like_chunk(_read_at(fileobj, body, 8), room, e):
            real = room
    return (body, declared, real)


def _next_chunk(fileobj: BinaryIO, body: int, csize: int) -> int:
    """Where the chunk after the one of `csize` bytes at `body` starts."""
    pos = body + csize
    if csize & 1:  # RIFF pad byte, unless the writer forgot it
        pad = _read_at(fileobj, pos, 5)
        if not _looks_like_chunk_id(pad[1:5]) and _looks_like_chunk_id(pad[:4]):
            pos -= 1
        pos += 1
    return pos


def canonical_header(fmt: FmtChunk, data_size: int) -> bytes:
    """A minimal RIFF/WAVE header (fmt + data chunk header) announcing `data_size` bytes.

    Uses RF64 (ds64 chunk) when the sizes do not fit in 32 bits, RIFX for a big-endian fmt. The
    fmt chunk is the file's own, except for RIFX WAVE_FORMAT_EXTENSIBLE, which libsndfile 1.2.2
    does not implement: there it is the equivalent plain fmt chunk (`plain_fmt`).

    Raises:
      RiffError: a RIFX file with more than 4 GiB of audio (no 64-bit big-endian form exists).
    """
    e = ">" if fmt.big_endian else "<"
    body = plain_fmt(fmt) if fmt.big_endian and fmt.extensible else fmt.raw
    fmt_chunk = b"fmt " + struct.pack(e + "I", len(body)) + body + b"\0" * (len(body) & 1)
    riff_size = 4 + len(fmt_chunk) + 8 + data_size
    data_header = b"data" + struct.pack(e + "I", min(data_size, _U32_MAX))
    if riff_size <= _U32_MAX:
        riff_id = b"RIFX" if fmt.big_endian else b"RIFF"
        return riff_id + struct.pack(e + "I", riff_size) + b"WAVE" + fmt_chunk + data_header
    if fmt.big_endian:
        raise RiffError(f"unsupported: RIFX file with {data_size} bytes of audio (over 4 GiB)")
    ds64 = b"ds64" + struct.pack("<IQQQI", 28, riff_size + 36, data_size, 0, 0)
    return b"RF64" + struct.pack("<I", _U32_MAX) + b"WAVE" + ds64 + fmt_chunk + data_header


class SplicedReader(io.RawIOBase):
    """Read-only file: `header` bytes followed by `length` bytes of `fileobj` from `offset`.

    Shows libsndfile a repaired WAV file without copying the audio.
    """

    def __init__(self, fileobj: BinaryIO, *, header: bytes, offset: int, length: int):
        super().__init__()
        self._file = fileobj
        self._header = header
        self._offset = offset
        self._size = len(header) + length
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._size - self._pos)
        done = 0
        if want > 0 and self._pos < len(self._header):
            part = self._header[self._pos : self._pos + want]
            view[: len(part)] = part
            done = len(part)
        if done < want:
            start = self._offset + self._pos + done - len(self._header)
            part = _read_at(self._file, start, want - done)
            view[done : done + len(part)] = part
            done += len(part)
        self._pos += done
        return done


class GuardedReader:
    """Forwards seek / tell / read; keeps an exception from the file instead of losing it.

    soundfile's virtual-I/O callbacks run inside libsndfile (cffi), where a Python exception is
    printed and swallowed (libsndfile just sees a short read). An I/O error, e.g. a network read
    failing, is kept here and re-raised as itself by `check`, so that callers can retry it
    instead of blaming the file.
    """

    def __init__(self, fileobj: BinaryIO):
        self._file = fileobj
        self.error: Exception | None = None

    def _call(self, fn: Callable[..., Any], *args: Any, default: Any = 0) -> Any:
        if self.error is None:
            try:
                return fn(*args)
            except Exception as e:  # re-raised by `check`
                self.error = e
        return default

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset, whence = self.tell() + offset, io.SEEK_SET
        if whence != io.SEEK_SET or offset >= 0:  # a seek before the start (a corrupt header's
            self._call(self._file.seek, offset, whence)  # offset) fails: the position stays
        return self.tell()

    def tell(self) -> int:
        return self._call(self._file.tell)

    def read(self, n: int = -1) -> bytes:
        return self._call(self._file.read, n, default=b"")

    def check(self) -> None:
        """Raise the file's exception, if it had one."""
        if self.error is not None:
            raise self.error
