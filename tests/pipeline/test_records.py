"""`replay.records`: random access to a dataset's serialized records, on real TFRecord files.

Hand-made datasets of format version 4 (`write_dataset`: shards written by
``tf.io.TFRecordWriter``, their record offsets counted from the records' lengths) are read back
by index and compared, record for record, with what ``tf.data.TFRecordDataset`` reads from the
same shards in manifest order; sliced splits with the same slice of that ordered read. Broken
files (a flipped byte, a truncated shard, an offsets file that lies while the manifest agrees
with it) are each named by the error. The gs:// tests read a dataset on the GCS emulator
(`tests.support.gcs_server`) in a subprocess; its byte ranges go through the front of
google-cloud-storage's client (`BatchShim`), which injects the faults and counts what it serves.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from replay import CorruptShardError, NoOffsetsError, ShardSizeError, load_info
from replay import format as fmt
from replay import records as records_module
from replay.errors import MissingShardError, NoRandomAccessError, ShardError
from replay.global_order import WINDOW_BLOCKS, plan_blocks, positions_records
from replay.records import FRAME_BYTES, GAP_BYTES, Records, merge_ranges, open_records
from replay.slicing import read_spans, split_spans
from tests.support.replay_fixtures import flip_byte, write_dataset, write_manifest

ROOT = Path(__file__).resolve().parents[2]
# an empty shard in each split, shard ends anywhere: train 28 records, test 9
COUNTS = {"train": (13, 0, 9, 6), "test": (5, 0, 4)}


@pytest.fixture(params=["C", "Python"])
def read_path(request, monkeypatch) -> str:
    """Local shards read by `replay._frames` (the extension setup.py builds; required here) and
    by records.py's own Python reads (where it cannot be built), each check named the same."""
    if request.param == "Python":
        monkeypatch.setattr(records_module, "_native", None)  # the Records made here
    else:
        assert records_module._native is not None, "replay._frames is not built (pip install -e .)"
    return request.param


def _tf_read(paths: list[str]) -> list[bytes]:
    """The records of `paths`, in order, as TensorFlow's TFRecord reader reads them."""
    return [r.numpy() for r in tf.data.TFRecordDataset(paths)] if paths else []


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[str, dict[str, list[bytes]]]:
    """(path, each shard's records by file name as tf.data reads them, in manifest order)."""
    path = tmp_path_factory.mktemp("records")
    write_dataset(
        path,
        num_examples_per_shard=COUNTS,
        split_names=["train", "test"],
        compression="NONE",
        seed=5,
    )
    info = load_info(path)
    return str(path), {shard.filename: _tf_read([shard.path]) for shard in info.shard_list()}


def _ordered(path: str, split=None) -> list[bytes]:
    """tf.data's read of the shards of `split` (names) in manifest order: one sequence."""
    return _tf_read([shard.path for shard in load_info(path).shard_list(split)])


@pytest.mark.usefixtures("read_path")
def test_every_record_is_the_one_tf_data_reads(dataset):
    path, _ = dataset
    ordered = _ordered(path)
    r = open_records(path)
    assert len(r) == len(ordered) == 37
    assert [r[i] for i in range(len(r))] == ordered
    assert [r[-k] for k in range(1, len(r) + 1)] == ordered[::-1]
    assert r.__getitems__([]) == []
    assert r.__getitems__(np.arange(len(r))) == ordered
    for bad in (37, -38, 1000):
        with pytest.raises(IndexError, match=f"record {bad} out of range \\[0, 37\\)"):
            r[bad]
    with pytest.raises(IndexError):
        r.__getitems__([0, 5, 37])


def _frames(ordered: list[bytes], ids) -> int:
    """The bytes of the frames of records `ids`, each once."""
    return sum(FRAME_BYTES + len(ordered[i]) for i in set(np.asarray(ids).tolist()))


