"""The on-disk layout of an audiorecords dataset: the one contract between record and replay.

Both sides import this module: `pipelines.record` writes what it describes, `replay` reads it. It
depends on the standard library only, so the reader stays free of Beam and tensorflow-transform.

Layout of an output directory (also documented in README "Output layout")::

    out/
      manifest.json                          written last: no manifest, no dataset
      schema.pbtxt                           tensorflow_metadata Schema of the stored records
      <name>.tfrecord-00000-of-00004.gz      shards (no --splits)
      <name>-train.tfrecord-00000-of-00003   shards of split "train" (with --splits)
      transform_fn/                          TFT SavedModel: vocabulary + normalisation
      transformed_metadata/                  TFT schema of the transformed records
      metadata/schema.pbtxt                  schema of the raw keys (TFT's raw metadata)
      feature_fn/                            SavedModel: raw waveform -> raw features

Each record is a serialized `tf.train.Example`. Keys, dtypes and shapes of the decoded element
are in `manifest["elements"]` (an `ElementSpec` per key). Stored encodings:

- ``encoding == "raw"``: one bytes value holding the little-endian tensor bytes (the ``signal``
  key: int16 / int32 / float32 / float64 samples, bit-exact, 2-8 bytes a sample).
- ``encoding == "float_list"`` / ``"int64_list"``: the flattened tensor, row-major.
- ``encoding == "bytes_list"``: one bytes value (strings, e.g. ``class``, ``filepath``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

FORMAT_NAME = "audiorecords"
FORMAT_VERSION = 1  # bump on any change a version-1 reader cannot read

MANIFEST_FILENAME = "manifest.json"
SCHEMA_FILENAME = "schema.pbtxt"
TRANSFORM_FN_DIR = "transform_fn"  # tft.TFTransformOutput.TRANSFORM_FN_DIR
TRANSFORMED_METADATA_DIR = "transformed_metadata"
RAW_METADATA_DIR = "metadata"  # tft.TFTransformOutput.RAW_METADATA_DIR: raw-key schema.pbtxt
FEATURE_FN_DIR = "feature_fn"

DEFAULT_NAME = "audiorecords"
ALL_SPLIT = "all"  # the single split's name when the pipeline ran without --splits

# Element keys (the seed format), in one place.
CLASS_KEY = "class"
TARGET_KEY = "target"
NUM_CLASSES_KEY = "num_classes"
FILEPATH_KEY = "filepath"
INDEX_KEY = "index"
WIN_START_KEY = "win_start_idx"
SIGNAL_KEY = "signal"
SAMPLE_RATE_KEY = "sample_rate"
CHANNEL_KEY = "channel"
NORMALIZED_SUFFIX = "_norm"  # "<feature>_norm": tft.scale_to_z_score of "<feature>"

# Compression names as tf.data's TFRecordDataset spells them, and the shard suffix of each.
COMPRESSION_SUFFIXES = {"NONE": "", "GZIP": ".gz", "ZLIB": ".zlib"}

ENCODING_RAW = "raw"
ENCODING_FLOAT_LIST = "float_list"
ENCODING_INT64_LIST = "int64_list"
ENCODING_BYTES_LIST = "bytes_list"
ENCODINGS = (ENCODING_RAW, ENCODING_FLOAT_LIST, ENCODING_INT64_LIST, ENCODING_BYTES_LIST)
DTYPES = ("int16", "int32", "int64", "float32", "float64", "string")  # float64: signal only
_ENCODINGS, _DTYPES = ENCODINGS, DTYPES
GLOB_CHARACTERS = "*?[]{}"  # never in a dataset or shard name (tf.io.gfile.glob, gsutil, shells)
MAX_NAME_BYTES = 200  # a shard name adds ~35 bytes; file systems allow 255

_SHARD_RE = re.compile(
    r"^(?P<name>[^/]+?)(?:-(?P<split>[A-Za-z0-9_]+))?\.tfrecord-(?P<index>\d{5})-of-(?P<count>\d{5})"
    r"(?P<suffix>\.gz|\.zlib)?$"
)


@dataclasses.dataclass(frozen=True)
class ElementSpec:
    """How one key of an element is stored and what it decodes to.

    Attributes:
      dtype: decoded dtype name: int16, int32, int64, float32, float64 or string.
      shape: decoded shape ([] for scalars).
      encoding: one of raw, float_list, int64_list, bytes_list (see module docstring).
    """

    dtype: str
    shape: tuple[int, ...]
    encoding: str

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {_DTYPES}")
        if self.encoding not in _ENCODINGS:
            raise ValueError(f"unknown encoding {self.encoding!r}; expected one of {_ENCODINGS}")

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape), "encoding": self.encoding}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ElementSpec:
        return cls(dtype=obj["dtype"], shape=tuple(obj["shape"]), encoding=obj["encoding"])


def shard_filename(
    *, name: str, split: str | None, index: int, num_shards: int, compression: str
) -> str:
    """Deterministic shard file name, e.g. ``audiorecords-train.tfrecord-00003-of-00016.gz``.

    Args:
      name: dataset name (``--dataset_name``).
      split: split name, or None / ALL_SPLIT for a run without splits (no split in the name).
      index: 0-based shard index.
      num_shards: shard count of that split.
      compression: NONE, GZIP or ZLIB.
    """
    if not 0 <= index < num_shards:
        raise ValueError(f"shard index {index} outside [0, {num_shards})")
    if compression not in COMPRESSION_SUFFIXES:
        raise ValueError(f"unknown compression {compression!r}")
    split_part = "" if split in (None, ALL_SPLIT) else f"-{split}"
    return (
        f"{name}{split_part}.tfrecord-{index:05d}-of-{num_shards:05d}"
        f"{COMPRESSION_SUFFIXES[compression]}"
    )


def plain_name_problem(name: str) -> str | None:
    """Why `name` is not a plain file name (dataset name, shard name), or None when it is.

    Plain: not empty, no path separator, no leading ``.`` (so neither ``.``, ``..`` nor hidden),
    no control, unprintable or glob characters, at most `MAX_NAME_BYTES` in UTF-8. Joined to a
    directory, a plain name stays inside it. The record job (``--dataset_name``) and every
    reader (shard names in a manifest) apply this one rule.
    """
    if not name:
        return "is empty"
    if "/" in name or "\\" in name:
        return "holds a path separator"
    if name.startswith("."):
        return "starts with '.' (a parent, current or hidden entry)"
    if not name.isprintable():
        return "holds control or unprintable characters"
    if set(name) & set(GLOB_CHARACTERS):
        return f"holds glob characters ({GLOB_CHARACTERS})"
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    return None


def parse_shard_filename(filename: str) -> dict[str, Any] | None:
    """Inverse of `shard_filename` (None when the name is not a shard name)."""
    m = _SHARD_RE.match(filename)
    if not m:
        return None
    return {
        "name": m["name"],
        "split": m["split"] or ALL_SPLIT,
        "index": int(m["index"]),
        "num_shards": int(m["count"]),
    }


def split_names(manifest: Mapping[str, Any]) -> Sequence[str]:
    """The split names of a manifest, in the order the pipeline wrote them."""
    return list(manifest["splits"])


# --- manifest ----------------------------------------------------------------------------------
#
# manifest.json (JSON object; keys in this order, sorted where they are maps):
#   format            "audiorecords"
#   format_version    1
#   complete          true (a manifest is only ever written complete, atomically, last)
#   name              dataset name used in shard file names
#   created_utc       ISO-8601 time; the only field that differs between identical runs
#   compression       NONE | GZIP | ZLIB   (what the shards use; tf.data's spelling)
#   elements          {key: ElementSpec.to_json()}  every key of a decoded element
#   num_examples      total windows in all splits
#   classes           the class vocabulary, in `target` order (class i has target i): sorted
#                      label names, or --classes; fixed at planning (a label outside: -1)
#   num_classes       len(classes)
#   splits            {split: {"num_examples": n, "shards": [{"filename", "num_examples",
#                      "num_bytes"}]}} ; split "all" when the run had no --splits
#   analyzed_splits   [split]  the splits TFT's statistics (<feature>_norm) were computed on
#                      (added in 2026-11 without a version bump; older manifests lack it)
#   files             [{"path", "index", "label", "split", "num_windows", "sample_rate",
#                       "num_frames", "num_channels", "subtype", "full_scale"}]  every decoded
#                      input file; features see signal / full_scale (2**(bits-1), 1.0 for float);
#                      a lossy one (Ogg Vorbis) also has "lossy": true and "lossy_reason";
#                      with --annotations each has "annotation" (per-class events, event
#                      seconds, windows: transforms.audio.annotation_stats) and "label" is ""
#   errors            [{"path", "reason"}]  every input file that failed, with its reason;
#                      with --annotations also every bad table row, "path" "<table>:<line>"
#                      (annotated runs add the element keys labels, events, num_events and
#                      the annotation params; all optional, without a version bump)
#   params            the run's options (win_len, hop_len, features, ...) as JSON
#   versions          {"audiorecords", "apache_beam", "tensorflow", "tensorflow_transform",
#                      "python"}


class FormatError(ValueError):
    """The directory is not a readable audiorecords dataset (names the path and the reason)."""


# --- helpers shared by readers (added for `replay`) --------------------------------------------


def element_specs(manifest: Mapping[str, Any]) -> dict[str, ElementSpec]:
    """The `ElementSpec` of every key of a decoded element, in manifest order."""
    return {key: ElementSpec.from_json(obj) for key, obj in manifest["elements"].items()}


def tf_compression_type(compression: str) -> str:
    """`compression` (NONE / GZIP / ZLIB) as tf.data's ``compression_type`` ("" for NONE)."""
    if compression not in COMPRESSION_SUFFIXES:
        raise ValueError(f"unknown compression {compression!r}")
    return "" if compression == "NONE" else compression
