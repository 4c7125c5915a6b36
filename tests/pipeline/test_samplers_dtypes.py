"""`replay.samplers` through a real torch ``DataLoader`` (default collate, in process) and a
real ``grain.DataLoader`` (no worker processes) over `open_source`, for every dtype mix the
record job writes: signal int16, int32 or float32, each with features stored as float32,
float16 or bfloat16. Element for element, the loaders' elements in the order of
`GlobalOrderSampler` / `GlobalOrderIndexSampler` (W = 1) are
``replay_dataset(order=GlobalOrder(...))``'s: the same numeric keys (torch's default collate
stacks no strings), dtypes, shapes and bits.
"""

from __future__ import annotations

import itertools

import grain
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from replay import load_info, open_source, replay_dataset
from replay.global_order import GlobalOrder
from replay.samplers import GlobalOrderIndexSampler, GlobalOrderSampler
from tests.support.replay_fixtures import write_dataset

COUNTS = {"train": (5, 0, 7, 4), "test": (3,)}  # 16 train records, 4 global batches of 4
SPLIT = "train"
G = 4
ORDER = {"seed": 2, "global_batch_size": G, "block_length": 2, "window_blocks": 3}
SIGNALS = ("int16", "int32", "float32")
STORAGES = ("float32", "float16", "bfloat16")


@pytest.mark.parametrize(
    ("signal_dtype", "feature_dtype"), list(itertools.product(SIGNALS, STORAGES))
)
def test_torch_and_grain_give_replay_dataset_s_elements_for_every_dtype_mix(
    tmp_path, signal_dtype, feature_dtype
):
    write_dataset(
        tmp_path,
        num_examples_per_shard=COUNTS,
        split_names=list(COUNTS),
        compression="NONE",
        signal_dtype=signal_dtype,
        feature_dtype=feature_dtype,
        seed=len(signal_dtype) + len(feature_dtype),
    )
    specs = load_info(tmp_path).elements
    keys = [k for k, spec in specs.items() if spec.dtype != "string"]
    assert {"signal", "log_mel", "log_mel_norm", "index"} <= set(keys)
    assert specs["signal"].dtype == signal_dtype
    assert specs["log_mel"].stored_dtype == (None if feature_dtype == "float32" else feature_dtype)

    source = open_source(tmp_path, split=SPLIT, features=keys)
    sampler = GlobalOrderSampler(source, order=GlobalOrder(**ORDER), num_replicas=1, rank=0)
    got = []
    for batch in DataLoader(source, batch_size=G, sampler=sampler):
        assert list(batch) == keys and all(isinstance(v, torch.Tensor) for v in batch.values())
        got.extend({k: batch[k][i].numpy() for k in keys} for i in range(G))
    want = list(
        replay_dataset(str(tmp_path), split=SPLIT, order=GlobalOrder(**ORDER), features=keys)
        .take(len(source))
        .as_numpy_iterator()
    )
    grain_loader = grain.DataLoader(
        data_source=source,
        sampler=GlobalOrderIndexSampler(source, order=GlobalOrder(**ORDER), num_epochs=1),
        shard_options=grain.sharding.ShardOptions(shard_index=0, shard_count=1),
        worker_count=0,
    )
    from_grain = list(grain_loader)
    assert [int(e["index"]) for e in from_grain] == [int(e["index"]) for e in want]
    _assert_same(from_grain, want, specs, keys)
    assert len(got) == len(want) == len(source) == 16
    recorded = [int(e["index"]) for e in source.__getitems__(range(len(source)))]
    assert sorted(int(e["index"]) for e in got) == sorted(recorded)
    assert [int(e["index"]) for e in got] != recorded  # the global order, not the records'
    _assert_same(got, want, specs, keys)


def _assert_same(got: list[dict], want: list[dict], specs, keys: list[str]) -> None:
    assert len(got) == len(want)
    for ours, theirs in zip(got, want, strict=True):
        for key in keys:
            a, b = np.asarray(ours[key]), np.asarray(theirs[key])
            assert a.dtype == b.dtype == np.dtype(specs[key].dtype), key
            assert a.shape == b.shape == tuple(specs[key].shape), key
            assert a.tobytes() == b.tobytes(), key  # bit for bit