@pytest.mark.usefixtures("read_path")
def test_a_batched_get_in_any_order_with_repeats_reads_exactly_its_frames(dataset):
    """`bytes_read`: each frame a batch asks for, once; nothing between them."""
    path, _ = dataset
    ordered = _ordered(path)
    rng = np.random.default_rng(11)
    ids = np.concatenate([rng.permutation(len(ordered)), rng.integers(0, len(ordered), 20)])
    rng.shuffle(ids)
    r = open_records(path)
    assert r.bytes_read == 0  # the offsets files are not counted
    got = r.__getitems__(ids)
    assert got == [ordered[i] for i in ids]
    assert r.bytes_read == _frames(ordered, ids) == sum(FRAME_BYTES + len(x) for x in ordered)
    negative = [int(i) - len(ordered) for i in ids[:10]]
    assert r.__getitems__(negative) == got[:10]
    assert r.bytes_read == _frames(ordered, ids) + _frames(ordered, ids[:10])
    r.bytes_read = 0
    assert r.__getitems__([5, 5, 5, 7]) == [ordered[5]] * 3 + [ordered[7]]
    assert r.bytes_read == _frames(ordered, [5, 7])


@pytest.mark.usefixtures("read_path")
@pytest.mark.parametrize(
    "split",
    [
        "train",
        "test",
        ["test", "train"],
        "train[2:9]",
        "train[:50%]+test",
        "train[-5:]",
        "train[1shard:3shard]",
        ["test[1:]", "train[10:20]"],
    ],
)
def test_a_split_or_slice_is_the_same_slice_of_the_ordered_read(dataset, split):
    path, by_shard = dataset
    info = load_info(path)
    expected = [
        record
        for span in split_spans(info, split)
        for record in by_shard[span.shard.filename][span.first : span.first + span.count]
    ]
    r = open_records(path, split=split)
    assert len(r) == len(expected) > 0
    assert [r[i] for i in range(len(r))] == expected
    perm = np.random.default_rng(3).permutation(len(r))
    assert r.__getitems__(perm) == [expected[i] for i in perm]


def test_slices_against_list_slicing_of_the_ordered_read(dataset):
    """The same, with the slices worked out by hand: train holds 28 records, 50% is 14."""
    path, _ = dataset
    train, test = _ordered(path, "train"), _ordered(path, "test")
    assert len(train) == 28 and len(test) == 9
    r = open_records(path, split="train[2:9]")
    assert r.__getitems__(range(len(r))) == train[2:9]
    r = open_records(path, split="train[:50%]+test")
    assert r.__getitems__(range(len(r))) == train[:14] + test
    assert open_records(path, split=None).__getitems__(range(37)) == train + test


def test_locate_gives_each_record_s_frame_in_its_shard(dataset):
    path, _ = dataset
    r = open_records(path, split="train[10:20]")  # across the empty shard, into shard 2
    for i in range(len(r)):
        where = r.locate(i)
        data = Path(where.shard.path).read_bytes()[where.start : where.end]
        assert where.end - where.start == FRAME_BYTES + where.length == FRAME_BYTES + len(r[i])
        assert data[12 : 12 + where.length] == r[i]
        assert where.record == (10 + i if i < 3 else i - 3)
    assert r.locate(0).shard.filename != r.locate(3).shard.filename
    assert r.locate(-1) == r.locate(len(r) - 1)
    first, last = r.locate(0).shard.filename, r.locate(9).shard.filename
    assert [shard.filename for shard in r.shard_list] == [first, last]


