"""Test inputs beyond little-endian WAV: RIFX assembled by hand, FLAC / Ogg / AIFF by libsndfile.

Pure functions, deterministic output. Every file comes with the samples a decoder must return:
for lossless encodings the very values that were written (integers as stored, floats bit for
bit), for the lossy one (Vorbis) soundfile's own float32 decode of the file. RIFX files (plain or
WAVE_FORMAT_EXTENSIBLE, in either GUID layout found in files) are built with `struct` and numpy
big-endian (``>``) dtypes, so they do not depend on libsndfile's writer either. The value rule
is the one of `transforms.audio.wav` (8-bit: int16 in [-128, 128), 24-bit: int32 in
[-2**23, 2**23), DOUBLE: float64). The committed RIFX fixtures from other writers (sox, scipy)
come with their samples by independent decoders (`rifx_fixture_references`).
"""

from __future__ import annotations

import dataclasses
import os
import struct
import warnings
from pathlib import Path

import numpy as np
import scipy.io.wavfile
import soundfile as sf

from tests.support import wavgen


@dataclasses.dataclass(frozen=True)
class Encoding:
    """One encoding in one container.

    Attributes:
      container: RIFX, FLAC, OGG or AIFF.
      subtype: soundfile subtype (PCM_16, PCM_24, FLOAT, VORBIS, ...).
      channels: channels of the generated file.
      suffix: file name extension.
    """

    container: str
    subtype: str
    channels: int
    suffix: str

    @property
    def lossy(self) -> bool:
        return self.subtype == "VORBIS"


# label -> encoding; labels have no "_" (the class of a file is the last "_"-separated word).
ENCODINGS = {
    "rifxu8": Encoding("RIFX", "PCM_U8", 1, ".wav"),
    "rifx16": Encoding("RIFX", "PCM_16", 2, ".wav"),
    "rifx24": Encoding("RIFX", "PCM_24", 1, ".wav"),
    "rifx24multi": Encoding("RIFX", "PCM_24", 6, ".wav"),
    "rifx32": Encoding("RIFX", "PCM_32", 3, ".wav"),
    "rifxfloat": Encoding("RIFX", "FLOAT", 2, ".wav"),
    "rifxdouble": Encoding("RIFX", "DOUBLE", 1, ".wav"),
    "flac8": Encoding("FLAC", "PCM_S8", 1, ".flac"),
    "flac16": Encoding("FLAC", "PCM_16", 2, ".flac"),
    "flac24": Encoding("FLAC", "PCM_24", 1, ".flac"),
    "vorbis": Encoding("OGG", "VORBIS", 2, ".ogg"),
    "aiffs8": Encoding("AIFF", "PCM_S8", 1, ".aif"),
    "aiff16": Encoding("AIFF", "PCM_16", 2, ".aiff"),
    "aiff24": Encoding("AIFF", "PCM_24", 1, ".aiff"),
    "aiff32": Encoding("AIFF", "PCM_32", 1, ".aiff"),
    "aifffloat": Encoding("AIFF", "FLOAT", 1, ".aifc"),
    "aiffdouble": Encoding("AIFF", "DOUBLE", 2, ".aifc"),
    "aiffulaw": Encoding("AIFF", "ULAW", 1, ".aifc"),
}
_BITS = {"PCM_U8": 8, "PCM_S8": 8, "PCM_16": 16, "PCM_24": 24, "PCM_32": 32}
_FLOATS = {"FLOAT": np.float32, "DOUBLE": np.float64}


def values(subtype: str, num_frames: int, *, num_channels: int, seed: int) -> np.ndarray:
    """Samples to store, [frames, channels], in the value rule's dtype and range.

    Integers use their whole range (both extremes appear in the first frames) and, for 32-bit,
    low bits that float32 cannot hold; DOUBLE values are not float32-representable.
    """
    signal = wavgen.synth(num_frames, num_channels=num_channels, seed=seed) / 0.9
    if subtype in _FLOATS:
        return signal.astype(_FLOATS[subtype])
    bits = _BITS[subtype]
    top = 2 ** (bits - 1)
    ints = np.clip(np.rint(signal * top), -top, top - 1).astype(np.int64)
    if num_frames >= 2:
        ints[:2] = [[-top], [top - 1]]
    return ints.astype(np.int32 if bits > 16 else np.int16)


def _big_endian_bytes(samples: np.ndarray, subtype: str) -> bytes:
    if subtype in _FLOATS:
        return samples.astype(">f4" if subtype == "FLOAT" else ">f8").tobytes()
    bits = _BITS[subtype]
    if bits == 8:  # unsigned bytes, no byte order
        return (samples.astype(np.int16) + 128).astype(np.uint8).tobytes()
    if bits == 24:
        four = samples.astype(">i4").reshape(-1).view(np.uint8).reshape(-1, 4)
        return four[:, 1:].tobytes()  # the low three bytes of each big-endian int32
    return samples.astype(f">i{bits // 8}").tobytes()


