"""Guarantee 5, reproducible: the same input and options give byte-identical shards, schema and
manifest (apart from ``created_utc``) on one worker (in_memory) and on two worker processes
(multi_processing). The other reliability tests re-run the reference command in_memory and
compare the same way (test_reliability_atomic, test_reliability_retries).
"""

from __future__ import annotations

import pytest

from pipelines import record
from tests.support.reliability import (
    assert_same_dataset,
    manifest_without_time,
    record_args,
)

pytestmark = pytest.mark.slow


def test_two_worker_processes_write_the_one_worker_bytes(tmp_path, reliability_reference):
    pattern, labels, reference = reliability_reference
    out = tmp_path / "two workers"
    multi = ("--direct_running_mode", "multi_processing", "--direct_num_workers", "2")
    record.run(record_args(pattern, labels, out, *multi))
    assert_same_dataset(out, reference)
    manifest = manifest_without_time(out)
    assert manifest["num_examples"] == 32 and manifest["num_files"] == 8
    assert manifest["params"]["num_shards"] == 3
