"""The shard of a window (`shard_of`): disjoint shard ranges per class, whole files per shard under
``--shard_by file``."""

from transforms.spec.sharding import shard_of
from transforms.spec.types import Sharding


def test_class_shards_are_disjoint_ranges():
    sh = Sharding(shard_by="class", classes=("bird", "dog", "rain"))
    seen = {c: set() for c in sh.classes}
    for c in sh.classes:
        for start in range(0, 4000, 10):
            seen[c].add(shard_of((7, 0, start), label=c, split_rank=0, num_shards=7, sharding=sh))
    assert set.union(*seen.values()) == set(range(7))
    assert not (seen["bird"] & seen["dog"]) and not (seen["dog"] & seen["rain"])


# --- shard_by file ---------------------------------------------------------------------------


def test_shard_by_file_keeps_each_file_in_one_shard_and_spreads_files():
    """Pins ``--shard_by file`` with several shards per split: every window and channel of a
    file goes to one shard, and 24 files use all 4 shards (``hash`` would cut files up)."""
    sh = Sharding(shard_by="file")
    num_shards = 4
    file_shards = {}
    for index in range(24):
        shards = {
            shard_of(
                (index, channel, start),
                label="dog",
                split_rank=rank,
                num_shards=num_shards,
                sharding=sh,
            )
            for rank, (channel, start) in enumerate(
                (c, s) for s in range(0, 40_000, 1000) for c in (0, 1)
            )
        }
        assert len(shards) == 1, (index, shards)
        file_shards[index] = shards.pop()
    assert set(file_shards.values()) == set(range(num_shards))
    hashed = Sharding(shard_by="hash")
    spread = {
        shard_of((0, 0, s), label="dog", split_rank=0, num_shards=4, sharding=hashed)
        for s in range(0, 40_000, 1000)
    }
    assert len(spread) > 1  # the contrast: by hash one file's windows are spread