def test_merge_ranges():
    assert merge_ranges([], [], gap=10) == []
    assert merge_ranges([0], [16], gap=0) == [(0, 16)]
    # touching ranges: a gap of 0 bytes, merged with any positive gap, not with gap 0
    assert merge_ranges([0, 16], [16, 40], gap=1) == [(0, 40)]
    assert merge_ranges([0, 16], [16, 40], gap=0) == [(0, 16), (16, 40)]
    # the gap between ranges merges them when it is below `gap`
    assert merge_ranges([0, 109], [100, 200], gap=10) == [(0, 200)]
    assert merge_ranges([0, 110], [100, 200], gap=10) == [(0, 100), (110, 200)]
    # any order in, sorted out; overlaps and repeats merged; a range inside another kept inside
    assert merge_ranges([500, 0, 50, 0], [600, 100, 80, 100], gap=1) == [(0, 100), (500, 600)]
    assert merge_ranges([0, 10], [100, 20], gap=0) == [(0, 100)]
    # frames 84 bytes apart: kept apart below a gap of 85, merged from it on; unsorted input
    frames = ([300, 100, 200], [316, 116, 216])
    assert merge_ranges(*frames, gap=84) == [(100, 116), (200, 216), (300, 316)]
    assert merge_ranges(*frames, gap=85) == [(100, 316)]


@pytest.mark.usefixtures("read_path")
def test_a_pickled_copy_reads_the_same_and_threads_share_one(dataset):
    """As a Grain or PyTorch worker gets it: pickled after use (its shards open), read in the
    copy; and 4 threads' batched gets at once on one object."""
    path, _ = dataset
    ordered = _ordered(path)
    r = open_records(path, split=["test", "train"])
    expected = _ordered(path, ["test", "train"])
    assert r[0] == expected[0] and r[-1] == expected[-1]  # opens two shards
    copy = pickle.loads(pickle.dumps(r))
    assert copy.bytes_read == 0 and len(copy) == len(r)
    assert copy.__getitems__(range(len(copy))) == expected
    with copy:
        assert copy[5] == expected[5]
    assert copy[6] == expected[6]  # closed: its shards opened again

    shared = open_records(path)
    batches = [np.random.default_rng(s).integers(0, len(ordered), 200) for s in range(16)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(shared.__getitems__, batches))
    assert got == [[ordered[i] for i in ids] for ids in batches]
    assert shared.bytes_read == sum(_frames(ordered, ids) for ids in batches)


# ------------------------------------------------------------------ broken files


def _small(directory: Path, **kwargs) -> tuple[str, list[str], list[bytes]]:
    """A dataset of shards of 6 and 5 records: (path, shard paths, the records tf.data reads)."""
    compression = kwargs.pop("compression", "NONE")
    expected = write_dataset(
        directory, num_examples_per_shard=(6, 5), compression=compression, **kwargs
    )
    shards = expected["shards"]["all"]
    options = fmt.tf_compression_type(compression)
    return str(directory), shards, [r.numpy() for r in tf.data.TFRecordDataset(shards, options)]


def _offsets(path: str, shard: int) -> list[int]:
    return list(
        fmt.parse_offsets(Path(load_info(path).shard_list()[shard].offsets_path).read_bytes())
    )


@pytest.mark.usefixtures("read_path")
def test_a_flipped_byte_in_a_record_s_data_names_shard_record_and_offset(tmp_path):
    path, shards, ordered = _small(tmp_path)
    start = _offsets(path, 1)[2]
    flip_byte(shards[1], start + 12 + 5)  # record 2 of shard 1: record 8 of the dataset
    with pytest.raises(tf.errors.DataLossError, match=f"corrupted record at {start + 12}"):
        _tf_read([shards[1]])  # TensorFlow's own reader fails it too (at the data's offset)
    r = open_records(path)
    others = [i for i in range(len(r)) if i != 8]
    assert r.__getitems__(others) == [ordered[i] for i in others]
    message = f"{shards[1]}: record 2 at byte offset {start}: corrupted record \\(data checksum"
    with pytest.raises(CorruptShardError, match=message) as e:
        r.__getitems__([0, 8, 9])
    assert e.value.shard_path == shards[1]


