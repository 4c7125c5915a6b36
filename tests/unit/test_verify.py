"""``python -m pipelines.verify`` (`pipelines.verify.run`) on small hand-made datasets
(tests/support/replay_fixtures.py): the ``OK`` line's counts and size, ``--split``, one ``BAD``
line per bad shard of the splits checked and the ``FAILED`` summary, and one ``FAILED`` line for
a directory that is not a complete dataset or whose source table was tampered with. Real pipeline
output, corrupted every way: tests/reliability/test_shard_check_corruption.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines import verify
from tests.support.replay_fixtures import write_dataset

COUNTS = {"train": (5, 7), "test": (3,)}


@pytest.fixture
def dataset(tmp_path) -> tuple[Path, dict[str, list[Path]]]:
    """A dataset of splits train (2 shards) and test (1), uncompressed; its shards by split."""
    out = tmp_path / "ds"
    written = write_dataset(
        out, num_examples_per_shard=COUNTS, split_names=("train", "test"), compression="NONE"
    )
    return out, {split: [Path(p) for p in paths] for split, paths in written["shards"].items()}


def _run(capsys, *argv: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = verify.run(list(argv))
    return code, capsys.readouterr().out.splitlines()


def test_a_sound_dataset_is_one_ok_line_with_its_counts(dataset, capsys):
    out, shards = dataset
    size = sum(p.stat().st_size for paths in shards.values() for p in paths)
    code, lines = _run(capsys, f"{out}/")
    assert code == 0 and lines == [
        f"OK {out}: 3 shards, 15 records, {size / 1e6:.1f} MB: CRCs, record counts and sizes "
        "match the manifest"
    ]
    reports = verify.verify(str(out))
    assert [r.shard.path for r in reports] == [str(p) for p in shards["train"] + shards["test"]]
    assert [r.records for r in reports] == [5, 7, 3] and all(r.ok for r in reports)


def test_split_checks_only_its_shards(dataset, capsys):
    out, shards = dataset
    shards["train"][0].write_bytes(b"")  # a bad train shard: not looked at
    code, lines = _run(capsys, str(out), "--split", "test")
    assert code == 0 and lines[0].startswith(f"OK {out}: 1 shards, 3 records, ")
    assert [r.shard.path for r in verify.verify(str(out), split="test")] == [str(shards["test"][0])]


def test_every_bad_shard_is_named_in_manifest_order(dataset, capsys):
    out, shards = dataset
    (a, b), (c,) = shards["train"], shards["test"]
    raw = bytearray(a.read_bytes())
    raw[20] ^= 0x01  # the first record's data: its CRC fails
    a.write_bytes(bytes(raw))
    c.unlink()
    code, lines = _run(capsys, str(out))
    assert code == 1 and len(lines) == 3
    assert lines[0].startswith(f"BAD {a}: ")
    assert lines[1] == f"BAD {c}: missing"
    assert lines[2] == f"FAILED {out}: 2 of 3 shards are bad"
    assert str(b) not in "\n".join(lines)
    code, lines = _run(capsys, str(out), "--split", "train", "--split", "test")
    assert code == 1 and lines[-1] == f"FAILED {out}: 2 of 3 shards are bad"


def test_not_a_complete_dataset_is_one_failed_line(tmp_path, capsys):
    (tmp_path / "partial").mkdir()
    code, lines = _run(capsys, str(tmp_path / "partial"))
    assert code == 1 and len(lines) == 1 and lines[0].startswith(f"FAILED {tmp_path / 'partial'}")
    code, lines = _run(capsys, str(tmp_path / "nope"))
    assert code == 1 and len(lines) == 1 and lines[0].startswith("FAILED ")


def test_a_tampered_source_table_is_one_failed_line_naming_it(dataset, capsys):
    out, _ = dataset
    table = out / "files.jsonl"
    table.write_bytes(table.read_bytes()[:-3])
    code, lines = _run(capsys, str(out))
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith("FAILED ") and str(table) in lines[0]
