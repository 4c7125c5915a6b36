"""Guarantee 1, hostile WAV input: every byte string decodes or raises WavDecodeError.

Fuzzes transforms.audio.wav's read_info / decode / read_blocks with random bytes, field-aware
mutations of the real 24-bit recording's header, and random chunk structures (RIFF / RF64 / BW64
heads, huge, zero and odd sizes, duplicate and nested chunks). Each example must end in decoded
samples or `wav.WavDecodeError` (never another exception), with work bounded in bytes read and
memory bounded by the file, not its header (tracemalloc peak per example; VmHWM for the 4 GiB
headers). A hang guard (tests/support/hang_guard.py) ends a run that loops forever; it is not a
time limit.

CI runs a bounded number of examples; run longer locally with e.g.
``AUDIORECORDS_FUZZ_EXAMPLES=20000 python -m pytest tests/reliability/test_reliability_wav.py``.
Any input that ever broke the contract is kept in tests/fixtures/wav/ and replayed here.
"""

from __future__ import annotations

import io
import os
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.counting_io import CountingBytesIO
from tests.support.hang_guard import hang_guard
from tests.support.record_helpers import TUG_WAV
from tests.support.wav_contract import run_contract
from transforms.audio import wav

TUG = TUG_WAV  # the real 24-bit 64 kHz hydrophone excerpt in tests/fixtures/audio/
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wav"
EXAMPLES = int(os.environ.get("AUDIORECORDS_FUZZ_EXAMPLES", "150"))
# Work bound per operation (read_info, decode, read_blocks), in bytes read: a small multiple of
# the input (headers are re-read a few times, blocks overlap) plus a fixed slack for libsndfile's
# own header probes. Bytes, not seconds: the bound does not move with the machine's load.
READ_FACTOR = 3
READ_SLACK = 64 << 10  # 64 KiB
MEMORY_SLACK = 4 << 20  # bytes allowed beyond the size-proportional bound

# The real recording's header: RIFF(4) size(4) WAVE(4) "fmt "(4) 16(4) + 16-byte fmt body,
# "data"(4) size(4); audio from byte 44. Field offsets for field-aware mutation:
_U32_FIELDS = (4, 16, 24, 28, 40)  # RIFF size, fmt size, sample rate, byte rate, data size
_U16_FIELDS = (20, 22, 32, 34)  # format tag, channels, block align, bits per sample
_INTERESTING = (0, 1, 2, 3, 7, 8, 16, 24, 32, 64, 255, 0x7FFF, 0x8000, 0xFFFF, 0xFFFE)
_INTERESTING32 = _INTERESTING + (0x7FFFFFFF, 0x80000000, 0xFFFFFFF0, 0xFFFFFFFF, 1 << 24)
_TAGS = (1, 2, 3, 6, 7, 0x11, 0x31, 0x55, 0xFFFE, 0, 0x0160)
_IDS = (b"fmt ", b"data", b"LIST", b"JUNK", b"ds64", b"fact", b"cue ", b"bext", b"INFO", b"\0" * 4)


def _tug_prefix(audio_bytes: int = 3 * 1500) -> bytes:
    """The real file's 44-byte header followed by the first `audio_bytes` of its audio."""
    with open(TUG, "rb") as f:
        return f.read(44 + audio_bytes)


def _mutate_tug(edits: list[tuple[int, int, int]], cut: int, head: bytes) -> bytes:
    raw = bytearray(_tug_prefix())
    raw[:4] = head
    for kind, where, value in edits:
        if kind == 0:  # a 32-bit field
            pos = _U32_FIELDS[where % len(_U32_FIELDS)]
            raw[pos : pos + 4] = (value & 0xFFFFFFFF).to_bytes(4, "little")
        elif kind == 1:  # a 16-bit field
            pos = _U16_FIELDS[where % len(_U16_FIELDS)]
            raw[pos : pos + 2] = (value & 0xFFFF).to_bytes(2, "little")
        elif kind == 2:  # any header byte
            raw[where % 48] = value & 0xFF
        else:  # a chunk id
            pos = (12, 36)[where % 2]
            raw[pos : pos + 4] = _IDS[value % len(_IDS)]
    return bytes(raw[: len(raw) - cut])


