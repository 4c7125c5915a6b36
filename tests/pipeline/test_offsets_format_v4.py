"""Format version 4: every shard has a record offsets file (``offsets/<shard>.offsets``).

Real record runs (the bundled sample, uncompressed and GZIP): each offset is where plain tf.data,
reading from it, finds that record; the files are listed in the manifest with their SHA-256;
``python -m pipelines.verify`` checks them; the global read order reads the recorded shards as
its documented function says. Hand-made datasets of every older version are read still
(tests/pipeline/test_format_v2.py, test_tables_format_v3.py).

Crafted offsets files on hand-made datasets (`write_dataset`): a symlink out of the dataset, or
under an offsets/ that is one (to byte-identical files, so only the confinement check can refuse
them), a size off by whole records, a FIFO, are refused naming the file, by
``replay_dataset(order=...)`` before it returns (the manifest alone, `load_info`, does not open
them), by `verify_dataset` and by ``python -m pipelines.verify``; verify checks every offset of
a shard longer than one of its read batches.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from pipelines import verify as verify_cli
from replay import CorruptShardError, load_info, replay_dataset, verify_dataset
from replay import format as fmt
from replay.global_order import GlobalOrder, plan_blocks, positions_records
from replay.shard_check import READ_BATCH
from tests.support.record_helpers import SAMPLE_DIR, raw_manifest, record
from tests.support.replay_fixtures import write_dataset, write_manifest


@pytest.fixture(scope="module", params=["NONE", "GZIP"])
def recorded(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"v4-{request.param}")
    record(
        str(SAMPLE_DIR / "*.wav"), out, "--win_len", "4000", "--num_shards", "2",
        "--compression", request.param,
    )  # fmt: skip
    return out


def _records(path: str, compression: str, offset: int | None = None) -> list[bytes]:
    """The shard's records read by plain tf.data, from `offset` (the op's byte_offsets)."""
    kind = "" if compression == "NONE" else compression
    if offset is None:
        return list(tf.data.TFRecordDataset(path, compression_type=kind).as_numpy_iterator())

    def from_offset(start: tf.Tensor) -> tf.data.Dataset:  # inside a function: at top level
        variant = tf.raw_ops.TFRecordDatasetV2(  # the op does not serialise (TF 2.21)
            filenames=[path],
            compression_type=kind,
            buffer_size=tf.constant(1 << 16, tf.int64),
            byte_offsets=tf.reshape(start, [1]),
        )
        return tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.string))

    offsets = tf.data.Dataset.from_tensors(tf.constant(offset, tf.int64))
    return list(offsets.flat_map(from_offset).as_numpy_iterator())


def test_each_offset_is_where_its_record_starts(recorded):
    manifest = raw_manifest(recorded)
    assert manifest["format_version"] == fmt.FORMAT_VERSION >= fmt.OFFSETS_VERSION
    shards = manifest["splits"]["all"]["shards"]
    assert len(shards) == 2 and sum(s["num_examples"] for s in shards) == 72
    for shard in shards:
        data = (recorded / fmt.offsets_filename(shard["filename"])).read_bytes()
        assert shard["offsets"] == {
            "num_bytes": 8 * shard["num_examples"],
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        offsets = fmt.parse_offsets(data)
        path = str(recorded / shard["filename"])
        records = _records(path, manifest["compression"])
        assert len(offsets) == len(records) == shard["num_examples"]
        assert offsets[0] == 0 and list(offsets) == sorted(set(offsets))
        for i in (1, len(records) // 2, len(records) - 1):
            assert _records(path, manifest["compression"], offsets[i]) == records[i:]


def test_verify_checks_the_offsets(recorded, capsys):
    assert verify_cli.run([str(recorded)]) == 0
    manifest = raw_manifest(recorded)
    shard = manifest["splits"]["all"]["shards"][1]
    file = recorded / fmt.offsets_filename(shard["filename"])
    good = file.read_bytes()
    try:
        file.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
        capsys.readouterr()
        assert verify_cli.run([str(recorded)]) == 1
        out = capsys.readouterr().out
        assert f"{shard['filename']}.offsets: record offsets: SHA-256 differs" in out
    finally:
        file.write_bytes(good)


def test_the_global_order_reads_the_recorded_shards_as_documented(recorded):
    info = load_info(recorded)
    stored = [
        (int(e[fmt.INDEX_KEY]), int(e[fmt.WIN_START_KEY]))
        for e in replay_dataset(
            recorded, features=[fmt.INDEX_KEY, fmt.WIN_START_KEY]
        ).as_numpy_iterator()
    ]
    counts = [s.num_examples for s in info.shard_list()]
    first = np.cumsum((0, *counts))
    order = GlobalOrder(seed=11, start=30, block_length=5, window_blocks=2)
    ds = replay_dataset(
        recorded, order=order, features=[fmt.INDEX_KEY, fmt.WIN_START_KEY], repeat=True
    )
    got = [
        (int(e[fmt.INDEX_KEY]), int(e[fmt.WIN_START_KEY])) for e in ds.take(150).as_numpy_iterator()
    ]
    blocks = plan_blocks(counts, block_length=5)
    where = positions_records(blocks, range(30, 180), seed=11, window_blocks=2)
    assert got == [stored[first[s] + r] for s, r in where]


def _offsets_file(directory: Path, shard: int) -> tuple[str, Path]:
    """The shard's file name and its offsets file."""
    manifest = json.loads((directory / fmt.MANIFEST_FILENAME).read_text())
    name = manifest["splits"]["all"]["shards"][shard]["filename"]
    return name, directory / fmt.offsets_filename(name)


