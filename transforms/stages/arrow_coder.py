"""A Beam coder for the Arrow RecordBatches the read stage hands to TFT's analysis.

Why a coder of our own: Beam estimates the size of a sample of every stage output's elements
(`apache_beam.runners.worker.opcounters`: each of the first 10 elements, then about 10/N) by
encoding them. ``pa.RecordBatch`` has no registered coder, so each sampled batch was pickled whole,
once per step it passes through, only to be measured: about half a run's output size pickled for
nothing (docs/performance.md). `Coder.estimate_size` is Beam's documented hook for a fast estimate;
``RecordBatch.nbytes`` is one (the buffers' size, what the pickle holds).

Encoding stays pickle (Arrow's own ``__reduce__``: the buffers, no per-row work), as Beam's
fallback did, so a batch that does cross a stage or process boundary travels as before.
`transforms.stages.composites` registers it for ``pa.RecordBatch``.
"""

from __future__ import annotations

import pickle

import apache_beam as beam
import pyarrow as pa


class RecordBatchCoder(beam.coders.Coder):
    """``pa.RecordBatch`` <-> pickle bytes; the size estimate is ``RecordBatch.nbytes``."""

    def encode(self, value: pa.RecordBatch) -> bytes:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> pa.RecordBatch:
        return pickle.loads(encoded)

    def estimate_size(self, value: pa.RecordBatch) -> int:
        return value.nbytes

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self) -> type:
        return pa.RecordBatch
