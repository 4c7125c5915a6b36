"""s3:// inputs against a real S3 server on 127.0.0.1 (moto's, `tests.support.s3_server`).

The record job lists and reads ``s3://`` inputs through Beam's s3:// file system (boto3), given
Beam's S3 options (``--s3_endpoint_url``, credentials): the same windows, bit for bit, as the
same files on a local disk, every file in ``files`` or ``errors`` under its s3:// path. A
dataset cannot live on s3:// (TensorFlow 2.21's file I/O, which writes the shards and which
replay reads them with, has no s3:// file system): refused in one line, before any listing.
"""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pipelines.config import UsageError
from pipelines.result import RecordResult
from replay import DatasetNotFoundError, load_info, replay_dataset
from tests.support.record_helpers import read_records, record

BUCKET, PREFIX = "clips", "speech"
RATE = 16000
COMMON = ("--label_source", "dirname", "--win_len", "8000", "--features", "log_mel")
BROKEN = "up/broken.wav"


@pytest.fixture(scope="module")
def clips(tmp_path_factory, s3) -> Path:
    """12 clips of 1-1.75 s (PCM 16 and 24, mono and stereo) in 3 class folders, and a file that
    is not a WAV; the same tree locally and under s3://clips/speech/."""
    root = tmp_path_factory.mktemp("clips")
    rng = np.random.default_rng(29)
    for c, name in enumerate(("down", "go", "up")):
        (root / name).mkdir()
        for i in range(4):
            frames = RATE + 4000 * i
            x = rng.integers(-30000, 30000, size=(frames, 1 + i % 2), dtype=np.int32)
            subtype = "PCM_24" if c == 1 else "PCM_16"
            sf.write(root / name / f"clip{i}.wav", x.astype(np.float64) / 32768, RATE, subtype)
    (root / BROKEN).write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk-not-a-chunk")
    s3.upload_tree(root, BUCKET, PREFIX)
    return root


@pytest.fixture(scope="module")
def local(tmp_path_factory, clips) -> tuple[Path, RecordResult]:
    """(output dir, `RecordResult`) of the same clips recorded from the local disk, once for the
    module's two s3:// runs to compare with; made read-only, so no test can change it."""
    out = tmp_path_factory.mktemp("local") / "ds"
    summary = record(f"{clips}/*/*.wav", out, *COMMON)
    for path in [*out.rglob("*"), out]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return out, summary


def _by_window(out: Path, root: str) -> dict[tuple[str, int], dict]:
    """Every stored element (plain tf.data), keyed by (path relative to `root`, window start)."""
    return {
        (r["filepath"].removeprefix(root), int(r["win_start_idx"])): r for r in read_records(out)
    }


def _same_records(local: Path, clips: Path, remote: Path) -> None:
    mine = _by_window(local, f"{clips}/")
    theirs = _by_window(remote, f"s3://{BUCKET}/{PREFIX}/")
    assert mine.keys() == theirs.keys() and len(mine) == 3 * (2 + 2 + 3 + 3)
    for key, element in mine.items():
        other = theirs[key]
        assert element["signal"].dtype == other["signal"].dtype
        assert element["signal"].tobytes() == other["signal"].tobytes(), key  # bit for bit
        assert element["class"] == other["class"] and element["target"] == other["target"]
        np.testing.assert_array_equal(element["log_mel"], other["log_mel"])  # one machine


@pytest.mark.slow  # a record job end to end against a server (as the gs:// ones): ~11 s
def test_s3_inputs_record_what_the_same_local_files_record(tmp_path, s3, clips, local):
    local_out, ran = local
    remote = record(f"s3://{BUCKET}/{PREFIX}/*/*.wav", tmp_path / "s3", *COMMON, *s3.beam_args())
    assert (remote.num_files, remote.num_failed) == (ran.num_files, ran.num_failed) == (12, 1)
    _same_records(local_out, clips, tmp_path / "s3")

    info, mine = load_info(tmp_path / "s3"), load_info(local_out)
    urls = sorted(f["path"] for f in info.files)
    assert urls == sorted(
        f"s3://{BUCKET}/{PREFIX}/{p.relative_to(clips).as_posix()}"
        for p in clips.rglob("clip*.wav")
    )
    assert [e["path"] for e in info.errors] == [f"s3://{BUCKET}/{PREFIX}/{BROKEN}"]
    assert info.errors[0]["reason"] == mine.errors[0]["reason"] != ""
    got = [e["filepath"] for e in replay_dataset(tmp_path / "s3").as_numpy_iterator()]
    assert len(got) == info.num_examples() == 30 and all(p.startswith(b"s3://") for p in got)


@pytest.mark.slow
def test_s3_inputs_on_multi_processing_workers(tmp_path, s3, clips, local):
    """Worker processes reach the server with the options the job was given."""
    workers = ("--direct_running_mode", "multi_processing", "--direct_num_workers", "2")
    pattern = f"s3://{BUCKET}/{PREFIX}/*/*.wav"
    remote = record(pattern, tmp_path / "s3", *COMMON, *workers, *s3.beam_args())
    assert (remote.num_files, remote.num_failed) == (12, 1)
    _same_records(local[0], clips, tmp_path / "s3")


def test_an_s3_pattern_that_matches_nothing_is_refused_naming_it(tmp_path, s3, clips):
    pattern = f"s3://{BUCKET}/{PREFIX}/none/*.wav"
    with pytest.raises(UsageError, match="none/\\*\\.wav"):
        record(pattern, tmp_path / "out", *COMMON, *s3.beam_args())
    assert not (tmp_path / "out").exists()


def test_an_s3_output_dir_is_refused_in_one_line_before_any_listing(tmp_path):
    """No server options are given: listing the s3:// inputs would fail otherwise."""
    with pytest.raises(UsageError, match=r"^--output_dir s3://bkt/out: .* no s3:// file system"):
        record("s3://bkt/in/*.wav", "s3://bkt/out", *COMMON)


def test_replay_refuses_an_s3_dataset_naming_the_reason():
    with pytest.raises(DatasetNotFoundError, match=r"^s3://bkt/ds: .* no s3:// file system"):
        load_info("s3://bkt/ds")
    with pytest.raises(DatasetNotFoundError, match="no s3:// file system"):
        replay_dataset("s3://bkt/ds")