@pytest.mark.usefixtures("read_path")
def test_a_flipped_byte_in_a_length_field_names_shard_record_and_offset(tmp_path):
    path, shards, _ = _small(tmp_path)
    start = _offsets(path, 0)[3]
    flip_byte(shards[0], start + 1)  # record 3's length, 256 bytes more
    with pytest.raises(tf.errors.DataLossError, match=f"corrupted record at {start}"):
        _tf_read([shards[0]])
    r = open_records(path)
    assert len(r.__getitems__([2, 4, 10])) == 3
    message = f"{shards[0]}: record 3 at byte offset {start}: corrupted record \\(length checksum"
    with pytest.raises(CorruptShardError, match=message):
        r[3]


@pytest.mark.usefixtures("read_path")
def test_a_truncated_shard_is_named_by_records_and_at_the_read(tmp_path):
    """Cut mid-record: `records` stats every shard it reads (as `replay_dataset` does) and
    refuses it before any read; a shard cut after that fails at its first read."""
    path, shards, ordered = _small(tmp_path)
    size = os.path.getsize(shards[1])
    os.truncate(shards[1], size - 7)
    refused = f"{shards[1]}: shard is {size - 7} bytes but the manifest says {size}"
    with pytest.raises(ShardSizeError, match=refused):
        open_records(path)
    assert open_records(path, split="all[:6]").__getitems__(range(6)) == ordered[:6]  # shard 0 only

    info = load_info(path)
    os.truncate(shards[1], size)  # whole again, then cut after the check
    r = Records(info, read_spans(info, None))
    r.load_offsets()
    os.truncate(shards[1], size - 7)
    assert r.__getitems__(range(6)) == ordered[:6]
    with pytest.raises(ShardSizeError, match=f"{shards[1]}: {size - 7} bytes, the manifest"):
        r[6]


TRUNCATED_WHILE_OPEN = """
import os, sys
from replay.records import open_records
path, shard = sys.argv[1:]
r = open_records(path)
first = r[0]  # the shard is open
os.truncate(shard, os.path.getsize(shard) // 2)
assert r[0] == first
try:
    r[len(r) - 1]
except Exception as e:
    print(type(e).__name__, e)
"""


