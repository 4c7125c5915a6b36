"""replay: read audiorecords datasets (sharded TFRecords + manifest.json) back with tf.data.

Public API::

    from replay import ReadConfig, load_info, replay_dataset

    info = load_info("out/")                      # manifest: counts, classes, shapes, ...
    info = load_info("out/", version=1)           # an earlier dataset version (appends)
    records = open_records("out/", split="train[:10%]")  # any record by number: records[i]
    source = open_source("out/", split="train[:10%]")  # element i as numpy arrays: source[i]
    ds = replay_dataset("out/", split="train", shuffle_buffer=10_000, batch_size=64)
    ds = replay_dataset("out/", split="train", read_config=ReadConfig(seed=0, cycle_length=4))
    ds = replay_dataset("out/", split="train", order=GlobalOrder(seed=0, start=p), repeat=True)
    checkpoint = GlobalOrderCheckpoint("ckpt/", save_every_steps=100, global_batch_size=64)
    sampler = GlobalOrderSampler(records, order=GlobalOrder(seed=0, start=p))  # replay.samplers

``import replay`` is cheap: it loads neither TensorFlow (imported on first use of
`replay_dataset`, `default_reader_func`, `verify_dataset` or `GlobalOrderCheckpoint`, the Keras
callback that resumes a killed `fit` mid-epoch) nor Apache Beam nor tensorflow-transform
(`ReadConfig`, how `replay_dataset` reads, is plain Python; `open_records`, random access to the
serialized records, and `open_source`, the decoded elements as numpy arrays, need no TensorFlow
for a local dataset; `replay.samplers`, the global order for PyTorch's and Grain's loaders,
imports torch and grain only when used).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from replay.errors import (
    CorruptShardError,
    DatasetNotFoundError,
    IncompleteDatasetError,
    MalformedRecordError,
    ManifestError,
    MissingShardError,
    NoOffsetsError,
    NoRandomAccessError,
    ReplayError,
    ShardError,
    ShardSizeError,
    UnknownFeatureError,
    UnknownSplitError,
    VersionNotFoundError,
)
from replay.global_order import GlobalOrder
from replay.info import DatasetInfo, ShardInfo, load_info
from replay.read_config import ReadConfig
from replay.records import Records, open_records

if TYPE_CHECKING:
    from replay.default_reader import default_reader_func
    from replay.keras_resume import GlobalOrderCheckpoint
    from replay.reader import replay_dataset, verify_dataset
    from replay.source import Source, open_source
    from replay.transform import ServingTransform, load_transform

# Attributes loaded on first access (PEP 562): those whose module imports TensorFlow, and the
# source of numpy elements.
_LAZY = {
    "Source": "replay.source",
    "open_source": "replay.source",
    "GlobalOrderCheckpoint": "replay.keras_resume",
    "replay_dataset": "replay.reader",
    "default_reader_func": "replay.default_reader",
    "verify_dataset": "replay.reader",
    "load_transform": "replay.transform",
    "ServingTransform": "replay.transform",
}

__all__ = [
    "CorruptShardError",
    "DatasetInfo",
    "DatasetNotFoundError",
    "GlobalOrder",
    "GlobalOrderCheckpoint",
    "IncompleteDatasetError",
    "MalformedRecordError",
    "ManifestError",
    "MissingShardError",
    "NoOffsetsError",
    "NoRandomAccessError",
    "ReadConfig",
    "Records",
    "ReplayError",
    "ShardError",
    "ShardInfo",
    "ServingTransform",
    "ShardSizeError",
    "Source",
    "UnknownFeatureError",
    "UnknownSplitError",
    "VersionNotFoundError",
    "default_reader_func",
    "load_info",
    "load_transform",
    "open_records",
    "open_source",
    "replay_dataset",
    "verify_dataset",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'replay' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
