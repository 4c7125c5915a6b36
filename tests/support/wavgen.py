"""Real WAV files for tests: every supported format, odd-but-valid layouts, and broken files.

Pure functions, deterministic output. Encoding is done by soundfile (libsndfile) or the standard
library `wave`; the container (chunk order, extra chunks, wrong size fields) is assembled here by
hand with `struct`. `expected_samples` decodes independently of `transforms.audio.wav` (its own
chunk walk, numpy, hand-written G.711 / IMA ADPCM / MS ADPCM decoders), so the two can be compared.
"""

from __future__ import annotations

import functools
import io
import os
import struct
import wave
from pathlib import Path

import numpy as np
import soundfile as sf

# label -> (soundfile subtype, channels, options). Labels have no "_": the class of a file is the
# last "_"-separated word of its name.
_FORMATS: dict[str, tuple[str, int, dict]] = {
    "pcmu8": ("PCM_U8", 1, {}),
    "pcm16": ("PCM_16", 1, {}),
    "pcm24": ("PCM_24", 1, {}),
    "pcm32": ("PCM_32", 1, {}),
    "float32": ("FLOAT", 1, {}),
    "float64": ("DOUBLE", 1, {}),
    "pcm16stereo": ("PCM_16", 2, {}),
    "pcm24multi": ("PCM_24", 4, {}),
    "float64stereo": ("DOUBLE", 2, {}),
    "pcm16ext": ("PCM_16", 1, {"extensible": True}),
    "pcm16extmulti": ("PCM_16", 6, {"extensible": True}),
    "pcm24ext": ("PCM_24", 1, {"extensible": True}),
    "pcm24extstereo": ("PCM_24", 2, {"extensible": True}),
    "float32ext": ("FLOAT", 2, {"extensible": True}),
    "ulaw": ("ULAW", 1, {}),
    "alaw": ("ALAW", 2, {}),
    "imaadpcm": ("IMA_ADPCM", 1, {}),
    "imaadpcmstereo": ("IMA_ADPCM", 2, {}),
    "msadpcm": ("MS_ADPCM", 2, {}),
    "gsm610": ("GSM610", 1, {}),
    "pcm16stdlib": ("PCM_16", 2, {"stdlib": True}),
    "pcm16chunks": ("PCM_16", 1, {"extra_chunks": True}),
    "pcmu8oddchunks": ("PCM_U8", 1, {"extra_chunks": True, "odd_frames": True}),
    "float32extchunks": ("FLOAT", 2, {"extensible": True, "extra_chunks": True}),
    "pcm16datazero": ("PCM_16", 1, {"data_size_override": 0}),
    "pcm24datazerochunks": ("PCM_24", 2, {"data_size_override": 0, "extra_chunks": True}),
    "pcm24dataffff": ("PCM_24", 2, {"data_size_override": 0xFFFFFFFF}),
    "float32dataffff": ("FLOAT", 1, {"data_size_override": 0xFFFFFFFF}),
    "pcm16datalarge": ("PCM_16", 2, {"truncate": 3}),  # truncated download, mid-frame
    "pcm32datalarge": ("PCM_32", 1, {"data_size_override": 0x7FFFFFFF}),
    "imaadpcmtrunc": ("IMA_ADPCM", 2, {"truncate": 100}),  # mid-block
    "gsm610dataffff": ("GSM610", 1, {"data_size_override": 0xFFFFFFFF}),
    "pcm16riffwrong": ("PCM_16", 1, {"riff_size": 1234}),
    "pcm24riffzero": ("PCM_24", 1, {"riff_size": 0}),
}
FORMAT_LABELS = tuple(_FORMATS)  # the keys of make_format_corpus, in order
SUBTYPES = {label: subtype for label, (subtype, _, _) in _FORMATS.items()}  # label -> subtype
CHANNELS = {label: channels for label, (_, channels, _) in _FORMATS.items()}  # label -> channels