_FIELD_VALUE = st.one_of(st.sampled_from(_INTERESTING32), st.integers(0, 2**32 - 1))
_EDIT = st.tuples(st.integers(0, 3), st.integers(0, 64), _FIELD_VALUE)
MUTATED_TUG = st.builds(
    _mutate_tug,
    st.lists(_EDIT, min_size=1, max_size=5),
    st.one_of(st.just(0), st.integers(0, 4600)),
    st.sampled_from((b"RIFF", b"RIFF", b"RF64", b"BW64", b"RIFX")),
)


def _sane_or(sane: st.SearchStrategy, hostile: tuple[int, ...]) -> st.SearchStrategy:
    return st.one_of(sane, sane, st.sampled_from(hostile))


@st.composite
def _fmt_body(draw: st.DrawFn) -> bytes:
    tag = draw(_sane_or(st.sampled_from((1, 3, 6, 7, 0x11, 2, 0x31)), _TAGS))
    channels = draw(_sane_or(st.integers(1, 2), (0, 3, 6, 1024, 1025, 0xFFFF)))
    rate = draw(_sane_or(st.just(8000), (0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)))
    bits = draw(_sane_or(st.sampled_from((8, 16, 24, 32, 4)), (0, 1, 7, 12, 33, 64, 0xFFFF)))
    align = draw(_sane_or(st.sampled_from((1, 2, 3, 4, 6, 8)), (0, 65, 256, 2048, 0xFFFF)))
    body = struct.pack("<HHIIHH", tag, channels, rate, rate * 2 & 0xFFFFFFFF, align, bits)
    extra = draw(st.sampled_from((b"", b"\0\0", b"\x02\0\xf9\x01", b"\x16\0" + b"\0" * 22)))
    if tag == 0xFFFE and draw(st.booleans()):  # extensible with a real sub-format GUID
        sub = draw(st.sampled_from(_TAGS))
        guid = struct.pack("<H", sub) + b"\0\0\0\0\x10\0\x80\0\0\xaa\0\x38\x9b\x71"
        extra = b"\x16\0" + struct.pack("<HI", bits, 4) + guid
    return body + extra + draw(st.binary(max_size=4))


@st.composite
def _chunk(draw: st.DrawFn, cid: bytes | None = None, depth: int = 0) -> bytes:
    if cid is None:
        cid = draw(st.one_of(st.sampled_from(_IDS), st.binary(min_size=4, max_size=4)))
    if cid == b"fmt ":
        body = draw(_fmt_body())
    elif cid == b"ds64":
        sizes = st.sampled_from((0, 1, 100, 2**32, 2**40, 2**63, 2**64 - 1))
        body = struct.pack("<QQQI", draw(sizes), draw(sizes), draw(sizes), draw(st.integers(0, 9)))
    elif cid == b"LIST" and depth < 2:
        body = b"INFO" + b"".join(draw(st.lists(_chunk(depth=depth + 1), max_size=3)))
    else:
        body = draw(st.binary(max_size=600))
    size = draw(
        st.one_of(
            st.just(len(body)),
            st.just(len(body)),
            st.sampled_from((0, 1, len(body) + 1, 0x7FFFFFFF, 0xFFFFFFF0, 0xFFFFFFFF)),
        )
    )
    pad = b"\0" if len(body) % 2 and draw(st.booleans()) else b""
    return cid + struct.pack("<I", size) + body + pad


