"""Python API end to end: shard_func, --elements_per_shard / --max_elements boundaries, splits."""

from __future__ import annotations

import pytest

from pipelines import RecordConfig, record_dataset
from tests.support.record_helpers import (
    SAMPLE_DIR,
    load_manifest,
    read_records,
    read_records_by_shard,
)

pytestmark = pytest.mark.slow
PATTERN = str(SAMPLE_DIR / "*.wav")
WIN = 4000  # 48000-frame sample files -> 12 windows each, 72 in all


def _shards(out):
    """{filename: [(index, win_start), ...]} in stored order."""
    return {
        name: [(int(r["index"]), int(r["win_start_idx"])) for r in records]
        for name, records in read_records_by_shard(out).items()
    }


def test_custom_shard_func_and_result_object(tmp_path, capsys):
    config = RecordConfig(
        input_pattern=PATTERN,
        output_dir=str(tmp_path / "o"),
        win_len=WIN,
        features=["log_mel"],
        num_shards=3,
    )
    result = record_dataset(config, shard_func=lambda e: int(e["index"]))
    assert result.num_examples == 72 and result.num_files == 6 and result.num_failed == 0
    assert result.split_counts == {"all": 72} and result.num_shards == 3
    assert result.windows_per_second > 0 and result.counters["windows"] == 72
    assert capsys.readouterr().out == ""  # library code prints nothing; only the CLI does
    for name, rows in _shards(tmp_path / "o").items():
        shard = int(name.split(".tfrecord-")[1][:5])
        assert rows and all(index % 3 == shard for index, _ in rows), name


def test_elements_per_shard_and_max_elements_keep_exact_counts(tmp_path):
    record_dataset(
        input_pattern=PATTERN,
        output_dir=str(tmp_path / "a"),
        win_len=WIN,
        features="none",
        elements_per_shard=5,
        max_elements=71,
    )
    shards = _shards(tmp_path / "a")
    assert [len(v) for v in shards.values()] == [5] * 14 + [1]
    flat = [row for rows in shards.values() for row in rows]
    expected = [(i, s) for i in range(6) for s in range(0, 48000, WIN)][:71]
    assert flat == expected  # consecutive in file order, nothing dropped at a boundary


def test_elements_per_shard_on_file_boundaries_and_max_elements_beyond_total(tmp_path):
    record_dataset(
        input_pattern=PATTERN,
        output_dir=str(tmp_path / "b"),
        win_len=WIN,
        features="none",
        elements_per_shard=12,
        max_elements=73,
    )
    shards = _shards(tmp_path / "b")
    assert [len(v) for v in shards.values()] == [12] * 6
    assert [{i for i, _ in rows} for rows in shards.values()] == [{i} for i in range(6)]
    record_dataset(
        input_pattern=PATTERN,
        output_dir=str(tmp_path / "c"),
        win_len=WIN,
        features="none",
        max_elements=1,
    )
    assert load_manifest(tmp_path / "c")["num_examples"] == 1


def test_splits_keep_files_whole_and_replay_reads_one_split(tmp_path):
    from replay import replay_dataset

    out = tmp_path / "s"
    result = record_dataset(
        input_pattern=PATTERN,
        output_dir=str(out),
        win_len=WIN,
        features="none",
        splits="train=50,test=50",
        shard_by="file",
    )
    m = load_manifest(out)
    assert list(m["splits"]) == ["train", "test"]
    assert sum(result.split_counts.values()) == 72
    by_split = {name: set() for name in m["splits"]}
    for f in m["files"]:
        by_split[f["split"]].add(f["path"])
    assert not by_split["train"] & by_split["test"]
    for name in ("train", "test"):
        paths = {
            e["filepath"].decode() for e in replay_dataset(out, split=name).as_numpy_iterator()
        }
        assert paths == by_split[name]
        assert sum(1 for _ in replay_dataset(out, split=name)) == m["splits"][name]["num_examples"]


def test_shard_by_file_keeps_files_whole_across_several_shards(tmp_path):
    """Pins ``--shard_by file`` end to end with 4 shards in the split: read back with plain
    tf.data, each file's 12 windows are all in one shard and the 6 files use several shards."""
    out = tmp_path / "f"
    record_dataset(
        input_pattern=PATTERN,
        output_dir=str(out),
        win_len=WIN,
        features="none",
        shard_by="file",
        num_shards=4,
    )
    shards = _shards(out)
    assert len(shards) == 4 and sum(len(rows) for rows in shards.values()) == 72
    holders = {
        i: [name for name, rows in shards.items() if any(r[0] == i for r in rows)] for i in range(6)
    }
    assert all(len(names) == 1 for names in holders.values()), holders
    for i, (name,) in holders.items():
        assert sorted(s for j, s in shards[name] if j == i) == list(range(0, 48000, WIN))
    assert len({name for (name,) in holders.values()}) > 1  # files spread over the shards


def test_shard_by_class_gives_each_class_its_own_shards(tmp_path):
    out = tmp_path / "k"
    record_dataset(
        input_pattern=PATTERN,
        output_dir=str(out),
        win_len=WIN,
        features="none",
        shard_by="class",
        num_shards=2,
    )  # raised to one shard per class (3)
    m = load_manifest(out)
    assert len(m["splits"]["all"]["shards"]) == 3
    classes_per_shard, records = [], iter(read_records(out))
    for shard in m["splits"]["all"]["shards"]:
        classes_per_shard.append({next(records)["class"] for _ in range(shard["num_examples"])})
    assert sorted(len(c) for c in classes_per_shard) == [1, 1, 1]
    assert set.union(*classes_per_shard) == {"bird", "engine", "rain"}


def test_the_command_prints_the_summary_line(tmp_path, capsys):
    """``python -m pipelines.record`` prints one line about the run (`record.summary_line`)."""
    from pipelines import record as record_cli

    out = tmp_path / "o"
    argv = ["--input_pattern", PATTERN, "--output_dir", str(out), "--win_len", str(WIN)]
    assert record_cli.main([*argv, "--features", "none"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("recorded 72 windows from 6 files (0 failed)")
    assert lines[0].endswith(f"-> {out}")
