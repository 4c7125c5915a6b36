"""Guarantee 4, corruption is detected: on REAL pipeline output (the reference run), a flipped
byte, a truncated or a deleted shard is reported, naming the shard, by `replay_dataset` (up front
or while iterating), by `replay.verify_dataset`, and by ``python -m pipelines.verify``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import verify
from replay import (
    CorruptShardError,
    MissingShardError,
    ShardSizeError,
    replay_dataset,
    verify_dataset,
)
from replay import format as fmt
from tests.support.reliability import ROOT, copy_dataset, shard_files

pytestmark = pytest.mark.slow


@pytest.fixture
def dataset(tmp_path, reliability_reference) -> Path:
    """A fresh copy of the reference dataset (uncompressed shards)."""
    _, _, reference = reliability_reference
    return copy_dataset(reference, tmp_path / "copy")


def gzip_copy(dataset: Path) -> Path:
    """`dataset` with every shard re-compressed as GZIP (records and order unchanged: the record
    offsets, counted in the uncompressed stream, stay)."""
    import tensorflow as tf

    manifest = json.loads((dataset / "manifest.json").read_text())
    for shard in manifest["splits"]["all"]["shards"]:
        src = dataset / shard["filename"]
        offsets = dataset / fmt.offsets_filename(shard["filename"])
        shard["filename"] += ".gz"
        with tf.io.TFRecordWriter(str(dataset / shard["filename"]), "GZIP") as writer:
            for record in tf.data.TFRecordDataset(str(src)):
                writer.write(record.numpy())
        src.unlink()
        offsets.rename(dataset / fmt.offsets_filename(shard["filename"]))  # the same records
        shard["num_bytes"] = (dataset / shard["filename"]).stat().st_size
    manifest["compression"] = "GZIP"
    (dataset / "manifest.json").write_text(json.dumps(manifest))
    return dataset


def _shards(dataset: Path) -> list[Path]:
    return [dataset / name for name in shard_files(dataset)]


def _flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset % len(raw)] ^= 0x01
    path.write_bytes(bytes(raw))


def _iterate(dataset: Path) -> int:
    return sum(1 for _ in replay_dataset(dataset, features=["index"]))


def _verify_cli(dataset: Path, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = verify.run([str(dataset)])
    return code, capsys.readouterr().out.strip().splitlines()


def test_intact_dataset_verifies(dataset, capsys):
    code, lines = _verify_cli(dataset, capsys)
    assert code == 0 and len(lines) == 1 and lines[0].startswith(f"OK {dataset}: 3 shards, 32 ")
    assert verify_dataset(dataset).num_examples() == _iterate(dataset) == 32


# Offsets to flip (negative: from the end; a float: that fraction of the file). Plain TFRecord:
# the first record's length, its length CRC, its data, the file's middle and the last data CRC.
# GZIP: the magic, the deflate stream, the middle, the trailer's CRC-32 and length.
FLIPS = {
    "NONE": {"length": 0, "length_crc": 9, "payload": 5000, "middle": 0.5, "last_crc": -1},
    "GZIP": {"magic": 0, "deflate": 100, "middle": 0.5, "gzip_crc": -5, "gzip_size": -1},
}


@pytest.mark.parametrize(
    ("compression", "where"),
    [(c, w) for c, flips in FLIPS.items() for w in flips],
    ids=lambda x: x,
)
def test_one_flipped_byte_is_found_and_the_shard_named(dataset, capsys, compression, where):
    """A bit flip anywhere: a record's length, its CRCs or its data; in plain or GZIP shards."""
    import tensorflow as tf

    if compression == "GZIP":
        gzip_copy(dataset)
    bad, *good = _shards(dataset)
    offset = FLIPS[compression][where]
    offset = offset if isinstance(offset, int) else int(bad.stat().st_size * offset)
    _flip(bad, offset)
    with pytest.raises(tf.errors.OpError, match=f"shard {bad} is corrupt"):
        _iterate(dataset)  # same size: found while reading, the shard named
    with pytest.raises(CorruptShardError, match=str(bad)):
        verify_dataset(dataset)
    code, lines = _verify_cli(dataset, capsys)
    assert code == 1 and lines[0].startswith(f"BAD {bad}: ") and len(lines) == 2
    assert lines[-1] == f"FAILED {dataset}: 1 of 3 shards are bad"
    assert not any(str(g) in "\n".join(lines) for g in good)


@pytest.mark.parametrize("cut", [1, 100, 0.5, 1.0])
def test_truncated_shard_is_refused_up_front(dataset, capsys, cut):
    bad = _shards(dataset)[1]
    size = bad.stat().st_size
    keep = size - cut if isinstance(cut, int) else int(size * (1 - cut))
    with open(bad, "r+b") as fh:
        fh.truncate(keep)
    for read in (replay_dataset, verify_dataset):
        with pytest.raises(ShardSizeError, match=f"{bad}: shard is {keep} bytes"):
            read(dataset)
    code, lines = _verify_cli(dataset, capsys)
    assert code == 1 and lines[0].startswith(f"BAD {bad}: {keep} bytes, the manifest says {size}")


def test_deleted_shard_is_refused_up_front(dataset, capsys):
    bad = _shards(dataset)[2]
    bad.unlink()
    for read in (replay_dataset, verify_dataset):
        with pytest.raises(MissingShardError, match=bad.name):
            read(dataset)
    code, lines = _verify_cli(dataset, capsys)
    assert code == 1 and lines == [
        f"BAD {bad}: missing",
        f"FAILED {dataset}: 1 of 3 shards are bad",
    ]


def test_cli_names_every_bad_shard_and_never_imports_beam(dataset, reliability_reference):
    a, b, c = _shards(dataset)
    _flip(a, 7000)
    b.write_bytes(b.read_bytes()[:-10])
    c.unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.verify", str(dataset)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert [line.split(": ")[0] for line in lines[:3]] == [f"BAD {a}", f"BAD {b}", f"BAD {c}"]
    assert lines[-1] == f"FAILED {dataset}: 3 of 3 shards are bad"
    check = (
        "import sys; from pipelines import verify; code = verify.run([sys.argv[1]]); "
        "assert 'apache_beam' not in sys.modules, 'verify imported Beam'; sys.exit(code)"
    )
    _, _, reference = reliability_reference
    proc = subprocess.run(
        [sys.executable, "-c", check, str(reference)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"OK {reference}: ")
