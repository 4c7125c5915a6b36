"""Fixtures shared by the pipeline tests."""

from __future__ import annotations

import pytest

from tests.support.s3_server import running_s3_server


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on 127.0.0.1 (`tests.support.s3_server`), one per test module."""
    with running_s3_server() as server:
        yield server


# The hand-made datasets of the replay tests (test_replay*.py), one per test module. Imported
# on first use: collecting the other pipeline tests imports no TensorFlow.


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One split ("all"), shards of 5, 0 and 3 records: an empty shard is legal."""
    from tests.support.replay_fixtures import write_dataset

    path = str(tmp_path_factory.mktemp("single"))
    return path, write_dataset(path, num_examples_per_shard=(5, 0, 3))


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    """Splits train (4 shards) and eval (2 shards)."""
    from tests.support.replay_fixtures import write_dataset

    path = str(tmp_path_factory.mktemp("splits"))
    counts = {"train": (5, 7, 3, 6), "eval": (2, 4)}
    return path, write_dataset(path, num_examples_per_shard=counts, split_names=["train", "eval"])


@pytest.fixture(scope="session")
def recorded(tmp_path_factory) -> dict:
    """4 tiny WAV files recorded by the record job (DirectRunner, in process) once per
    ``--feature_dtype`` (float32, float16, bfloat16), once per session (test_reader_recorded.py,
    test_source.py): ``{"samples": {path: int16 samples}, "runs": {feature_dtype: dataset
    directory}}``."""
    from tests.support import replay_recorded

    return replay_recorded.record_runs(tmp_path_factory.mktemp("recorded"))
