"""`ReadConfig` (`replay.read_config`): the read options as one value, read as the same options
given as `replay_dataset` keywords, on the hand-made datasets `single` and `splits`
(tests/pipeline/conftest.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import tensorflow as tf

import replay
from replay import format as fmt
from replay import replay_dataset
from tests.support.replay_elements import collect

# --- ReadConfig ------------------------------------------------------------------------------


def _shard_after_shard(datasets):  # a reader_func
    return datasets.flat_map(lambda shard: shard)


READ_OPTIONS = {
    "seed_blocks": {"seed": 3, "cycle_length": 2, "block_length": 2},
    "no_reshuffle": {"seed": 7, "reshuffle_each_iteration": False, "num_parallel_reads": 2},
    "reader_func": {"reader_func": _shard_after_shard, "seed": 1, "prefetch": None},
    "input_context": {
        "input_context": tf.distribute.InputContext(num_input_pipelines=7, input_pipeline_id=2),
        "seed": 0,
        "deterministic": True,
    },
}


@pytest.mark.parametrize("options", list(READ_OPTIONS.values()), ids=list(READ_OPTIONS))
def test_read_config_reads_as_its_fields_given_as_keywords(splits, options):
    """``read_config=ReadConfig(**options)`` is ``**options``: the same elements in the same
    order, epoch after epoch, and the same cardinality and options."""
    path, _ = splits
    rest = {"shuffle_shards": True, "shuffle_buffer": 8, "batch_size": 3}
    by_keywords = replay_dataset(path, **rest, **options)
    by_config = replay_dataset(path, read_config=replay.ReadConfig(**options), **rest)
    for _ in range(2):
        want = [b[fmt.INDEX_KEY].tolist() for b in collect(by_keywords)]
        assert [b[fmt.INDEX_KEY].tolist() for b in collect(by_config)] == want and want
    assert int(by_config.cardinality()) == int(by_keywords.cardinality())
    assert by_config.options() == by_keywords.options()


def test_balanced_read_config_reads_as_its_fields_given_as_keywords(splits):
    path, _ = splits
    config = replay.ReadConfig(seed=4, deterministic=True)
    by_keywords = replay_dataset(path, balance="class", seed=4, deterministic=True, batch_size=4)
    by_config = replay_dataset(path, balance="class", read_config=config, batch_size=4)
    want = [b[fmt.INDEX_KEY].tolist() for b in collect(by_keywords.take(5))]
    assert [b[fmt.INDEX_KEY].tolist() for b in collect(by_config.take(5))] == want


def test_read_config_and_read_keywords_are_not_given_together(single):
    """A read option in two places is refused, naming the keywords; the keywords on what the
    dataset holds (split, batch_size, ...) go with a `read_config`."""
    path, _ = single
    config = replay.ReadConfig(seed=1)
    with pytest.raises(ValueError, match=r"read_config and the read keyword\(s\) seed, job_name"):
        replay_dataset(path, read_config=config, seed=1, job_name="x")
    with pytest.raises(TypeError, match="read_config must be a ReadConfig, not dict"):
        replay_dataset(path, read_config={"seed": 1})
    assert int(replay_dataset(path, read_config=config, batch_size=3).cardinality()) == 3
    defaults = replay_dataset(path, read_config=config, seed=None, prefetch=tf.data.AUTOTUNE)
    assert defaults.options().deterministic is True  # keywords at their defaults: the config's


def test_read_config_is_a_frozen_keyword_only_value():
    config = replay.ReadConfig(seed=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 2
    with pytest.raises(TypeError):
        replay.ReadConfig(None)  # keyword-only, as replay_dataset's keywords
    assert dataclasses.replace(config, cycle_length=4) == replay.ReadConfig(seed=1, cycle_length=4)
    default = replay.ReadConfig()
    assert default.num_parallel_reads == default.prefetch == tf.data.AUTOTUNE
