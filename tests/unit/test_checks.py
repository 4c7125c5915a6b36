"""The checks planning makes before any work: `check_output_dir` against each state of the output
directory (the signal dtype and ``--strict`` on real files: tests/unit/test_listing.py)."""

from __future__ import annotations

import pytest

from pipelines.config import RecordConfig, UsageError
from pipelines.plan import check_output_dir


@pytest.mark.parametrize(
    ("state", "overwrite", "message"),
    [
        ("missing", False, None),
        ("empty", False, None),
        ("ours", False, "exists; pass --overwrite to replace it"),
        ("ours", True, None),
        ("foreign", True, "not an audiorecords dataset; refusing to overwrite it"),
    ],
)
def test_check_output_dir(state, overwrite, message):
    config = RecordConfig(input_pattern="x", output_dir="o", overwrite=overwrite)
    if message is None:
        check_output_dir(config, "o", state)
    else:
        with pytest.raises(UsageError, match=message):
            check_output_dir(config, "o", state)
