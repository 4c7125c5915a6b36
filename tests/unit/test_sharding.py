"""Pure split/shard planning: stable splits, exact ranks, shard ranges per class."""

import pytest

from transforms.record import shard_plan
from transforms.record.shard_plan import Sharding


def test_parse_splits_normalises_and_rejects_bad_specs():
    assert shard_plan.parse_splits("train=80,validation=10,test=10") == (
        ("train", 0.8),
        ("validation", 0.1),
        ("test", 0.1),
    )
    assert shard_plan.parse_splits(None) == ()
    for bad in ("train", "train=0", "a=1,a=2", "all=1", "x/y=1", "t=abc"):
        with pytest.raises(ValueError, match="--splits"):
            shard_plan.parse_splits(bad)


def test_split_of_is_stable_and_relative_to_the_pattern_base():
    sh = Sharding(splits=shard_plan.parse_splits("train=50,test=50"), split_base="/data/")
    moved = Sharding(splits=sh.splits, split_base="gs://bucket/corpus/")
    names = [f"a/{i}.wav" for i in range(200)]
    here = [shard_plan.split_of("/data/" + n, sh) for n in names]
    assert here == [shard_plan.split_of("gs://bucket/corpus/" + n, moved) for n in names]
    assert 60 < here.count("train") < 140  # roughly half
    assert shard_plan.pattern_base("data/**/*.wav") == "data/"
    assert shard_plan.pattern_base("/x/y/file.wav") == "/x/y/"


class _F:
    def __init__(self, index, split="all"):
        self.index, self.split, self.path = index, split, f"f{index}"


def test_segments_keep_the_first_max_elements_and_count_ranks_per_split():
    sh = Sharding(splits=(("a", 0.5), ("b", 0.5)), max_elements=9)
    files = [(_F(0, "a"), 4), (_F(1, "b"), 3), (_F(2, "a"), 5), (_F(3, "b"), 2)]
    segments = shard_plan.plan_segments(files, sh)
    assert [(f.index, kept, rank) for f, kept, rank in segments] == [
        (0, 4, 0),
        (1, 3, 0),
        (2, 2, 4),
        (3, 0, 3),
    ]


def test_tasks_cut_long_files_and_cover_every_row_once_in_order():
    segments = [(_F(0), 10, 0), (_F(1), 0, 10), (_F(2), 3, 10), (_F(3), 7, 13)]
    tasks = shard_plan.plan_tasks(segments, rows_per_task=4)
    assert [t.rows for t in tasks] == [4, 4, 4, 4, 4]
    rows = [
        (s.file.index, r) for t in tasks for s in t.segments for r in range(s.row_start, s.row_stop)
    ]
    assert rows == [(0, r) for r in range(10)] + [(2, r) for r in range(3)] + [
        (3, r) for r in range(7)
    ]
    assert any(s.file.index == 1 for t in tasks for s in t.segments)  # empty file still listed


@pytest.mark.parametrize(
    ("total", "per", "limit", "want"),
    [
        (10, 3, None, 4),
        (9, 3, None, 3),
        (10, 10, None, 1),
        (10, 1, None, 10),
        (10, 3, 6, 2),
        (10, 4, 11, 3),
        (0, 5, None, 1),
    ],
)
def test_shard_counts_under_elements_per_shard(total, per, limit, want):
    sh = Sharding(elements_per_shard=per, max_elements=limit)
    segments = shard_plan.plan_segments([(_F(0), total)], sh)
    assert shard_plan.split_shard_counts(segments, sh, {"all": 99}) == {"all": want}


def test_class_shards_are_disjoint_ranges():
    sh = Sharding(shard_by="class", classes=("bird", "dog", "rain"))
    seen = {c: set() for c in sh.classes}
    for c in sh.classes:
        for start in range(0, 4000, 10):
            seen[c].add(
                shard_plan.shard_of((7, 0, start), label=c, split_rank=0, num_shards=7, sharding=sh)
            )
    assert set.union(*seen.values()) == set(range(7))
    assert not (seen["bird"] & seen["dog"]) and not (seen["dog"] & seen["rain"])
