"""Which audio files the record job reads: containers by their first bytes, lossy codecs, patterns.

A file's container is recognised from its content, never from its name: WAV (RIFF, RF64, BW64 and
big-endian RIFX) goes through `transforms.audio.riff`'s header walk; FLAC, Ogg Vorbis and
AIFF / AIFF-C are opened by libsndfile directly (`transforms.audio.wav` reads all of them).
Anything else is a bad input file with its reason, like a broken WAV file.
"""

from __future__ import annotations

import re

WAV, FLAC, OGG, AIFF = "WAV", "FLAC", "OGG", "AIFF"
# soundfile's format name of each container libsndfile opens for us (WAV: WAV, WAVEX, RF64).
SOUNDFILE_FORMATS = {FLAC: ("FLAC",), OGG: ("OGG",), AIFF: ("AIFF",)}
# Lossy codecs: their samples are the decoder's float32 output, not the signal that was encoded.
_LOSSY_CODECS = {"VORBIS": "Vorbis"}
_BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")  # an innermost {a,b,...} group


def sniff(head: bytes) -> str | None:
    """The container of a file from its first 12 bytes, or None when it is none we read.

    Files that only start like a WAV file (a RIFF id, then anything) are WAV: the header walk
    gives the reason they cannot be read.
    """
    if head[:4] in (b"RIFF", b"RF64", b"BW64", b"RIFX"):
        return WAV
    if head[:4] == b"fLaC":
        return FLAC
    if head[:4] == b"OggS":
        return OGG
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return AIFF
    return None


def id3_size(head: bytes) -> int:
    """Bytes of an ID3v2 tag at the start of a file (0 when there is none).

    Some taggers put one in front of a FLAC stream; libsndfile skips it.
    """
    if len(head) < 10 or head[:3] != b"ID3" or any(c & 0x80 for c in head[6:10]):
        return 0
    size = int.from_bytes(bytes(head[6:10]), "big")
    size = (size & 0x7F) | (size >> 1 & 0x3F80) | (size >> 2 & 0x1FC000) | (size >> 3 & 0xFE00000)
    return 10 + size + (10 if head[5] & 0x10 else 0)  # header, syncsafe size, footer


def lossy_fields(subtype: str) -> dict[str, object]:
    """A lossy file's manifest note: ``{"lossy": True, "lossy_reason": ...}``; {} if lossless.

    Ogg Vorbis is the one lossy codec read (Opus is refused: `transforms.audio.wav`)."""
    codec = _LOSSY_CODECS.get(subtype)
    if codec is None:
        return {}
    reason = f"{codec} is a lossy codec: samples are libsndfile's float32 decode, not the source"
    return {"lossy": True, "lossy_reason": reason}


def expand_braces(pattern: str) -> list[str]:
    """Shell-style alternatives: ``a/**/*.{wav,flac}`` -> ``a/**/*.wav``, ``a/**/*.flac``.

    Beam's FileSystems.match has no ``{}`` syntax; groups may nest, a group without a comma is
    kept literally. Order follows the pattern, duplicates removed.
    """
    m = _BRACES.search(pattern)
    if m is None:
        return [pattern]
    out: list[str] = []
    for alternative in m.group(1).split(","):
        for expanded in expand_braces(pattern[: m.start()] + alternative + pattern[m.end() :]):
            if expanded not in out:
                out.append(expanded)
    return out