# RIFX WAVE_FORMAT_EXTENSIBLE sub-format GUID layouts found in files: "fields" stores the GUID's
# Data1 / Data2 / Data3 big-endian (scipy's test file), "sox" the little-endian GUID bytes with the
# format tag big-endian in front (sox -B).
RIFX_GUIDS = ("fields", "sox")
_GUID_DATA4 = bytes.fromhex("800000aa00389b71")
_GUID_LE_TAIL = bytes.fromhex("000000001000") + _GUID_DATA4


def rifx_extensible_fmt(plain: bytes, *, guid: str) -> bytes:
    """The 40-byte big-endian WAVE_FORMAT_EXTENSIBLE fmt body meaning the plain RIFX fmt `plain`.

    Args:
      plain: a plain (non-extensible) big-endian fmt body: its first 16 bytes are used.
      guid: the sub-format GUID's layout, one of RIFX_GUIDS.
    """
    tag, channels, rate, byte_rate, align, bits = struct.unpack(">HHIIHH", plain[:16])
    if guid == "fields":
        sub_format = struct.pack(">IHH", tag, 0, 0x0010) + _GUID_DATA4
    elif guid == "sox":
        sub_format = struct.pack(">H", tag) + _GUID_LE_TAIL
    else:
        raise ValueError(f"unknown GUID layout {guid!r}, expected one of {RIFX_GUIDS}")
    mask = (1 << channels) - 1 if channels <= 18 else 0  # the first speaker positions
    head = struct.pack(">HHIIHH", 0xFFFE, channels, rate, byte_rate, align, bits)
    return head + struct.pack(">HHI", 22, bits, mask) + sub_format


def rifx_as_extensible(raw: bytes, *, guid: str) -> bytes:
    """The RIFX file `raw` with its fmt chunk rewritten as WAVE_FORMAT_EXTENSIBLE (`guid` layout).

    A plain fmt chunk becomes the extensible one meaning the same; an extensible one (either
    layout) gets its GUID in the `guid` layout. Every other chunk is kept, byte for byte.
    """
    assert raw[:4] == b"RIFX" and raw[8:12] == b"WAVE", raw[:12]
    out, pos = [b"WAVE"], 12
    while pos + 8 <= len(raw):
        cid, size = raw[pos : pos + 4], struct.unpack(">I", raw[pos + 4 : pos + 8])[0]
        body = raw[pos + 8 : pos + 8 + size]
        pad = raw[pos + 8 + size : pos + 9 + size] if size & 1 else b""
        if cid == b"fmt ":
            tag = struct.unpack(">H", body[:2])[0]
            if tag == 0xFFFE:  # the sub-format's tag, from either layout
                sox = body[26:40] == _GUID_LE_TAIL
                tag = struct.unpack(">H" if sox else ">I", body[24:26] if sox else body[24:28])[0]
            body, pad = rifx_extensible_fmt(struct.pack(">H", tag) + body[2:16], guid=guid), b""
        out.append(cid + struct.pack(">I", len(body)) + body + pad)
        pos += 8 + size + (size & 1)
    rest = b"".join(out)
    return b"RIFX" + struct.pack(">I", len(rest)) + rest


def write_rifx(
    path: str | os.PathLike,
    samples: np.ndarray,
    *,
    sample_rate: int,
    subtype: str,
    extra_chunks: bool = False,
    data_size_override: int | None = None,
    guid: str | None = None,
) -> str:
    """A big-endian RIFX/WAVE file: every size and fmt field and every sample big-endian.

    Args:
      path: where to write.
      samples: [frames, channels] from `values(subtype, ...)`.
      sample_rate: frames per second.
      subtype: PCM_U8, PCM_16, PCM_24, PCM_32, FLOAT or DOUBLE.
      extra_chunks: an odd-sized LIST chunk (with its pad byte) before the data chunk.
      data_size_override: write this into the data chunk's size field instead of the truth.
      guid: None for a plain fmt chunk, else WAVE_FORMAT_EXTENSIBLE with the sub-format GUID in
        this layout (one of RIFX_GUIDS).

    Returns:
      str(path).
    """
    frames, channels = samples.shape
    width = 64 if subtype == "DOUBLE" else _BITS.get(subtype, 32)  # bits per sample
    tag = 3 if subtype in _FLOATS else 1
    align = channels * width // 8
    fmt = struct.pack(">HHIIHH", tag, channels, sample_rate, sample_rate * align, align, width)
    if guid is not None:
        fmt = rifx_extensible_fmt(fmt, guid=guid)
    data = _big_endian_bytes(samples, subtype)
    size = len(data) if data_size_override is None else data_size_override
    body = b"WAVE" + b"fmt " + struct.pack(">I", len(fmt)) + fmt
    if extra_chunks:
        body += b"LIST" + struct.pack(">I", 11) + b"INFOISFT\0\0\0" + b"\0"  # odd: pad byte
    body += b"data" + struct.pack(">I", size) + data
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(b"RIFX" + struct.pack(">I", len(body)) + body)
    return str(path)


