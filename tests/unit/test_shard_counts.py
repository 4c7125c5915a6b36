"""Shard counts per split (`pipelines.plan.shard_counts`): exact under ``--elements_per_shard``
(the estimate from the stored bytes: tests/unit/test_sizing.py)."""

import pytest

from pipelines.plan.shard_counts import split_rows, split_shard_counts
from pipelines.plan.tasks import plan_segments
from transforms.spec.types import Sharding


class _F:
    def __init__(self, index, split="all"):
        self.index, self.split, self.path = index, split, f"f{index}"


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
    segments = plan_segments([(_F(0), total)], sh)
    rows = split_rows(segments, sh)
    assert split_shard_counts(rows, sh, {"all": 99}) == {"all": want}
