"""How many frames a FLAC / Ogg / AIFF file really holds, and a view libsndfile reads them through.

libsndfile takes the frame count from the header (FLAC: STREAMINFO's total samples, which a
streaming encoder leaves 0 = unknown and a cut download overstates). Reading past the real end
of a FLAC stream then raises an error instead of returning a short read, and soundfile drops
the frames that call did decode. So `settle` checks the header's count by decoding the last
frame it announces (a seek: libFLAC bisects, a few frames are decoded). When that fails, for
FLAC it shows libsndfile the file with STREAMINFO's total patched (like
`transforms.audio.riff.canonical_header` for WAV) and binary-searches the largest total whose last
frame decodes, so every later read ends where the stream does (a file of at most
`SEARCH_IN_MEMORY_BYTES` is read once and searched in memory: libFLAC's seeks in a small file
read most of it at every step); for Ogg / AIFF (whose readers
return short reads) it counts by decoding. Hand-written because neither libsndfile nor soundfile
exposes the number of frames decoded before an error.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import BinaryIO

import soundfile as sf

from transforms.audio import formats, riff

COUNT_CHUNK_FRAMES = 4096  # frames per read when counting
SEARCH_IN_MEMORY_BYTES = 1 << 20  # 1 MiB: a FLAC file this small is searched from memory
_MAX_FRAMES_PER_BYTE = 8192  # FLAC: a constant frame of 65535 samples takes 8+ bytes
_TOTAL_AT = 18  # STREAMINFO's rate|channels|bits|total-samples 64-bit field, after fLaC + header
_TOTAL_BITS = 36
_ERRORS = (sf.LibsndfileError, RuntimeError, TypeError, ValueError)

OpenSound = Callable[[riff.GuardedReader], sf.SoundFile]  # raises ValueError if it cannot


def _last_frame_decodes(
    open_sound: OpenSound, guard: riff.GuardedReader, frames: int, dtype: str
) -> bool:
    try:
        with open_sound(guard) as sound:
            sound.seek(frames - 1)
            last = sound.read(1, dtype=dtype)
    except _ERRORS:
        guard.check()  # an I/O error is raised as itself
        return False
    guard.check()
    return len(last) == 1


def _decodable(open_sound: OpenSound, guard: riff.GuardedReader, dtype: str) -> int:
    """Frames read from the start until a short read (or up to the chunk where a read failed)."""
    count = 0
    try:
        with open_sound(guard) as sound:
            while True:
                n = len(sound.read(COUNT_CHUNK_FRAMES, dtype=dtype))
                count += n
                if n < COUNT_CHUNK_FRAMES:
                    break
    except _ERRORS:
        guard.check()
    guard.check()
    return count


def flac_with_total(fileobj: BinaryIO, total: int) -> riff.SplicedReader | None:
    """The FLAC file with STREAMINFO's total samples set to `total` (None: no STREAMINFO)."""
    start = formats.id3_size(riff.read_head(fileobj))  # bytes of an ID3v2 tag before fLaC
    head = riff.read_head(fileobj, start + _TOTAL_AT + 8)
    at = start + _TOTAL_AT
    if len(head) < at + 8 or head[start : start + 4] != b"fLaC" or head[start + 4] & 0x7F:
        return None
    field = int.from_bytes(head[at:], "big") >> _TOTAL_BITS << _TOTAL_BITS | total
    patched = head[:at] + field.to_bytes(8, "big")
    size = riff.file_size(fileobj)
    return riff.SplicedReader(
        fileobj, header=patched, offset=len(patched), length=size - len(patched)
    )


def settle(
    fileobj: BinaryIO, *, open_sound: OpenSound, claim: int, dtype: str, flac: bool
) -> tuple[riff.GuardedReader, int]:
    """The frames really decodable and the (guarded) file to read them from.

    Args:
      fileobj: the file.
      open_sound: opens a soundfile.SoundFile on a guarded reader (ValueError if it cannot).
      claim: the frame count libsndfile reports.
      dtype: the dtype frames are read as.
      flac: the file is FLAC (its STREAMINFO can be patched).
    """
    guard = riff.GuardedReader(fileobj)
    if claim == 0 or _last_frame_decodes(open_sound, guard, claim, dtype):
        return guard, claim
    if not flac or flac_with_total(fileobj, 1) is None:
        return guard, _decodable(open_sound, guard, dtype)
    size = riff.file_size(fileobj)
    if size <= SEARCH_IN_MEMORY_BYTES:  # each step of the search reads a small file again
        fileobj = io.BytesIO(riff.read_head(fileobj, size))
    lo, hi = 0, min(claim - 1, size * _MAX_FRAMES_PER_BYTE)
    while lo < hi:  # the largest total whose last frame decodes (decoding is sequential)
        mid = (lo + hi + 1) // 2
        if _last_frame_decodes(open_sound, _patched(fileobj, mid), mid, dtype):
            lo = mid
        else:
            hi = mid - 1
    return (_patched(fileobj, lo), lo) if lo else (guard, 0)  # a total of 0 means "unknown"


def _patched(fileobj: BinaryIO, total: int) -> riff.GuardedReader:
    return riff.GuardedReader(flac_with_total(fileobj, total))
