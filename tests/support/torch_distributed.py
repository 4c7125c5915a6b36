"""The rank function of the 2-process ``torch.distributed`` test (tests/pipeline/test_samplers.py),
importable by spawned processes without TensorFlow: gloo on 127.0.0.1, each rank reading its
part of every global batch with a `GlobalOrderSampler` whose rank and world size come from the
process group."""

from __future__ import annotations

import hashlib
import json
import os

import torch.distributed as dist
from torch.utils.data import DataLoader

from replay import open_records
from replay.global_order import GlobalOrder
from replay.samplers import GlobalOrderSampler


def _digests(batch: list[bytes]) -> list[str]:
    return [hashlib.sha256(record).hexdigest() for record in batch]


def _epoch(records, order: GlobalOrder, epoch: int, stop: int | None = None) -> tuple[list, int]:
    """This rank's record digests of `epoch` (its first `stop` batches), and the position a run
    stopped there resumes at."""
    sampler = GlobalOrderSampler(records, order=order)  # rank, world size: the process group
    sampler.set_epoch(epoch)
    per = order.global_batch_size // sampler.num_replicas
    loader = DataLoader(records, batch_size=per, sampler=sampler, collate_fn=_digests)
    got = []
    for i, batch in enumerate(loader):
        if i == stop:
            break
        got.extend(batch)
    return got, sampler.position(len(got) // per)


def run_rank(rank: int, path: str, split: str, order: dict, port: int, out: str) -> None:
    """Two epochs of the run; then epoch 1 again, stopped after 3 global batches and resumed
    at the saved position. Rank 0 writes every rank's records to `out` (json)."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        records = open_records(path, split=split)
        first = GlobalOrder(**order)
        full = []
        for epoch in (0, 1):
            got, _ = _epoch(records, first, epoch)
            full.extend(got)
        head, position = _epoch(records, first, 1, stop=3)
        tail, _ = _epoch(records, GlobalOrder(**{**order, "start": position}), 1)
        result = {"full": full, "stopped": head, "resumed": tail, "position": position}
        gathered = [None, None]
        dist.all_gather_object(gathered, result)
        if rank == 0:
            with open(out + ".tmp", "w") as f:
                json.dump(gathered, f)
            os.replace(out + ".tmp", out)
    finally:
        dist.destroy_process_group()
