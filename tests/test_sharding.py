"""Pure split/shard planning: stable splits, exact ranks, shard ranges per class."""

import pytest

from transforms import sharding
from transforms.sharding import Sharding


def test_parse_splits_normalises_and_rejects_bad_specs():
    assert sharding.parse_splits("train=80,validation=10,test=10") == (
        ("train", 0.8),
        ("validation", 0.1),
        ("test", 0.1),
    )
    assert sharding.parse_splits(None) == ()
    for bad in ("train", "train=0", "a=1,a=2", "all=1", "x/y=1", "t=abc"):
        with pytest.raises(ValueError, match="--splits"):
            sharding.parse_splits(bad)


def test_split_of_is_stable_and_relative_to_the_pattern_base():
    sh = Sharding(splits=sharding.parse_splits("train=50,test=50"), split_base="/data/")
    moved = Sharding(splits=sh.splits, split_base="gs://bucket/corpus/")
    names = [f"a/{i}.wav" for i in range(200)]
    here = [sharding.split_of("/data/" + n, sh) for n in names]
    assert here == [sharding.split_of("gs://bucket/corpus/" + n, moved) for n in names]
    assert 60 < here.count("train") < 140  # roughly half
    assert sharding.pattern_base("data/**/*.wav") == "data/"
    assert sharding.pattern_base("/x/y/file.wav") == "/x/y/"


def test_ranks_are_consecutive_in_file_order_across_channels_and_splits():
    sh = Sharding(channel_split=True, hop_len=10)
    files = [
        {"index": 1, "path": "b", "num_windows": 4, "num_channels": 2},
        {"index": 0, "path": "a", "num_windows": 3, "num_channels": 1},
    ]
    offsets = sharding.file_offsets(files, sh)
    ranks = [sharding.rank_of(0, 0, s, offsets, sh)[0] for s in (0, 10, 20)]
    ranks += [sharding.rank_of(1, c, s, offsets, sh)[0] for c in (0, 1) for s in (0, 10)]
    assert ranks == list(range(7))


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
def test_rank_shard_counts(total, per, limit, want):
    sh = Sharding(elements_per_shard=per, max_elements=limit)
    files = [{"index": 0, "path": "a", "num_windows": total, "num_channels": 1}]
    assert sharding.rank_shard_counts(sharding.file_offsets(files, sh), files, sh) == {"all": want}


def test_class_shards_are_disjoint_ranges():
    sh = Sharding(shard_by="class", classes=("bird", "dog", "rain"))
    seen = {c: set() for c in sh.classes}
    for c in sh.classes:
        for start in range(0, 4000, 10):
            seen[c].add(
                sharding.shard_of((7, 0, start), label=c, split_rank=0, num_shards=7, sharding=sh)
            )
    assert set.union(*seen.values()) == set(range(7))
    assert not (seen["bird"] & seen["dog"]) and not (seen["dog"] & seen["rain"])