def synth(num_frames: int, *, num_channels: int = 1, seed: int = 0) -> np.ndarray:
    """A realistic test signal: a few tones with slow amplitude changes over coloured noise.

    Args:
      num_frames: frames to make.
      num_channels: channels (each different).
      seed: makes the signal; same arguments, same array.

    Returns:
      float64 [num_frames, num_channels], peak exactly 0.9 (all within [-0.9, 0.9]).
    """
    rng = np.random.default_rng(seed)
    t = np.arange(num_frames) / 16000.0
    out = np.empty((num_frames, num_channels))
    for c in range(num_channels):
        sig = np.zeros(num_frames)
        for _ in range(3):
            freq, phase, am = rng.uniform(60, 3000), rng.uniform(0, 2 * np.pi), rng.uniform(0.2, 3)
            sig += (
                rng.uniform(0.1, 0.5)
                * np.sin(2 * np.pi * freq * t + phase)
                * (1 + 0.5 * np.sin(2 * np.pi * am * t))
            )
        noise = rng.standard_normal(num_frames)
        noise[1:] = 0.6 * noise[1:] + 0.4 * noise[:-1]  # a little colour
        out[:, c] = sig + 0.2 * noise
    peak = np.abs(out).max() if num_frames else 0.0
    return out * (0.9 / peak) if peak > 0 else out


def _chunk(cid: bytes, body: bytes, size: int | None = None, *, e: str = "<") -> bytes:
    size = len(body) if size is None else size
    return cid + struct.pack(e + "I", size) + body + b"\0" * (len(body) & 1)


def _split_chunks(buf: bytes) -> list[tuple[bytes, bytes]]:
    """[(id, body)] of a well-formed RIFF/WAVE byte string."""
    chunks, pos = [], 12
    while pos + 8 <= len(buf):
        cid, size = buf[pos : pos + 4], struct.unpack("<I", buf[pos + 4 : pos + 8])[0]
        chunks.append((cid, buf[pos + 8 : pos + 8 + size]))
        pos += 8 + size + (size & 1)
    return chunks


def _extra_chunks() -> tuple[list[bytes], list[bytes]]:
    """Metadata chunks to put before and after the data chunk; several have odd sizes."""
    bext = b"synthetic test file".ljust(256, b"\0") + b"\0" * 346 + b"A=PCM,F=16000\r\n"  # 617
    info = b"INFO" + _chunk(b"INAM", b"synthetic tone\0") + _chunk(b"ISFT", b"wavgen\0")
    before = [_chunk(b"JUNK", b"\0" * 28), _chunk(b"bext", bext), _chunk(b"odd ", b"abc")]
    after = [_chunk(b"LIST", info), _chunk(b"id3 ", b"ID3\x04\0\0\0\0\0\0\0")]
    return before, after


def write_wav(
    path: str | os.PathLike,
    samples: np.ndarray,
    *,
    sample_rate: int,
    subtype: str,
    extensible: bool = False,
    extra_chunks: bool = False,
    data_size_override: int | None = None,
) -> str:
    """Write a WAV file.

    Args:
      path: where to write.
      samples: float [frames] or [frames, channels] in [-1, 1].
      sample_rate: frames per second.
      subtype: soundfile subtype (PCM_U8, PCM_16, PCM_24, PCM_32, FLOAT, DOUBLE, ULAW, ALAW,
        IMA_ADPCM, MS_ADPCM, GSM610, G721_32, ...); libsndfile encodes.
      extensible: use WAVE_FORMAT_EXTENSIBLE.
      extra_chunks: add JUNK, bext, an odd-sized chunk (pad byte) before the data chunk and
        LIST/INFO, id3 after it (all before it when data_size_override is set: a writer that
        leaves the size unpatched writes nothing after the audio).
      data_size_override: write this into the data chunk's size field instead of the truth.

    Returns:
      str(path).
    """
    samples = np.asarray(samples, dtype=np.float64)
    buf = io.BytesIO()
    sf.write(buf, samples, sample_rate, subtype=subtype, format="WAVEX" if extensible else "WAV")
    chunks = _split_chunks(buf.getvalue())
    head = [_chunk(cid, body) for cid, body in chunks if cid not in (b"data", b"PEAK")]
    data = next(body for cid, body in chunks if cid == b"data")
    before, after = _extra_chunks() if extra_chunks else ([], [])
    if data_size_override is not None:
        before, after = before + after, []
    parts = [*head, *before, _chunk(b"data", data, data_size_override), *after]
    body = b"WAVE" + b"".join(parts)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return str(path)