def test_a_shard_truncated_while_open_fails_naming_it(tmp_path):
    """Cut to half while open, records of 8 KB: the records before the cut still read, the last
    one fails naming the shard (in a subprocess: a memory map would die of SIGBUS there)."""
    expected = write_dataset(
        tmp_path, num_examples_per_shard=(6,), compression="NONE", win_len=4000
    )
    shard = expected["shards"]["all"][0]
    size = os.path.getsize(shard)
    done = subprocess.run(
        [sys.executable, "-c", TRUNCATED_WHILE_OPEN, str(tmp_path), shard],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    last = _offsets(str(tmp_path), 0)[-1]
    assert last > size // 2
    assert done.stdout.strip() == (
        f"CorruptShardError {shard}: truncated: 0 of the 12 bytes "
        f"at offset {last} (the manifest says {size} bytes)"
    )


def _tamper_offsets(path: str, shard: int, change) -> None:
    """Rewrites a shard's offsets file with `change(offsets)`, its size and digest in the
    manifest too (a manifest crafted to agree with it): only the frames can tell."""
    directory = Path(path)
    manifest = json.loads((directory / fmt.MANIFEST_FILENAME).read_text())
    entry = manifest["splits"]["all"]["shards"][shard]
    file = directory / fmt.offsets_filename(entry["filename"])
    data = fmt.offsets_bytes(change(list(fmt.parse_offsets(file.read_bytes()))))
    file.write_bytes(data)
    entry["offsets"] = {"num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    write_manifest(directory, manifest)


@pytest.mark.usefixtures("read_path")
def test_an_offset_moved_into_a_frame_names_the_records_it_breaks(tmp_path):
    path, shards, ordered = _small(tmp_path)
    start = _offsets(path, 0)[4]

    def shift(offsets: list[int]) -> list[int]:
        offsets[4] += 3
        return offsets

    _tamper_offsets(path, 0, shift)
    r = open_records(path)  # the offsets are in order: refused only where a frame is read
    assert r.__getitems__([0, 1, 2, 5, 6, 10]) == [ordered[i] for i in (0, 1, 2, 5, 6, 10)]
    with pytest.raises(
        CorruptShardError, match=f"{shards[0]}: record 4 at byte offset {start + 3}"
    ):
        r[4]
    with pytest.raises(
        CorruptShardError,
        match=f"{shards[0]}: record 3 at byte offset {_offsets(path, 0)[3]}: its length field "
        f"says {len(ordered[3])} bytes, the record offsets {len(ordered[3]) + 3}",
    ):
        r[3]


@pytest.mark.parametrize(
    ("change", "record"),
    [
        (lambda o: [o[0], o[3], o[2], o[1], *o[4:]], 1),  # two offsets swapped
        (lambda o: [o[0] + 16, *o[1:]], 0),  # the first one not at 0
        (lambda o: [*o[:5], o[5] + 10**6], 5),  # the last past the shard's end
    ],
    ids=["swapped", "first-not-0", "past-the-end"],
)
def test_offsets_out_of_order_are_refused_by_records_naming_file_and_record(
    tmp_path, change, record
):
    path, shards, _ = _small(tmp_path)
    _tamper_offsets(path, 0, change)
    name = Path(shards[0]).name
    with pytest.raises(
        CorruptShardError,
        match=f"{name}.offsets: record {record} of {name} at offset .*: not a record's frame",
    ):
        open_records(path)
    open_records(path, split="all[6:]")  # shard 1 alone: its offsets are read, not shard 0's


def test_a_shard_symlinked_out_of_the_dataset_is_refused(tmp_path):
    path, shards, _ = _small(tmp_path / "ds")
    outside = tmp_path / "elsewhere"
    shutil.move(shards[1], outside)
    os.symlink(outside, shards[1])
    with pytest.raises(ShardError, match=f"{shards[1]}: shard leads outside .*{outside}"):
        open_records(path)
    os.unlink(shards[1])
    with pytest.raises(MissingShardError, match=Path(shards[1]).name):
        open_records(path)


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_a_compressed_dataset_is_refused_naming_the_way_out(tmp_path, compression):
    path, _, _ = _small(tmp_path, compression=compression)
    with pytest.raises(
        NoRandomAccessError,
        match=f"{path}: {compression} shards have no random access .*read them in order "
        ".*--compression NONE",
    ):
        open_records(path)


def test_a_dataset_without_record_offsets_is_refused(tmp_path):
    path, _, _ = _small(tmp_path, format_version=3)
    with pytest.raises(NoOffsetsError, match=f"{path}: format_version 3 has no record offsets"):
        open_records(path)


# ------------------------------------------------------------------ gs://

SERVE = """
import hashlib, json, sys
from replay import storage
from replay.records import open_records
storage.GCS_RETRY_INITIAL_S, storage.GCS_RETRY_TIMEOUT_S = 0.01, 5.0  # quick, as the faults come
sources = {}
print(json.dumps({"len": len(open_records(sys.argv[1]))}), flush=True)
for line in sys.stdin:
    ask = json.loads(line)
    r = sources.get(ask["source"]) or sources.setdefault(ask["source"], open_records(sys.argv[1]))
    before = r.bytes_read
    try:
        got = [hashlib.sha256(x).hexdigest() for x in r.__getitems__(ask["ids"])]
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        continue
    print(json.dumps({"sha256": got, "bytes_read": r.bytes_read - before}), flush=True)
"""
GS_COUNTS = (120, 0, 30)  # records of ~8 KB: shard 0 is ~1 MB


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    from tests.support.gcs_server import running_gcs_server

    with running_gcs_server(tmp_path_factory.mktemp("gcs-tls")) as server:
        yield server
        assert server.refused == [], "requests to other hosts than the emulator's"


@pytest.fixture(scope="module")
def gs_dataset(tmp_path_factory, gcs) -> tuple[str, list[bytes]]:
    """(local path, its records as tf.data reads them); the same files under gs://data/ds."""
    path = tmp_path_factory.mktemp("gs-records")
    expected = write_dataset(
        path, num_examples_per_shard=GS_COUNTS, compression="NONE", win_len=4000, seed=9
    )
    gcs.create_bucket("data")
    gcs.upload_tree(path, "data", "ds")
    return str(path), _tf_read(expected["shards"]["all"])


class _Remote:
    """`SERVE` on gs://data/ds in a subprocess with the emulator's environment: each `get` is
    one ``__getitems__`` there, with the ranges and bytes google-cloud-storage's front
    (`BatchShim`, ``beam_faults``) passed for it."""

    def __init__(self, gcs) -> None:
        self.faults = gcs.beam_faults
        env = {**os.environ, **gcs.env(), "TF_CPP_MIN_LOG_LEVEL": "2"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, "gs://data/ds"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.len = self._answer()["len"]

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read()[-3000:]
        return json.loads(line)

    def get(self, ids, *, source: int = 0) -> tuple[dict, list[str], int]:
        """(`SERVE`'s answer, the Range headers of the requests, the bytes served) of a get on
        the subprocess's `Records` number `source` (each opened on first use)."""
        self.faults.ranges.clear()
        self.faults.served = 0
        ask = {"source": source, "ids": [int(i) for i in ids]}
        self.proc.stdin.write(json.dumps(ask) + "\n")
        self.proc.stdin.flush()
        answer = self._answer()
        return answer, list(self.faults.ranges), self.faults.served

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def remote(gcs, gs_dataset):
    served = _Remote(gcs)
    yield served
    served.close()


def _sha(records_: list[bytes]) -> list[str]:
    return [hashlib.sha256(x).hexdigest() for x in records_]


HEAD_BYTES = 1024  # an answer's status line and headers, at most (the emulator's: ~500)


@pytest.mark.slow
def test_a_gs_dataset_reads_as_the_local_one_in_few_requests_and_through_faults(
    gcs, gs_dataset, remote
):
    """Every record by index on gs:// is the local one; neighbouring records are one ranged
    request, of exactly their bytes; with every third request failed (503 or a reset
    connection) google-cloud-storage's client retries and the records are the same; when every
    request fails, the error names the shard."""
    path, ordered = gs_dataset
    assert remote.len == len(ordered) == sum(GS_COUNTS)
    ids = np.random.default_rng(2).permutation(len(ordered)).tolist() + [3, 3, 140]
    answer, ranges, _ = remote.get(ids)
    assert answer["sha256"] == _sha([ordered[i] for i in ids])
    assert answer["bytes_read"] == sum(FRAME_BYTES + len(x) for x in ordered)  # whole shards
    assert len(ranges) == 2  # one range a shard

    local = open_records(path)
    answer, ranges, _ = remote.get(range(10, 20))
    assert answer["sha256"] == _sha(ordered[10:20])
    assert answer["bytes_read"] == local.locate(19).end - local.locate(10).start
    assert ranges == [f"bytes={local.locate(10).start}-{local.locate(19).end - 1}"]

    remote.faults.every, remote.faults.resets, remote.faults.injected = 3, True, 0
    remote.faults.reset = 0
    try:
        for seed in range(3):
            ids = np.random.default_rng(seed).integers(0, len(ordered), 12).tolist()
            answer, _, _ = remote.get(ids)
            assert answer.get("sha256") == _sha([ordered[i] for i in ids]), answer
        assert remote.faults.injected >= 3 and remote.faults.reset >= 1, remote.faults.injected
        remote.faults.every = 1
        answer, _, _ = remote.get([130])
    finally:
        remote.faults.every, remote.faults.resets = 0, False
    error = answer["error"]
    shard = "gs://data/ds/audiorecords.tfrecord-00002-of-00003"
    assert error.startswith(f"ShardError: {shard}: reading bytes "), error
    assert "failed: RetryError: " in error and "\n" not in error, error


@pytest.mark.slow
def test_a_gs_batch_is_served_about_the_bytes_it_asks(gs_dataset, remote):
    """Neighbouring records: one request, served their frames and one answer's head (TensorFlow's
    GCS file system asked 64 MiB from the first frame and was served the rest of the shard)."""
    _, ordered = gs_dataset
    remote.get([0])  # the client's first request to a bucket also fetches its metadata, once
    answer, ranges, served = remote.get(range(10, 15))
    assert answer["sha256"] == _sha(ordered[10:15])
    assert len(ranges) == 1
    assert answer["bytes_read"] <= served <= answer["bytes_read"] + HEAD_BYTES, (ranges, served)


SHARES = ("frames", "merged", "read", "served", "heads")


@pytest.fixture(scope="module")
def pipeline_reads(gs_dataset, remote) -> list[dict[str, float]]:
    """One epoch of the global order (blocks of one record, global batches of 32, the default
    window) read on gs:// by 4 pipelines, each its own `Records` there, 8 records a get; each
    pipeline's bytes as fractions of the epoch's shard bytes: its frames (each once), the
    merged ranges of its gets worked out here (`merge_ranges`, `GAP_BYTES`), what its
    `Records` counted (`bytes_read`), what the front served it, and `HEAD_BYTES` a request."""
    path, ordered = gs_dataset
    info = load_info(path)
    epoch = sum(shard.num_bytes for shard in info.shard_list())
    local = open_records(path)
    first = np.cumsum((0, *GS_COUNTS))
    blocks = plan_blocks(GS_COUNTS, block_length=1)
    n, batch, workers = sum(GS_COUNTS), 32, 4
    remote.get([0], source=workers)  # the client's first request to a bucket: its metadata too
    out = []
    for w in range(workers):
        mine = [p for p in range(n) if p % batch // (batch // workers) == w]
        where = positions_records(blocks, mine, seed=4, window_blocks=WINDOW_BLOCKS)
        ids = [int(first[s] + r) for s, r in where]
        frames = merged = read = served = requests = 0
        for i in range(0, len(ids), 8):
            answer, ranges, got = remote.get(ids[i : i + 8], source=w)
            assert answer["sha256"] == _sha([ordered[k] for k in ids[i : i + 8]])
            places = [local.locate(k) for k in ids[i : i + 8]]
            for shard in {where_.shard.filename for where_ in places}:
                begin, ends = zip(
                    *[(x.start, x.end) for x in places if x.shard.filename == shard], strict=True
                )
                frames += sum(e - b for b, e in set(zip(begin, ends, strict=True)))
                merged += sum(e - b for b, e in merge_ranges(begin, ends, gap=GAP_BYTES))
            read += answer["bytes_read"]
            served, requests = served + got, requests + len(ranges)
        sizes = (frames, merged, read, served, requests * HEAD_BYTES)
        out.append({k: v / epoch for k, v in zip(SHARES, sizes, strict=True)})
    return out


@pytest.mark.slow
def test_each_of_4_pipelines_is_served_the_ranges_it_asks_on_gs(pipeline_reads):
    """Each pipeline is served its merged ranges and no more (a head a request aside): its
    frames, a quarter of the epoch's, and the gaps `GAP_BYTES` merges between them."""
    for share in pipeline_reads:
        assert share["read"] == share["merged"], pipeline_reads
        assert share["read"] <= share["served"] <= share["read"] + share["heads"], pipeline_reads
        assert 0.2 <= share["frames"] <= 0.3, pipeline_reads


@pytest.mark.slow
def test_each_of_4_pipelines_reads_at_most_0_3_of_an_epoch_s_bytes_on_gs(pipeline_reads):
    """What W = 4 pipelines reading from a bucket pay: each about a quarter of the epoch's
    bytes (with 64 KiB gaps merged, 8 records of ~8 KB here, it was about half)."""
    print(
        "shares of the epoch's bytes:",
        [{k: round(v, 3) for k, v in s.items()} for s in pipeline_reads],
    )
    assert all(share["read"] <= 0.3 for share in pipeline_reads), pipeline_reads
