"""Shard counts: how many shards each split gets, fixed at planning.

About one shard per 128 MiB of estimated output (`plan_num_shards`; the estimate is the rows
kept per split, `split_rows`, times the stored bytes of a row, `pipelines.plan.sizing`), or
``--num_shards`` as given; under ``--elements_per_shard N`` exactly enough shards of N elements
for the split's rows; under ``--shard_by class`` at least one shard per class
(`split_shard_counts`). Which shard each window goes to is the workers' rule:
`transforms.spec.sharding.shard_of`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from transforms.spec.types import InputFile, Sharding

TARGET_SHARD_BYTES = 128 << 20  # 128 MiB per shard when --num_shards is not given
MAX_AUTO_SHARDS = 4096


def split_rows(
    segments: Iterable[tuple[InputFile, int, int]], sharding: Sharding
) -> dict[str, int]:
    """Rows kept per split (every split) of `plan_segments`' result."""
    rows = dict.fromkeys(sharding.split_names, 0)
    for f, kept, _ in segments:
        rows[f.split] += kept
    return rows


def split_shard_counts(
    rows: Mapping[str, int], sharding: Sharding, estimated: Mapping[str, int]
) -> dict[str, int]:
    """Shard count per split: exact under ``--elements_per_shard`` (from the rows kept per
    split, `split_rows`), else `estimated`."""
    if sharding.elements_per_shard is None:
        counts = dict(estimated)
    else:
        counts = {
            s: max(1, math.ceil(rows.get(s, 0) / sharding.elements_per_shard))
            for s in sharding.split_names
        }
    if sharding.shard_by == "class":
        counts = {s: max(n, len(sharding.classes)) for s, n in counts.items()}
    return counts


def plan_num_shards(estimated_bytes: int, *, num_shards: int | None = None) -> int:
    """Shard count: `num_shards` if given, else one per 128 MiB of estimated output (>= 1)."""
    if num_shards is not None:
        if num_shards <= 0:
            raise ValueError(f"--num_shards must be > 0, got {num_shards}")
        return num_shards
    return int(min(MAX_AUTO_SHARDS, max(1, math.ceil(estimated_bytes / TARGET_SHARD_BYTES))))