def _write_stdlib_wave(path: Path, samples: np.ndarray, sample_rate: int) -> str:
    """16-bit PCM written by the standard library's `wave` module (a minimal 44-byte header)."""
    ints = np.round(np.asarray(samples) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(ints.shape[1] if ints.ndim == 2 else 1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(ints.tobytes())
    return str(path)


def make_format_corpus(
    directory: str | os.PathLike, *, num_frames: int = 20000, sample_rate: int = 16000
) -> dict[str, str]:
    """One decodable file per supported format / layout variant.

    Includes PCM 8/16/24/32, float 32/64, WAVE_FORMAT_EXTENSIBLE (mono and multichannel),
    u-law, A-law, IMA / MS ADPCM, GSM 6.10, extra and odd-sized chunks, and wrong size fields
    (data size 0, 0xFFFFFFFF, larger than the file, truncated files, wrong RIFF size).

    Args:
      directory: where to write (created if missing).
      num_frames: frames per file (before any truncation).
      sample_rate: frames per second of every file.

    Returns:
      label -> path; the file is "synth_<label>.wav" (label has no "_").
    """
    Path(directory).mkdir(parents=True, exist_ok=True)
    out = {}
    for i, (label, (subtype, channels, opts)) in enumerate(_FORMATS.items()):
        opts = dict(opts)
        frames = num_frames - 1 if opts.pop("odd_frames", False) else num_frames
        samples = synth(frames, num_channels=channels, seed=i)
        path = Path(directory) / f"synth_{label}.wav"
        truncate, riff_size = opts.pop("truncate", 0), opts.pop("riff_size", None)
        if opts.pop("stdlib", False):
            _write_stdlib_wave(path, samples, sample_rate)
        else:
            write_wav(path, samples, sample_rate=sample_rate, subtype=subtype, **opts)
        raw = bytearray(path.read_bytes())
        if riff_size is not None:
            raw[4:8] = struct.pack("<I", riff_size)
        path.write_bytes(bytes(raw[: len(raw) - truncate]))
        out[label] = str(path)
    return out


def _fmt(tag: int, channels: int, rate: int, bits: int, extra: bytes = b"", *, e="<") -> bytes:
    align = channels * max(1, bits // 8)
    body = struct.pack(e + "HHIIHH", tag, channels, rate, rate * align, align, bits)
    return _chunk(b"fmt ", body + (struct.pack(e + "H", len(extra)) + extra if extra else b""), e=e)


def _riff(*chunks: bytes, e: str = "<") -> bytes:
    body = b"WAVE" + b"".join(chunks)
    return (b"RIFF" if e == "<" else b"RIFX") + struct.pack(e + "I", len(body)) + body


def make_broken_corpus(
    directory: str | os.PathLike, *, big_endian: bool = False
) -> dict[str, tuple[str, str]]:
    """Files that must be rejected, each with the reason it must be rejected for.

    Args:
      directory: where to write "broken_<name>.wav" files (created if missing).
      big_endian: the same defects in RIFX files (every size and fmt field big-endian); the
        G.721 file is written little-endian either way (libsndfile writes no RIFX G.721).

    Returns:
      name -> (path, substring of the expected WavDecodeError reason).
    """
    e = ">" if big_endian else "<"
    _c, _f, _r = (functools.partial(fn, e=e) for fn in (_chunk, _fmt, _riff))
    riff = b"RIFX" if big_endian else b"RIFF"
    pcm = np.arange(-500, 500, dtype=e + "i2").tobytes()
    fmt16 = _f(1, 1, 16000, 16)
    good = _r(fmt16, _c(b"data", pcm))
    g721 = io.BytesIO()
    sf.write(g721, synth(2000), 8000, subtype="G721_32", format="WAV")
    ext_unknown = struct.pack(e + "HI", 16, 4) + b"\x01\x00" + b"\x99" * 14  # unknown GUID
    Path(directory).mkdir(parents=True, exist_ok=True)
    cases = {
        "empty": (b"", "empty file"),
        "mp3": (b"ID3\x04\0\0\0\0\0\x21" + bytes(range(256)) * 8, "not a RIFF/WAVE file"),
        "text": (b"this is a text file, not audio\n" * 20, "not a RIFF/WAVE file"),
        "avi": (riff + struct.pack(e + "I", 1000) + b"AVI LIST" + b"\0" * 992, "not a RIFF/WAVE"),
        "riffonly": (riff + b"\x10\0", "truncated header"),
        "cutinfmt": (good[:30], "truncated header"),
        "cutbeforedata": (good[:40], "truncated header"),
        "fmtshort": (_r(_c(b"fmt ", b"\x01\0\x01\0"), _c(b"data", pcm)), "truncated"),
        "zerochannels": (_r(_f(1, 0, 16000, 16), _c(b"data", pcm)), "zero channels"),
        "zerorate": (_r(_f(1, 1, 0, 16), _c(b"data", pcm)), "zero sample rate"),
        "mp3inwav": (_r(_f(0x55, 1, 16000, 0), _c(b"data", pcm)), "unsupported encoding"),
        "aacinwav": (_r(_f(0xFF, 2, 16000, 0), _c(b"data", pcm)), "unsupported encoding"),
        "g721": (g721.getvalue(), "unsupported encoding"),
        "pcm64": (_r(_f(1, 1, 16000, 64), _c(b"data", pcm)), "unsupported encoding"),
        "float16": (_r(_f(3, 1, 16000, 16), _c(b"data", pcm)), "unsupported encoding"),
        "extunknown": (
            _r(_f(0xFFFE, 1, 16000, 16, ext_unknown), _c(b"data", pcm)),
            "unsupported encoding",
        ),
        "nofmt": (_r(_c(b"LIST", b"INFO"), _c(b"data", pcm)), "no fmt chunk"),
        "nodata": (_r(fmt16, _c(b"LIST", b"INFO")), "no data chunk"),
        "nochunks": (_r(), "no fmt chunk"),
        "absurdfmt": (good[:16] + struct.pack(e + "I", 0xFFFFFFF0) + good[20:], "truncated header"),
        "absurdlist": (
            _r(fmt16, _c(b"LIST", b"INFO", size=0xFFFFFF00), _c(b"data", pcm)),
            "truncated header",
        ),
        "manychannels": (_r(_f(1, 5000, 16000, 16), _c(b"data", pcm)), "channels"),
    }
    out = {}
    for name, (raw, reason) in cases.items():
        path = Path(directory) / f"broken_{name}.wav"
        path.write_bytes(raw)
        out[name] = (str(path), reason)
    return out


# --- independent decoder -------------------------------------------------------------------

_IMA_STEPS = [
    7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 19, 21, 23, 25, 28, 31, 34, 37, 41, 45, 50, 55, 60,
    66, 73, 80, 88, 97, 107, 118, 130, 143, 157, 173, 190, 209, 230, 253, 279, 307, 337, 371,
    408, 449, 494, 544, 598, 658, 724, 796, 876, 963, 1060, 1166, 1282, 1411, 1552, 1707, 1878,
    2066, 2272, 2499, 2749, 3024, 3327, 3660, 4026, 4428, 4871, 5358, 5894, 6484, 7132, 7845,
    8630, 9493, 10442, 11487, 12635, 13899, 15289, 16818, 18500, 20350, 22385, 24623, 27086,
    29794, 32767,
]  # fmt: skip
_IMA_INDEX = [-1, -1, -1, -1, 2, 4, 6, 8]
_MS_ADAPT = [230, 230, 230, 230, 307, 409, 512, 614, 768, 614, 512, 409, 307, 230, 230, 230]


def _g711(codes: np.ndarray, *, alaw: bool) -> np.ndarray:
    """ITU-T G.711 expansion to 16-bit linear (the reference g711.c formulas)."""
    c = codes.astype(np.int32)
    if alaw:
        c ^= 0x55
        seg = (c & 0x70) >> 4
        mag = ((c & 0x0F) << 4) + np.where(seg == 0, 8, 0x108)
        mag = np.where(seg > 1, mag << np.maximum(seg - 1, 0), mag)
        return np.where(c & 0x80, mag, -mag).astype(np.int16)
    c = ~c & 0xFF
    mag = (((c & 0x0F) << 3) + 0x84) << ((c & 0x70) >> 4)
    return np.where(c & 0x80, 0x84 - mag, mag - 0x84).astype(np.int16)


def _ima_block(block: bytes, channels: int, per_block: int) -> np.ndarray:
    out = np.empty((per_block, channels), np.int16)
    for ch in range(channels):
        pred, index = struct.unpack_from("<hB", block, 4 * ch)
        out[0, ch] = pred
        # after the headers, each channel has 4 bytes (8 nibbles, low first) in turn
        codes = []
        for group in range(4 * channels, len(block), 4 * channels):
            for byte in block[group + 4 * ch : group + 4 * ch + 4]:
                codes += [byte & 0x0F, byte >> 4]
        for k, code in enumerate(codes[: per_block - 1], start=1):
            step = _IMA_STEPS[index]
            diff = step >> 3
            diff += (step if code & 4 else 0) + (step >> 1 if code & 2 else 0)
            diff += step >> 2 if code & 1 else 0
            pred = max(-32768, min(32767, pred - diff if code & 8 else pred + diff))
            index = max(0, min(88, index + _IMA_INDEX[code & 7]))
            out[k, ch] = pred
    return out


def _ms_block(block: bytes, channels: int, per_block: int, coefs: list) -> np.ndarray:
    out = np.empty((per_block, channels), np.int16)
    head = struct.unpack_from(f"<{channels}B{3 * channels}h", block)
    pred = head[:channels]
    delta = list(head[channels : 2 * channels])
    s1, s2 = list(head[2 * channels : 3 * channels]), list(head[3 * channels :])
    out[0], out[1] = s2, s1
    nibbles = [n for byte in block[7 * channels :] for n in (byte >> 4, byte & 0x0F)]
    for i, code in enumerate(nibbles[: (per_block - 2) * channels]):
        ch = i % channels
        c1, c2 = coefs[pred[ch]]
        guess = (s1[ch] * c1 + s2[ch] * c2) >> 8
        value = max(-32768, min(32767, guess + (code - 16 if code & 8 else code) * delta[ch]))
        delta[ch] = max(16, (_MS_ADAPT[code] * delta[ch]) >> 8)
        s2[ch], s1[ch] = s1[ch], value
        out[2 + i // channels, ch] = value
    return out


def expected_samples(path: str | os.PathLike) -> np.ndarray:
    """Decode a WAV file without `transforms.audio.wav`, by the sample value rule.

    Own chunk walk (a data size of 0 or one past the end of file means "to end of file"; only
    whole frames / whole blocks count), numpy for PCM / float / G.711, small reference decoders
    for IMA and MS ADPCM. GSM 6.10 has no independent decoder here: it uses soundfile directly.

    RIFX (big-endian) files: PCM and float only.

    Returns:
      [frames, channels]: int16 (8/16-bit PCM, G.711, ADPCM, GSM), int32 (24/32-bit), float32,
      float64.
    """
    raw = Path(path).read_bytes()
    e = ">" if raw[:4] == b"RIFX" else "<"
    chunks, pos = {}, 12
    while pos + 8 <= len(raw):
        cid, size = raw[pos : pos + 4], struct.unpack(e + "I", raw[pos + 4 : pos + 8])[0]
        if cid == b"data" and (size == 0 or pos + 8 + size > len(raw)):
            size = len(raw) - pos - 8
        chunks.setdefault(cid, raw[pos + 8 : pos + 8 + size])
        pos += 8 + size + (size & 1)
    fmt, data = chunks[b"fmt "], chunks[b"data"]
    tag, channels, _, _, align, bits = struct.unpack_from(e + "HHIIHH", fmt)
    if tag == 0xFFFE:
        tag = struct.unpack_from(e + "H", fmt, 24)[0]
    width = (bits + 7) // 8
    if tag in (0x11, 0x02):
        per_block = struct.unpack_from("<H", fmt, 18)[0]
        blocks = [data[i : i + align] for i in range(0, len(data) - align + 1, align)]
        if tag == 0x11:
            parts = [_ima_block(b, channels, per_block) for b in blocks]
        else:
            n = struct.unpack_from("<H", fmt, 20)[0]
            coefs = [struct.unpack_from("<hh", fmt, 22 + 4 * i) for i in range(n)]
            parts = [_ms_block(b, channels, per_block, coefs) for b in blocks]
        return np.concatenate(parts) if parts else np.zeros((0, channels), np.int16)
    if tag == 0x31:
        with sf.SoundFile(str(path)) as f:
            per_block = struct.unpack_from("<H", fmt, 18)[0]
            return f.read((len(data) // align) * per_block, dtype="int16", always_2d=True)
    frames = len(data) // (width * channels)
    data = np.frombuffer(data[: frames * width * channels], np.uint8)
    if tag in (6, 7):
        return _g711(data, alaw=tag == 6).reshape(frames, channels)
    if tag == 3:
        return np.frombuffer(data, f"{e}f{width}").astype(f"f{width}").reshape(frames, channels)
    if width == 1:
        return (data.astype(np.int16) - 128).reshape(frames, channels)
    if width == 3:
        b = data.reshape(-1, 3).astype(np.int32)
        lo, hi = (b[:, 0], b[:, 2]) if e == "<" else (b[:, 2], b[:, 0])
        v = lo | (b[:, 1] << 8) | (hi << 16)
        return ((v ^ 0x800000) - 0x800000).reshape(frames, channels)
    return np.frombuffer(data, f"{e}i{width}").astype(f"i{width}").reshape(frames, channels)


def two_class_corpus(directory: Path, *, files: int, num_frames: int) -> str:
    """`files` seeded 16 kHz PCM_16 WAVs of `num_frames` frames in a new `directory`, named
    ``f<i>_<a|b>.wav`` (classes a and b alternately); returns their glob pattern."""
    directory.mkdir(parents=True)
    for i in range(files):
        samples = synth(num_frames, seed=i)
        write_wav(
            directory / f"f{i}_{'ab'[i % 2]}.wav", samples, sample_rate=16000, subtype="PCM_16"
        )
    return str(directory / "*.wav")


def plan_corpus(directory: Path) -> Path:
    """Three 16 kHz PCM_16 WAVs (classes dog and cat from the name: ``a_1_dog.wav`` 8000,
    ``b_2_cat.wav`` 5000, ``c_3_dog.wav`` 3000 frames) and a broken ``d_4_cat.wav`` in
    `directory`, which is returned: what the planning tests plan."""
    for name, frames in (("a_1_dog", 8000), ("b_2_cat", 5000), ("c_3_dog", 3000)):
        write_wav(directory / f"{name}.wav", synth(frames), sample_rate=16000, subtype="PCM_16")
    (directory / "d_4_cat.wav").write_bytes(b"RIFF, but no audio")
    return directory