@st.composite
def CHUNK_SOUP(draw: st.DrawFn) -> bytes:  # noqa: N802 - a strategy, named like the others
    """A RIFF-like head, then fmt and data chunks (usually) among random, nested, odd chunks."""
    head = draw(st.sampled_from((b"RIFF", b"RIFF", b"RF64", b"BW64")))
    riff_size = draw(st.sampled_from((0, 4, 1000, 0xFFFFFFFF)))
    chunks = draw(st.lists(_chunk(), max_size=4))
    for cid in (b"ds64", b"fmt ", b"data"):
        if draw(st.integers(0, 9)) < (3 if cid == b"ds64" else 9):
            at = draw(st.integers(0, len(chunks))) if draw(st.booleans()) else len(chunks)
            chunks.insert(at, draw(_chunk(cid)))
    return head + struct.pack("<I", riff_size) + b"WAVE" + b"".join(chunks)


RANDOM_BYTES = st.one_of(
    st.binary(max_size=2048),
    st.binary(max_size=2048).map(lambda b: b"RIFF" + struct.pack("<I", len(b) + 4) + b"WAVE" + b),
)


def _read_bound(raw: bytes) -> int:
    return READ_FACTOR * len(raw) + READ_SLACK


def check_contract(raw: bytes) -> str:
    """`run_contract` under the hang guard, with this file's bounds; returns the outcome.

    The outcome is "decoded" or the WavDecodeError reason's first words (for hypothesis events).
    """
    with hang_guard():
        run = run_contract(raw, path="fuzz.wav")
    for read in run.bytes_read:  # work bounded by the input's size, whatever its header claims
        assert read <= _read_bound(raw), f"read {read} B of a {len(raw)}-B input"
    # Samples are at most 4 bytes per decoded sample; libsndfile expands a compressed byte to at
    # most ~10 samples (GSM 6.10: 65 bytes -> 320). Nothing may scale with a size *field*.
    bound = 2 * max(len(raw), run.output_bytes) + MEMORY_SLACK
    assert run.peak_bytes < bound, (
        f"peak {run.peak_bytes} B for a {len(raw)}-byte input ({run.outcome})"
    )
    return run.outcome


@pytest.fixture(autouse=True, scope="module")
def _traced():
    tracemalloc.start()
    yield
    tracemalloc.stop()


_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,  # work is bounded by check_contract in bytes read (and the hang guard)
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


@_SETTINGS
@given(raw=RANDOM_BYTES)
def test_fuzz_random_bytes(raw):
    event(check_contract(raw))


@_SETTINGS
@given(raw=MUTATED_TUG)
def test_fuzz_mutated_real_header(raw):
    event(check_contract(raw))


@_SETTINGS
@given(raw=CHUNK_SOUP())
def test_fuzz_chunk_structures(raw):
    event(check_contract(raw))


@pytest.mark.parametrize(
    "path", sorted(FIXTURES.glob("*.wav")) if FIXTURES.exists() else [], ids=lambda p: p.name
)
def test_regression_fixtures(path):
    """Inputs that once broke the contract (found by the fuzzers above), kept forever."""
    check_contract(path.read_bytes())


