"""transforms.audio.framecount: the frames a FLAC / Ogg / AIFF file really holds, whatever its
header claims. FLAC files written here (tests/support/formatgen.py) get their STREAMINFO total
rewritten (0: a streaming encoder's "unknown"; more than the stream holds) or their bytes cut (a
cut download), and are decoded whole; a cut AIFF is counted by decoding."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.support import formatgen
from transforms.audio import framecount, riff, wav

NUM_FRAMES = 5000


@pytest.fixture(scope="module")
def flac16(tmp_path_factory) -> tuple[str, np.ndarray]:
    """A 16-bit stereo FLAC file of 5,000 frames (blocks of 4096) and its samples."""
    seed = list(formatgen.ENCODINGS).index("flac16")  # the format corpus's own file
    path = tmp_path_factory.mktemp("flac") / "x_flac16.flac"
    return formatgen.write_file(path, "flac16", num_frames=NUM_FRAMES, sample_rate=16000, seed=seed)


def _flac_with_total(raw: bytes, total: int) -> bytes:
    """The FLAC file with STREAMINFO's 36-bit total-samples field set to `total`."""
    field = int.from_bytes(raw[18:26], "big")
    field = field & ~((1 << 36) - 1) | total
    return raw[:18] + field.to_bytes(8, "big") + raw[26:]


def test_flac_frame_count_is_checked(flac16):
    path, expected = flac16
    raw = Path(path).read_bytes()
    assert raw[:4] == b"fLaC" and int.from_bytes(raw[21:26], "big") & ((1 << 36) - 1) == 5000
    for total in (0, 5001, 1 << 35):  # 0: a streaming encoder's "unknown"; more: a wrong claim
        info, samples = wav.decode(io.BytesIO(_flac_with_total(raw, total)), path="s.flac")
        assert info.num_frames == 5000, total
        np.testing.assert_array_equal(samples, expected)
    tag = b"ID3\x04\x00\x00\x00\x00\x01\x02" + b"\x00" * 130  # ID3v2, syncsafe size 130
    for total in (5000, 0):  # a tag in front of the stream (some taggers write one)
        info, samples = wav.decode(io.BytesIO(tag + _flac_with_total(raw, total)), path="t.flac")
        assert (info.container, info.num_frames) == ("FLAC", 5000)
        np.testing.assert_array_equal(samples, expected)
    for cut, frames in ((len(raw) // 2, 0), (len(raw) - 200, 4096)):  # FLAC blocks of 4096
        info, samples = wav.decode(io.BytesIO(raw[:cut]), path="cut.flac")
        assert info.num_frames == frames  # a cut download: the whole blocks before the cut
        np.testing.assert_array_equal(samples, expected[:frames])
        blocks = wav.read_blocks(io.BytesIO(raw[:cut]), path="cut.flac", block_frames=99)
        assert sum(len(b) for _, b in blocks) == frames


def test_flac_with_total_patches_only_streaminfos_total(flac16):
    path, expected = flac16
    raw = Path(path).read_bytes()
    for total in (1, 4096, 123_456):
        patched = framecount.flac_with_total(io.BytesIO(raw), total)
        body = patched.read()
        assert body == _flac_with_total(raw, total)  # the same file, the 36-bit field changed
        assert sf.info(io.BytesIO(body)).frames == total
    tagged = b"ID3\x04\x00\x00\x00\x00\x00\x0a" + b"\x00" * 10 + raw  # ID3v2 of 10 bytes first
    body = framecount.flac_with_total(io.BytesIO(tagged), 7).read()
    assert body == tagged[:20] + _flac_with_total(raw, 7)
    assert framecount.flac_with_total(io.BytesIO(b"RIFF" + raw[4:]), 7) is None  # not FLAC


def _open(guard: riff.GuardedReader) -> sf.SoundFile:
    guard.seek(0)
    return sf.SoundFile(guard)


def test_settle_keeps_a_true_claim_and_counts_a_cut_aiff_by_decoding(tmp_path):
    path, expected = formatgen.write_file(
        tmp_path / "x.aiff", "aiff16", num_frames=NUM_FRAMES, sample_rate=16000
    )
    raw = Path(path).read_bytes()
    guard, frames = framecount.settle(
        io.BytesIO(raw), open_sound=_open, claim=NUM_FRAMES, dtype="int16", flac=False
    )
    assert frames == NUM_FRAMES
    data_start = raw.index(b"SSND") + 16  # chunk id, size, offset, block size
    cut = raw[: len(raw) - 1001]  # 250 stereo 16-bit frames and a byte of the next one
    whole = (len(cut) - data_start) // 4
    assert whole == NUM_FRAMES - 251
    guard, frames = framecount.settle(
        io.BytesIO(cut), open_sound=_open, claim=NUM_FRAMES, dtype="int16", flac=False
    )
    assert frames == whole
    with _open(guard) as sound:
        np.testing.assert_array_equal(sound.read(dtype="int16", always_2d=True), expected[:whole])
