"""The shard a window goes to within its split (`shard_of`), as the read stage routes it.

``--shard_by`` (`SHARD_BY`): ``hash`` spreads windows by a hash of (index, channel,
win_start_idx); ``file`` keeps all windows of a file in one shard; ``class`` gives each class its
own disjoint set of shards; a Python ``shard_func(element) -> int`` (the snapshot contract)
chooses freely and is applied by the caller. Under ``--elements_per_shard N`` a shard holds
exactly N consecutive elements of its split by rank (the rank is planned:
`pipelines.plan.tasks`). The shard counts are planned too (`pipelines.plan.shard_counts`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from transforms.spec.types import Sharding

SHARD_BY = ("hash", "file", "class")


def _hash_int(*parts: Any) -> int:
    key = ":".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


def shard_of(
    element_key: tuple[int, int, int],
    *,
    label: str,
    split_rank: int,
    num_shards: int,
    sharding: Sharding,
) -> int:
    """Shard of one window within its split (`shard_func` is applied by the caller)."""
    index, channel, win_start = element_key
    if sharding.elements_per_shard is not None:
        return split_rank // sharding.elements_per_shard
    if sharding.shard_by == "file":
        return _hash_int(index) % num_shards
    if sharding.shard_by == "class":
        k = len(sharding.classes)
        i = sharding.classes.index(label)
        lo, hi = i * num_shards // k, (i + 1) * num_shards // k
        return lo + _hash_int(index, channel, win_start) % (hi - lo)
    return _hash_int(index, channel, win_start) % num_shards
