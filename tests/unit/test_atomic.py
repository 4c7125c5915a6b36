"""One way to write a dataset's files (`transforms.stages.atomic`), and `PartWriter` as a
context manager: a block that raises leaves no open file and no temporary part."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.support.record_helpers import record
from transforms.stages import atomic, record_parts


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def test_incomplete_file_renames_into_place_when_done_and_replaces(tmp_path):
    path = str(tmp_path / "sub" / "x.bin")
    atomic.write_bytes_atomically(path, b"one")
    atomic.write_bytes_atomically(path, b"two")  # a retried write: the same name, replaced
    assert Path(path).read_bytes() == b"two" and _files(tmp_path) == ["sub/x.bin"]


def test_incomplete_file_that_raises_leaves_neither_name(tmp_path):
    path = str(tmp_path / "x.bin")
    with pytest.raises(ValueError, match="half"):
        with atomic.incomplete_file(path) as tmp, atomic.open_write(tmp) as fh:
            fh.write(b"half a file")
            raise ValueError("half")
    assert _files(tmp_path) == []


def test_write_atomically_whose_pieces_raise_half_way_leaves_the_old_file(tmp_path):
    """A generator of pieces that raises after some were written (a commit record, a table):
    no partial file under the final name, the file there before kept, no temporary left."""
    path = tmp_path / "x.json"

    def pieces():
        yield b'{"files": ['
        yield b'"a.wav", '
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        atomic.write_atomically(str(path), pieces())
    assert _files(tmp_path) == []
    path.write_bytes(b"complete")
    with pytest.raises(OSError, match="disk gone"):
        atomic.write_atomically(str(path), pieces())
    assert path.read_bytes() == b"complete" and _files(tmp_path) == ["x.json"]


def test_temp_names_are_unique_beside_the_file():
    names = {atomic.temp_name("out/a.records") for _ in range(100)}
    assert len(names) == 100 and all(n.startswith("out/a.records.tmp-") for n in names)


@pytest.mark.parametrize("threaded", [False, True])
def test_a_part_writer_block_that_raises_leaves_no_open_file_or_part(tmp_path, threaded):
    from concurrent.futures import ThreadPoolExecutor

    executor = ThreadPoolExecutor(1) if threaded else None
    before = _open_fds()
    with pytest.raises(RuntimeError, match="mid-task"):
        with record_parts.PartWriter(str(tmp_path), 3, executor=executor) as parts:
            parts.write("train", 0, path="a.wav", records=[b"x" * 1000] * 3)
            parts.write("train", 1, path="b.wav", records=[b"y" * 1000])
            raise RuntimeError("mid-task")
    if executor is not None:
        executor.shutdown()
    assert _files(tmp_path) == [] and _open_fds() == before


def test_a_part_writer_block_that_commits_leaves_only_final_parts(tmp_path):
    with record_parts.PartWriter(str(tmp_path), 3) as parts:
        parts.write("train", 0, path="a.wav", records=[b"x"])
        (part,) = parts.commit()
    assert _files(tmp_path) == [".tmp/parts/train/00000/000003.records"]
    assert part["rows"] == 1


def test_a_read_task_that_raises_in_a_real_job_leaves_no_temporary_part(tmp_path):
    """The job's read DoFn raising after its first windows (tests.support.faults, in-memory
    DirectRunner, no retry): the job fails and no part is left open or half-written."""
    from tests.support import faults

    clips = tmp_path / "clips"
    clips.mkdir()
    rng = np.random.default_rng(4)
    for i in range(3):
        sf.write(clips / f"c{i}.wav", rng.integers(-9000, 9000, 48000, dtype=np.int16), 16000)
    out = tmp_path / "out"
    with faults.injected(str(tmp_path)), pytest.raises(Exception, match="injected fault"):
        record(f"{clips}/*.wav", out, "--win_len", "16000", "--features", "log_mel")
    assert (tmp_path / "read").exists()  # the fault did fire
    assert [f for f in _files(out) if "parts" in f and ".tmp-" in f] == []
