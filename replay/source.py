"""A framework-free source of decoded elements: element i of a split as a dict of numpy arrays.

``open_source(path, split=...)`` is `replay.records.open_records` (any record by its number,
checked as TensorFlow's TFRecord reader checks it) with each record decoded into the element
`replay_dataset` gives for it: the same keys, dtypes and shapes, ``signal`` and every stored key
bit for bit, each ``<feature>_norm`` (``z_score``) computed from its stored feature with the
manifest's statistics by the float32 operations of `replay.parsing.z_score`, in its order.

The contract of Grain's ``RandomAccessDataSource`` and of a map-style PyTorch ``Dataset``:
``len(source)``, ``source[i]`` and the batched ``source.__getitems__(indices)`` (a list of
elements, its records read grouped by shard); picklable, so worker processes open their own
shards. No TensorFlow for a local dataset: neither this module nor the layer below it imports
it. A dataset under a URL does: `replay.storage` reads its manifest, offsets files and sizes
through ``tf.io.gfile`` (a ``gs://`` shard's records then come through google-cloud-storage).

Decoding: `replay.example_decoder` (the element specs -> numpy arrays, over
`replay.example_wire`'s parser of the wire format) decodes each record.

A record that passes its checksums but is not such an Example (malformed protobuf, a key
missing, of another kind or of another length) raises `MalformedRecordError` naming the shard,
the record in it, its byte offset and the key; never a wrong array.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import SupportsIndex

import numpy as np

from replay import format as fmt
from replay.errors import MalformedRecordError
from replay.example_decoder import Decoder, Element, decode_example, z_score
from replay.example_wire import ExampleError
from replay.info import DatasetInfo, load_info
from replay.records import Records
from replay.slicing import read_spans, span_shards


def open_source(
    path: str | os.PathLike,
    *,
    split: str | Sequence[str] | None = None,
    features: str | Sequence[str] | None = None,
    version: int | None = None,
) -> Source:
    """The decoded elements of `split` of the dataset at `path`, by number (module docstring).

    Args:
      path: the dataset directory: a local path or a URL (``gs://bucket/out``).
      split: a split name, a slice of one (``"train[:10%]"``, `replay.slicing`) or a list of
        them; None: every split, in manifest order (as `replay_dataset`).
      features: the keys of each element (a name or a list); None: all, in manifest order.
      version: the dataset version (`load_info`); None: the latest.

    Returns:
      A `Source`: element ``i`` is element ``i`` of ``replay_dataset(path, split=split,
      features=features, version=version)`` read in order, unbatched.

    Raises:
      UnknownFeatureError: a key of `features` is not in the manifest.
      Any error of `replay.open_records`.
    """
    info = load_info(path, version=version)
    specs = info.select_features(features)
    spans = read_spans(info, split)
    records = Records(info, spans)
    info.check_shard_files(span_shards(spans))
    records.load_offsets()
    return Source(records, Decoder(specs, info.elements), split=split)


class Source:
    """Elements ``0 .. len - 1`` of a `Records`, decoded (`open_source`).

    Thread-safe as `Records` is. Pickles without open files (its `Records` reopens them).
    """

    def __init__(
        self, records: Records, decoder: Decoder, *, split: str | Sequence[str] | None = None
    ):
        self.records = records
        self.decoder = decoder
        self.split = split

    @property
    def info(self) -> DatasetInfo:
        """The dataset version read (`load_info`'s)."""
        return self.records.info

    @property
    def keys(self) -> list[str]:
        """The keys of every element, in order."""
        return list(self.decoder.specs)

    @property
    def element_specs(self) -> dict[str, fmt.ElementSpec]:
        """The `ElementSpec` of each key of an element."""
        return dict(self.decoder.specs)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: SupportsIndex) -> Element:
        try:
            index = operator.index(index)
        except TypeError:
            raise TypeError(f"Source indices are integers, not {type(index).__name__}") from None
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Element]:
        """The elements at `indices`, in that order (repeats allowed).

        Raises:
          IndexError: an index outside ``[-len, len)``.
          CorruptShardError: a record fails its frame checks (`Records.__getitems__`).
          MalformedRecordError: a record is not the Example the manifest describes.
        """
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        out = []
        decoder = self.decoder
        for k, data in enumerate(self.records.__getitems__(indices)):
            try:
                out.append(decode_example(data, decoder))
            except ExampleError as e:
                raise self._malformed(int(indices[k]), e) from e
        return out

    def _malformed(self, index: int, error: ExampleError) -> MalformedRecordError:
        where = self.records.locate(index)
        shard = where.shard
        e = MalformedRecordError(
            f"{shard.path}: record {where.record} at byte offset {where.start} (element "
            f"{index % len(self)}) is no Example of the manifest's elements: {error}"
        )
        e.shard_path, e.record, e.key = shard.path, where.record, error.key
        return e

    def close(self) -> None:
        """Closes the open shards (`Records.close`); a later read opens them again."""
        self.records.close()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        info = self.info
        return (
            f"Source(path={info.path!r}, split={self.split!r}, version={info.version}, "
            f"len={len(self)}, keys={self.keys!r})"
        )


__all__ = [
    "Decoder",
    "Element",
    "ExampleError",
    "Source",
    "decode_example",
    "open_source",
    "z_score",
]