def _symlink_out(file: Path) -> None:
    """The file moved out of the dataset, a symlink to it in its place: the same bytes."""
    outside = file.parents[2] / "outside.offsets"
    os.replace(file, outside)
    file.symlink_to(outside)


def _directory_symlink_out(file: Path) -> None:
    """The dataset's offsets/ directory moved out of it, a symlink to it in its place."""
    outside = file.parents[2] / "outside-offsets"
    os.replace(file.parent, outside)
    file.parent.symlink_to(outside, target_is_directory=True)


def _short(file: Path) -> None:
    file.write_bytes(file.read_bytes()[:-8])  # one record's offset less


def _long(file: Path) -> None:
    file.write_bytes(file.read_bytes() + fmt.offsets_bytes([10**6]))  # one more


def _fifo(file: Path) -> None:
    file.unlink()
    os.mkfifo(file)  # reading it would block forever


# Shard 0 holds 6 records: its offsets file, 48 bytes.
CRAFTED_OFFSETS = {
    "symlink_out": (_symlink_out, "record offsets lead outside the dataset, to "),
    "directory_symlink_out": (
        _directory_symlink_out,
        "record offsets lead outside the dataset, to ",
    ),
    "short": (_short, "record offsets: 40 bytes, the manifest's 6 records take 48"),
    "long": (_long, "record offsets: larger than 48 bytes"),
    "fifo": (_fifo, "record offsets: not a regular file"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED_OFFSETS))
def test_crafted_offsets_are_refused_naming_the_file(tmp_path, capsys, case):
    edit, message = CRAFTED_OFFSETS[case]
    directory = tmp_path / "dataset"
    write_dataset(directory, num_examples_per_shard=(6, 5), compression="NONE")
    name, file = _offsets_file(directory, 0)
    edit(file)
    where = f"{file}: {message}"
    load_info(directory)  # the manifest alone: no offsets file is opened
    with pytest.raises(CorruptShardError) as e:  # before the dataset is returned
        replay_dataset(directory, order=GlobalOrder(seed=0))
    assert str(e.value).startswith(where) and "\n" not in str(e.value), str(e.value)
    with pytest.raises(CorruptShardError, match=re.escape(f"{name}: corrupt shard: {where}")):
        verify_dataset(directory)
    assert verify_cli.run([str(directory)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"BAD {directory / name}: {e.value}" and out[-1].startswith("FAILED"), out


def _shift_offset(directory: Path, shard: int, record: int) -> None:
    """Moves a record's offset 3 bytes into its frame, with a manifest crafted to agree (the
    offsets file's digest)."""
    manifest = json.loads((directory / fmt.MANIFEST_FILENAME).read_text())
    entry = manifest["splits"]["all"]["shards"][shard]
    file = directory / fmt.offsets_filename(entry["filename"])
    offsets = list(fmt.parse_offsets(file.read_bytes()))
    offsets[record] += 3
    data = fmt.offsets_bytes(offsets)
    file.write_bytes(data)
    entry["offsets"] = {"num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    write_manifest(directory, manifest)


@pytest.mark.parametrize("compression", ["NONE", "GZIP"])
def test_verify_checks_every_offset_of_a_shard_longer_than_a_read_batch(
    tmp_path, capsys, compression
):
    """Verify reads a shard in batches of `READ_BATCH` records: each record's start is carried
    across them, so a shard of 2 batches and more verifies, and an offset wrong in its second
    batch is found, by its record number."""
    count = 2 * READ_BATCH + 50
    layout = {"num_examples_per_shard": (3, count), "compression": compression}
    write_dataset(tmp_path / "intact", with_features=False, **layout)
    assert verify_dataset(tmp_path / "intact").shard_list()[1].num_examples == count
    for bad in (READ_BATCH, count - 1):
        directory = tmp_path / f"shifted-{bad}"
        write_dataset(directory, with_features=False, **layout)
        _shift_offset(directory, 1, bad)
        name, file = _offsets_file(directory, 1)
        message = f"record {bad} does not start where its record offsets file says ({file})"
        with pytest.raises(CorruptShardError, match=re.escape(f"{name}: corrupt shard: {message}")):
            verify_dataset(directory)
        capsys.readouterr()
        assert verify_cli.run([str(directory)]) == 1
        assert f"BAD {directory / name}: {message}" in capsys.readouterr().out