def _vm_hwm() -> int | None:
    """This process's peak RSS since the last `_reset_hwm` (bytes), or None off Linux."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    kb = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")), None)
    return int(kb) * 1024 if kb else None


def _reset_hwm() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def _with_field(raw: bytes, offset: int, value: int, width: int = 4) -> bytes:
    return raw[:offset] + value.to_bytes(width, "little") + raw[offset + width :]


def _rf64(raw: bytes, *, riff: int, data: int) -> bytes:
    """The same fmt + audio as `raw` (a 44-byte-header WAV) as RF64 with 64-bit sizes."""
    ds64 = b"ds64" + struct.pack("<IQQQI", 28, riff, data, 0, 0)
    return b"RF64\xff\xff\xff\xffWAVE" + ds64 + raw[12:40] + b"\xff\xff\xff\xff" + raw[44:]


def _hostile(raw: bytes, variant: str) -> bytes:
    if variant.startswith("rf64"):
        size = 2**62 if variant == "rf64_data_2_62" else 2**40
        return _rf64(raw, riff=size + 36, data=size)
    offset = 4 if variant == "riff_4gib" else 40
    return _with_field(raw, offset, 0xFFFFFFF0 if variant.endswith("minus_16") else 0xFFFFFFFF)


@pytest.mark.parametrize(
    "variant", ["data_4gib", "data_4gib_minus_16", "riff_4gib", "rf64_data_2_62", "rf64_ds64_2_40"]
)
def test_header_claiming_gigabytes_costs_only_the_file(variant):
    """The real recording (a 0.96 MB excerpt) with a header claiming 4 GiB (or 2**62 B) of audio."""
    frames = (TUG.stat().st_size - 44) // 3
    hostile = _hostile(TUG.read_bytes(), variant)
    hwm_ok = _reset_hwm()
    rss_before = _vm_hwm()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    fh = CountingBytesIO(hostile)
    info, samples = wav.decode(fh, path="tug.wav")
    peak = tracemalloc.get_traced_memory()[1] - base
    assert info.num_frames == frames and samples.shape == (frames, 1)
    # The output (int32: 4/3 of the file) is the only big allocation; nothing sized by the claim.
    assert peak < 2 * len(hostile), f"tracemalloc peak {peak / 1e6:.1f} MB"
    if hwm_ok and rss_before is not None:
        grew = _vm_hwm() - rss_before
        assert grew < 2 * len(hostile) + MEMORY_SLACK, f"peak RSS grew {grew / 1e6:.1f} MB"
    assert fh.bytes_read <= _read_bound(hostile)  # reads the file, not the claimed gigabytes
    with open(TUG, "rb") as f:
        _, expected = wav.decode(f, path="tug.wav")
    np.testing.assert_array_equal(samples, expected)
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    wav.read_info(io.BytesIO(hostile), path="tug.wav")  # header only: no audio-sized memory
    assert tracemalloc.get_traced_memory()[1] - base < 1 << 20


def test_chunk_loop_is_bounded():
    """100k empty chunks (and 100k chunks of one byte) before the data: rejected in bounded work."""
    fmt = b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, 8000, 16000, 2, 16)
    for filler in (b"JUNK\0\0\0\0", b"JUNK\x01\0\0\0\0"):
        raw = b"RIFF\0\0\0\0WAVE" + fmt + filler * 100_000 + b"data\x04\0\0\0\x01\0\x02\0"
        assert check_contract(raw) == "no data chunk"  # three walks of 10,000 chunks


def check_and_raise(raw: bytes) -> None:
    """`check_contract` for an input that must be rejected: re-raises its WavDecodeError."""
    assert check_contract(raw) != "decoded"
    wav.decode(io.BytesIO(raw), path="fuzz.wav")


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        (22, 0, "zero channels"),
        (22, 0xFFFF, "too many channels"),
        (24, 0, "zero sample rate"),
        (24, 0xFFFFFFFF, "out of range"),
        (34, 0, "unsupported encoding"),
        (34, 0xFFFF, "unsupported encoding"),
        (20, 0x55, "MP3"),
        (16, 0xFFFFFFFF, "truncated header"),
        (16, 3, "truncated header"),
    ],
)
def test_zero_and_extreme_fields_are_rejected_with_a_reason(field, value, reason):
    width = 2 if field in _U16_FIELDS else 4
    raw = _with_field(_tug_prefix(), field, value, width)
    with pytest.raises(wav.WavDecodeError, match=reason):
        check_and_raise(raw)


@pytest.mark.parametrize(("field", "value"), [(32, 0), (32, 0xFFFF), (28, 0), (40, 1), (40, 0)])
def test_odd_fields_libsndfile_ignores_still_decode_or_fail_cleanly(field, value):
    """Block align / byte rate nonsense, a 1-byte or 0-byte data size: a clean outcome."""
    width = 2 if field in _U16_FIELDS else 4
    check_contract(_with_field(_tug_prefix(), field, value, width))
