"""The global read order for PyTorch and Grain: samplers of record indices (`replay.global_index`).

A run's positions P = 0, 1, ... (`replay.global_order`) are dealt to W pipelines as tf.data
deals them (`replay.global_order.Slots`): in each global batch of G positions, pipeline w takes
the G / W from ``w * G / W``. A sampler yields the record index of each of its pipeline's
positions at or after `start`, in order, so a loader batching them by G / W gives pipeline w's
part of every global batch, and the global batches, merged by position, are the same for every
W and the same as ``replay_dataset(order=GlobalOrder(...))``'s.

- `GlobalOrderSampler`: PyTorch's ``DistributedSampler`` contract (``num_replicas`` and
  ``rank`` from ``torch.distributed``, ``set_epoch``, ``__len__``, ``__iter__``): each epoch is
  the epoch's positions of this rank, from `start` on in the epoch that holds it; with
  ``DataLoader(source, batch_size=G // W, sampler=...)``.
- `GlobalOrderIndexSampler`: Grain's ``Sampler`` protocol for ``grain.DataLoader`` with
  ``ShardOptions(shard_index=w, shard_count=W)``: the loader reads sampler index
  ``k * W + w`` for shard w's k-th element, which is pipeline w's k-th position here.
- `global_order_dataset`: a ``grain.MapDataset`` of one pipeline's records in the order, over
  ``grain.MapDataset.source(source)``.

Nothing here imports torch or grain at import time; none of it needs TensorFlow.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from replay.global_index import GlobalIndex
from replay.global_order import GlobalOrder, Slots

_CHUNK = 4096  # positions turned into record indices at a time


@dataclasses.dataclass(frozen=True)
class PipelinePositions:
    """One pipeline's positions of a run: its j-th position at or after `start` (j = 0, 1, ...)
    and how many lie before a position."""

    order: GlobalOrder
    slots: Slots

    @classmethod
    def of(cls, order: GlobalOrder, *, num_pipelines: int, pipeline: int) -> PipelinePositions:
        """Pipeline `pipeline` of `num_pipelines` (global batches of
        ``order.global_batch_size``, or one position a pipeline, round robin)."""
        if not 0 <= pipeline < num_pipelines:
            raise ValueError(f"pipeline {pipeline} is not in [0, {num_pipelines})")
        g = order.global_batch_size or num_pipelines
        return cls(order, Slots(g, num_pipelines, pipeline))

    def positions(self, j: np.ndarray) -> np.ndarray:
        """The run positions of this pipeline's positions `j` (counted from `start`)."""
        s = self.slots
        k = np.asarray(j, np.int64) + s.below(self.order.start)
        return (
            k // s.per_pipeline * s.global_batch_size
            + s.pipeline * s.per_pipeline
            + k % s.per_pipeline
        )

    def count(self, begin: int, end: int) -> int:
        """This pipeline's positions in ``[max(begin, start), end)``."""
        begin = max(begin, self.order.start)
        return max(self.slots.below(end) - self.slots.below(begin), 0) if end > begin else 0