def _soundfile_input(samples: np.ndarray, subtype: str) -> np.ndarray:
    """What to hand soundfile so that it stores `samples` unchanged (it scales by dtype)."""
    bits = _BITS.get(subtype)
    if bits == 8:
        return samples.astype(np.int16) << 8  # int16 input: libsndfile keeps the top byte
    if bits == 24:
        return samples.astype(np.int32) << 8  # int32 input: libsndfile keeps the top 3 bytes
    return samples


def write_file(
    path: str | os.PathLike, label: str, *, num_frames: int, sample_rate: int, seed: int = 0
) -> tuple[str, np.ndarray]:
    """Writes the file of encoding `label` and returns (path, samples a decoder must return)."""
    enc = ENCODINGS[label]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    if enc.lossy:
        source = wavgen.synth(num_frames, num_channels=enc.channels, seed=seed)
        sf.write(str(path), source, sample_rate, subtype=enc.subtype, format=enc.container)
        expected, _ = sf.read(str(path), dtype="float32", always_2d=True)
        return str(path), expected
    pcm = enc.subtype in _BITS or enc.subtype in _FLOATS
    samples = values(
        enc.subtype if pcm else "PCM_16", num_frames, num_channels=enc.channels, seed=seed
    )
    if enc.container == "RIFX":
        return write_rifx(path, samples, sample_rate=sample_rate, subtype=enc.subtype), samples
    data = _soundfile_input(samples, enc.subtype)
    sf.write(str(path), data, sample_rate, subtype=enc.subtype, format=enc.container)
    if not pcm:  # a codec (u-law): its decode of the file, by soundfile
        samples, _ = sf.read(str(path), dtype="int16", always_2d=True)
    return str(path), samples


def make_corpus(
    directory: str | os.PathLike,
    labels: tuple[str, ...] = tuple(ENCODINGS),
    *,
    num_frames: int = 5000,
    sample_rate: int = 16000,
) -> dict[str, tuple[str, np.ndarray]]:
    """One file per encoding label, named "x_<label><suffix>": label -> (path, expected)."""
    return {
        label: write_file(
            Path(directory) / f"x_{label}{ENCODINGS[label].suffix}",
            label,
            num_frames=num_frames,
            sample_rate=sample_rate,
            seed=i,
        )
        for i, label in enumerate(labels)
    }


# RIFX files from independent writers (sox -B, scipy's test data), each sox one with the
# little-endian copy sox made of it in le/: see the README.md there.
RIFX_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wav" / "rifx"
_CODECS = ("ULAW", "ALAW")


def scipy_samples(path: str | os.PathLike, subtype: str) -> np.ndarray:
    """scipy.io.wavfile's reading of a PCM / float WAV file (RIFF or RIFX), in the value rule.

    Raises:
      ValueError: scipy cannot read the file (a codec, an unknown sub-format GUID layout).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns about chunks it skips
        _, ref = scipy.io.wavfile.read(str(path))
    ref = ref.reshape(len(ref), -1)
    ref = ref.astype(ref.dtype.newbyteorder("="))  # RIFX: scipy returns big-endian arrays
    if subtype == "PCM_U8":
        return ref.astype(np.int16) - 128
    return ref >> 8 if subtype == "PCM_24" else ref  # scipy left-justifies 24-bit samples


def soundfile_samples(path: str | os.PathLike, subtype: str) -> np.ndarray:
    """soundfile's reading of a (little-endian) WAV file, in the value rule."""
    shift = {"PCM_U8": 8, "PCM_24": 8}.get(subtype, 0)  # soundfile left-justifies these
    dtype = {"PCM_U8": "int16", "PCM_16": "int16", "PCM_24": "int32", "PCM_32": "int32"}
    dtype.update({"FLOAT": "float32", "DOUBLE": "float64", "ULAW": "int16", "ALAW": "int16"})
    ref, _ = sf.read(str(path), dtype=dtype[subtype], always_2d=True)
    return ref >> shift if shift else ref


def rifx_fixture_references(name: str, subtype: str) -> dict[str, np.ndarray]:
    """The samples of RIFX fixture `name` by every independent decoder that reads it.

    Keys: "scipy" (scipy.io.wavfile on the RIFX file itself, when it reads it: not for codecs,
    nor for sox's extensible GUID layout), and for the sox fixtures "scipy le" (PCM / float) and
    "soundfile le": the little-endian copy in le/, made by sox when the fixture was.
    """
    refs = {}
    try:
        refs["scipy"] = scipy_samples(RIFX_FIXTURES / name, subtype)
    except ValueError:
        pass
    le = RIFX_FIXTURES / "le" / name
    if le.exists():
        if subtype not in _CODECS:
            refs["scipy le"] = scipy_samples(le, subtype)
        refs["soundfile le"] = soundfile_samples(le, subtype)
    return refs
