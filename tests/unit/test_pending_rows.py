"""transforms.stages.pending_rows: the read stage's rows handed to the part writer in batches.

A batch of consecutive chunks gives each part the bytes and runs a write per chunk gives it
(checkpoints between batches included), and `route_chunk`, which routes a decoded chunk's rows
from its own row keys in the compute pool, gives every row the shard the read stage's per-batch
routing (`read_windows._route`, from the RecordBatch's columns) gives it, on real WAV files, for
every sharding rule; `BatchedPartWriter`, the read stage's write step, writes those parts too,
and fails the task (not a file) when a batch's hand-off fails. The record job's own outputs,
batched or not, are compared in tests/pipeline/test_pending_rows_record.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from pipelines.config import RecordConfig
from pipelines.plan import one_task, plan_record
from tests.support import wavgen
from transforms.audio import wav
from transforms.spec.types import InputFile, ReadTask, Segment
from transforms.stages.file_rows import rows_to_batch
from transforms.stages.pending_rows import (
    BatchedPartWriter,
    HandOffError,
    PendingRows,
    route_chunk,
)
from transforms.stages.read_windows import ReadTaskFn, _route
from transforms.stages.record_parts import PartWriter


def _segment(path: str, split: str = "train") -> Segment:
    info = wav.WavInfo(
        sample_rate=8000,
        num_channels=1,
        num_frames=4321,
        subtype="PCM_16",
        signal_dtype="int16",
        full_scale=32768.0,
        container="WAV",
    )
    f = InputFile(index=0, path=path, size_bytes=0, split=split, info=info)
    return Segment(file=f, row_start=0, row_stop=10, split_rank=0)


def _chunks() -> list[tuple[Segment, list[bytes], list[int]]]:
    """(segment, records, shard of each) of consecutive chunks: files of one and of several
    rows, a file in two chunks, rows of one chunk in several shards, two splits."""
    rng = np.random.default_rng(3)
    out = []
    for i, (path, rows, split) in enumerate(
        [("a", 1, "train"), ("b", 3, "train"), ("b", 2, "train"), ("c", 1, "test")]
        + [(f"d{k}", 1, "train") for k in range(6)]
        + [("e", 5, "test"), ("f", 4, "train")]
    ):
        records = [bytes(rng.integers(0, 256, 20 + 7 * j + i, dtype=np.uint8)) for j in range(rows)]
        shards = rng.integers(0, 3, rows).tolist()
        out.append((_segment(path, split), records, shards))
    return out


def _parts_dir(root) -> dict[str, bytes]:
    """The committed part files under `root` by relative path (not the temporary names a
    checkpoint keeps: random)."""
    base = os.path.join(root, ".tmp", "parts")
    files = {}
    for dirpath, _, names in os.walk(base):
        for name in names:
            if not name.endswith(".records"):
                continue
            full = os.path.join(dirpath, name)
            files[os.path.relpath(full, base)] = open(full, "rb").read()  # noqa: SIM115
    return files


def _described(parts: list[dict], root, *, temporary: bool = False) -> list[dict]:
    """Part descriptions, their paths relative to `root` (none for a checkpoint's: its part
    is under a temporary name, random)."""
    if temporary:
        return [{k: v for k, v in p.items() if k != "path"} for p in parts]
    return [{**p, "path": os.path.relpath(p["path"], root)} for p in parts]


@pytest.mark.parametrize("batch", [1, 3, 100])
def test_batched_hand_offs_write_the_parts_and_runs_of_one_write_per_chunk(tmp_path, batch):
    """Chunks in batches of `batch` (a checkpoint after the sixth chunk, as the read stage
    takes one between batches) against a `PartWriter.write` per chunk and shard."""
    chunks = _chunks()
    one, many = tmp_path / "one", tmp_path / "many"
    with PartWriter(str(one), 7) as parts:
        checkpoints_one = []
        for n, (seg, records, shards) in enumerate(chunks):
            for shard in sorted(set(shards)):
                mine = [r for r, s in zip(records, shards, strict=True) if s == shard]
                parts.write(seg.file.split, shard, path=seg.file.path, records=mine)
            if n == 5:
                checkpoints_one = _described(parts.checkpoint(), one, temporary=True)
        committed_one = _described(parts.commit(), one)
    with PartWriter(str(many), 7) as parts:
        pending, checkpoints_many = PendingRows(), []
        for n, (seg, records, shards) in enumerate(chunks):
            pending.add(seg, records, shards)
            if n == 5:
                pending.flush(parts)
                checkpoints_many = _described(parts.checkpoint(), many, temporary=True)
            elif (n + 1) % batch == 0:
                assert pending.bytes == sum(len(r) + 16 for r in records) or batch > 1
                pending.flush(parts)
        pending.flush(parts)
        assert pending.bytes == 0
        committed_many = _described(parts.commit(), many)
    assert checkpoints_many == checkpoints_one and checkpoints_one
    assert committed_many == committed_one
    assert _parts_dir(many) == _parts_dir(one) and len(_parts_dir(one)) == 6  # 3 + 3 shards


def test_the_batch_row_sums_and_counts_are_its_chunks_joined(tmp_path):
    pending = PendingRows()
    seg = _segment("a")
    a = (np.array([1.0, 2.0]), np.array([1.0, 4.0]))
    b = (np.array([3.0]), np.array([9.0]))
    pending.add(seg, [b"x", b"y"], [0, 0], sums={"log_mel": a})
    pending.add(seg, [b"z"], [1], sums=None)  # not analysed
    pending.add(seg, [b"w"], [1], sums={"log_mel": b})
    pending.count(seg, 4)
    pending.count(Segment(file=seg.file, row_start=4, row_stop=9, split_rank=0), 5)
    assert pending.bytes == 4 * 17
    with PartWriter(str(tmp_path), 0) as parts:
        sums, rows = pending.flush(parts)
        assert parts.written == 4 * 17
        committed = parts.commit()
    assert rows == 3
    np.testing.assert_array_equal(sums["log_mel"][0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(sums["log_mel"][1], [1.0, 4.0, 9.0])
    assert [(p["shard"], p["rows"], p["runs"]) for p in committed] == [
        (0, 2, [("a", 2, 34)]),
        (1, 2, [("a", 2, 34)]),
    ]
    assert pending.take_counts() == {"files": 1, "windows": 9, "audio_frames": 4321}
    assert pending.take_counts() == {"files": 0, "windows": 0, "audio_frames": 0}


# --- BatchedPartWriter: the read stage's write step -----------------------------------------


@pytest.mark.parametrize("batched", [True, False])
def test_batched_part_writer_writes_the_parts_of_one_write_per_chunk(tmp_path, batched):
    """Hand-offs when `add` asks for one (every `batch_bytes`, or every chunk when not
    batched), a checkpoint after the sixth chunk: the parts and runs a `PartWriter.write` per
    chunk and shard gives; each hand-off reports its bytes, counts and table lines."""
    chunks = _chunks()
    one, many = tmp_path / "one", tmp_path / "many"
    with PartWriter(str(one), 7) as parts:
        for seg, records, shards in chunks:
            for shard in sorted(set(shards)):
                mine = [r for r, s in zip(records, shards, strict=True) if s == shard]
                parts.write(seg.file.split, shard, path=seg.file.path, records=mine)
        committed_one = _described(parts.commit(), one)
    task = ReadTask(task_id=7, segments=tuple(seg for seg, _, _ in chunks))
    handed = []
    with BatchedPartWriter(str(many), task, batched=batched, batch_bytes=200) as parts:
        for n, (seg, records, shards) in enumerate(chunks):
            if parts.add(seg, records, shards):
                handed.append(parts.hand_off(in_segment=True))
            parts.file_read(seg, len(records), f"{seg.file.path}\n".encode())
            if n == 5:
                handed.append(parts.hand_off())
                assert parts.total_bytes == parts.written == sum(h.bytes for h in handed)
                assert parts.checkpoint()
        handed.append(parts.hand_off())
        committed_many = _described(parts.commit(), many)
    in_loop = len(handed) - 2  # but the checkpoint's and the last
    assert in_loop == len(chunks) if not batched else 0 < in_loop < len(chunks)
    assert sum(h.bytes for h in handed) == sum(len(r) + 16 for _, rs, _ in chunks for r in rs)
    assert sum(h.counts["windows"] for h in handed) == sum(len(rs) for _, rs, _ in chunks)
    lines = b"".join(line for h in handed for line in h.lines)
    assert lines == b"".join(f"{seg.file.path}\n".encode() for seg, _, _ in chunks)
    assert committed_many == committed_one
    assert _parts_dir(many) == _parts_dir(one)


@pytest.mark.parametrize(("batched", "in_segment"), [(True, True), (False, False)])
def test_a_failed_batch_hand_off_fails_the_task(tmp_path, batched, in_segment):
    """The part writer's error on a batch (or a checkpoint's or the task's last hand-off) is a
    `HandOffError`: those rows belong to files already counted as read."""
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the output directory should be")
    seg, records, shards = _chunks()[0]
    task = ReadTask(task_id=0, segments=(seg,))
    with BatchedPartWriter(str(blocked), task, batched=batched, batch_bytes=1) as parts:
        parts.add(seg, records, shards)
        with pytest.raises(HandOffError, match="writing the read rows to their part files"):
            parts.hand_off(in_segment=in_segment)


def test_one_chunks_hand_off_within_its_segment_fails_as_its_file(tmp_path):
    """Not batched (a ``shard_func``), a chunk's own hand-off raises the writer's error as is:
    the read stage makes it that file's error."""
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the output directory should be")
    seg, records, shards = _chunks()[0]
    task = ReadTask(task_id=0, segments=(seg,))
    with BatchedPartWriter(str(blocked), task, batched=False, batch_bytes=1) as parts:
        assert parts.add(seg, records, shards)  # every chunk, not batched
        with pytest.raises(OSError):
            parts.hand_off(in_segment=True)