def _distributed_defaults(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """`num_replicas` and `rank`, each from ``torch.distributed`` when None (1 and 0 when no
    process group is initialized)."""
    if num_replicas is None or rank is None:
        import torch.distributed as dist

        ready = dist.is_available() and dist.is_initialized()
        if num_replicas is None:
            num_replicas = dist.get_world_size() if ready else 1
        if rank is None:
            rank = dist.get_rank() if ready else 0
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise ValueError(f"rank {rank} is not in [0, num_replicas={num_replicas})")
    return num_replicas, rank


class GlobalOrderSampler:
    """PyTorch sampler of record indices in the global order (module docstring).

    Epoch e yields this rank's positions in ``[e * N, (e + 1) * N)`` (N: the source's
    records) from `order.start` on, as record indices of `source`; the first epoch is the one
    holding `order.start` (`set_epoch` chooses another). With ``DataLoader(source,
    batch_size=order.global_batch_size // num_replicas, sampler=sampler)`` rank w's batches are
    its parts of the run's global batches; the global batches stay whole across epochs when
    ``global_batch_size`` divides N. A run killed after its k-th global batch of epoch e
    resumes with ``GlobalOrder(start=sampler.position(k))`` (saved before the kill).

    Args:
      source: the records (`replay.Records`, or a source over them: see
        `replay.global_index.span_counts`).
      order: the order, its seed, start and global batch.
      num_replicas: the pipelines W (None: ``torch.distributed``'s world size, or 1).
      rank: this pipeline (None: ``torch.distributed``'s rank, or 0).
    """

    def __init__(
        self,
        source: Any,
        *,
        order: GlobalOrder,
        num_replicas: int | None = None,
        rank: int | None = None,
    ):
        self.num_replicas, self.rank = _distributed_defaults(num_replicas, rank)
        self.order = order
        self.index = GlobalIndex.of(source, order)
        self.num_records = self.index.num_records
        if not self.num_records:
            raise ValueError(f"GlobalOrderSampler: {type(source).__name__} holds no records")
        self.pipeline = PipelinePositions.of(
            order, num_pipelines=self.num_replicas, pipeline=self.rank
        )
        self.epoch = order.start // self.num_records

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration yields."""
        if epoch < 0:
            raise ValueError(f"GlobalOrderSampler: epoch must be >= 0, not {epoch}")
        self.epoch = epoch

    def _bounds(self) -> tuple[int, int]:
        n = self.num_records
        return max(self.epoch * n, self.order.start), (self.epoch + 1) * n

    def __len__(self) -> int:
        return self.pipeline.count(*self._bounds())

    def position(self, batches: int) -> int:
        """The run position after the epoch's first `batches` global batches: where a run
        stopped there resumes (``GlobalOrder(start=...)``)."""
        begin, end = self._bounds()
        g = self.pipeline.slots.global_batch_size
        return min(begin + batches * g, end) if end > begin else begin

    def __iter__(self) -> Iterator[int]:
        begin, end = self._bounds()
        first = self.pipeline.count(0, begin)  # this pipeline's positions before the epoch's
        total = len(self)
        for at in range(0, total, _CHUNK):
            j = np.arange(first + at, first + min(at + _CHUNK, total), dtype=np.int64)
            yield from self.index.records(self.pipeline.positions(j)).tolist()


class GlobalOrderIndexSampler:
    """Grain ``Sampler`` of the global order for ``grain.DataLoader`` (module docstring).

    Sampler index ``k * W + w`` is shard w's k-th position from `order.start` (W:
    `shard_count`, the DataLoader's ``ShardOptions.shard_count``); its ``record_key`` the
    record index in `source`. The run ends after `num_epochs` epochs counted from the one
    holding `order.start` (None: never); a last global batch that the epochs' end cuts is left
    out (Grain's loader gives every shard the same number of elements). Grain's own iterator
    state (``get_state`` / ``set_state``) resumes the sequence.

    Args:
      source: the records (as `GlobalOrderSampler`'s).
      order: the order.
      shard_count: the pipelines W, ``ShardOptions.shard_count``.
      num_epochs: epochs of the run (None: it repeats for ever).
    """

    def __init__(
        self, source: Any, *, order: GlobalOrder, shard_count: int = 1, num_epochs: int | None = 1
    ):
        if shard_count < 1:
            raise ValueError(f"GlobalOrderIndexSampler: shard_count must be >= 1: {shard_count}")
        if num_epochs is not None and num_epochs < 1:
            raise ValueError(f"GlobalOrderIndexSampler: num_epochs must be >= 1: {num_epochs}")
        self.order = order
        self.shard_count = shard_count
        self.num_epochs = num_epochs
        self.index = GlobalIndex.of(source, order)
        n = self.index.num_records
        if not n:
            raise ValueError(f"GlobalOrderIndexSampler: {type(source).__name__} holds no records")
        self.pipelines = [
            PipelinePositions.of(order, num_pipelines=shard_count, pipeline=w)
            for w in range(shard_count)
        ]
        if num_epochs is None:
            self._per_shard = sys.maxsize // shard_count
        else:
            end = (order.start // n + num_epochs) * n
            self._per_shard = min(p.count(order.start, end) for p in self.pipelines)

    def __len__(self) -> int:
        return self._per_shard * self.shard_count

    def __repr__(self) -> str:  # what Grain's checkpoints compare (the same order, same data)
        return (
            f"GlobalOrderIndexSampler(order={self.order!r}, shard_count={self.shard_count}, "
            f"num_epochs={self.num_epochs}, span_counts={list(self.index.counts)})"
        )

    def __getitem__(self, index: int) -> Any:
        import grain

        if not 0 <= index < len(self):
            raise IndexError(f"GlobalOrderIndexSampler: index {index} not in [0, {len(self)})")
        k, w = divmod(index, self.shard_count)
        position = int(self.pipelines[w].positions(np.array([k]))[0])
        key = int(self.index.records([position])[0])
        return grain.RecordMetadata(index=index, record_key=key)


@dataclasses.dataclass(frozen=True)
class _Lookup:
    """Element k of a pipeline: its k-th record in the order (picklable, for Grain)."""

    parent: Any  # a grain.MapDataset over the source
    pipeline: PipelinePositions
    index: GlobalIndex

    def __call__(self, k: int) -> Any:
        position = self.pipeline.positions(np.array([k]))
        return self.parent[int(self.index.records(position)[0])]


def global_order_dataset(
    source: Any, *, order: GlobalOrder, shard_index: int = 0, shard_count: int = 1
) -> Any:
    """``grain.MapDataset`` of pipeline `shard_index` of `shard_count`: element k is the
    record of its k-th position from `order.start`, to the end of the epoch holding it, read
    from ``grain.MapDataset.source(source)``."""
    import grain

    index = GlobalIndex.of(source, order)
    pipeline = PipelinePositions.of(order, num_pipelines=shard_count, pipeline=shard_index)
    n = index.num_records
    count = pipeline.count(order.start, (order.start // n + 1) * n) if n else 0
    parent = grain.MapDataset.source(source)
    return grain.MapDataset.range(count).map(_Lookup(parent, pipeline, index))


__all__ = [
    "GlobalOrderIndexSampler",
    "GlobalOrderSampler",
    "PipelinePositions",
    "global_order_dataset",
]