# --- route_chunk against the read stage's per-batch routing, on real WAV files ----------------


def _files(directory) -> None:
    """Short real WAV files in three class folders: mono and stereo, two rates, 1-4 windows."""
    for i in range(12):
        folder = directory / ("cat", "dog", "owl")[i % 3]
        folder.mkdir(parents=True, exist_ok=True)
        channels = 2 if i % 2 else 1
        samples = wavgen.synth(900 + 700 * (i % 4), num_channels=channels, seed=i)
        rate = 8000 if i % 5 == 0 else 16000
        wavgen.write_wav(folder / f"f{i:02d}.wav", samples, sample_rate=rate, subtype="PCM_16")


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"channel_mode": "split", "splits": "train=7,test=3"},
        {"shard_by": "file", "num_shards": 3, "channel_mode": "split"},
        {"shard_by": "class", "num_shards": 4},
        {"elements_per_shard": 5, "channel_mode": "split", "hop_len": 250},
    ],
)
def test_route_chunk_gives_each_row_the_shard_of_the_batch_routing(tmp_path, options):
    _files(tmp_path / "in")
    config = RecordConfig(
        input_pattern=str(tmp_path / "in" / "*" / "*.wav"),
        output_dir=str(tmp_path / "out"),
        label_source="dirname",
        win_len=500,
        features="none",
        **({"num_shards": 4} | options if "elements_per_shard" not in options else options),
    )
    plan = one_task(plan_record(config))
    fn = ReadTaskFn(plan.read, plan.sharding, classes=plan.classes, output_dir=plan.output_dir)
    (task,) = plan.tasks
    rows_before: dict[int, int] = {}
    routed = 0
    for i, chunk in fn._task_chunks(task):
        if not isinstance(chunk, dict):
            continue
        seg = task.segments[i]
        batch = rows_to_batch(
            f=chunk["f"],
            starts=chunk["starts"],
            channels=chunk["channels"],
            signal=chunk["signal"],
            config=plan.read,
        )
        first_row = seg.row_start + rows_before.get(i, 0)
        expected = _route(batch, seg, first_row, plan.sharding).tolist()
        channels = "channel" in batch.schema.names
        assert route_chunk(chunk, plan.sharding, channels=channels) == expected
        assert fn._shards(chunk, batch) == expected
        rows_before[i] = rows_before.get(i, 0) + batch.num_rows
        routed += batch.num_rows
    assert routed == task.rows and routed > len(task.segments)
