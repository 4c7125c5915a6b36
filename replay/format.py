"""The on-disk layout of an audiorecords dataset: the one contract between record and replay.

Both sides import this module: `pipelines.record` writes what it describes, `replay` reads it. It
depends on the standard library only, so the reader stays free of Beam and tensorflow-transform.
Here: the layout, the file and shard names, the record offsets and source table files, the
manifest's fields; the element specs are in `replay.format_elements`, versions and commits in
`replay.format_commits`, each of their names importable from here as well (``fmt.ElementSpec``).

Layout of an output directory (also documented in docs/output-layout.md)::

    out/
      manifest.json                          written last: no manifest, no dataset
      files.jsonl                            v3: every decoded input file, one JSON object a line
      errors.jsonl                           v3: every input that failed, one JSON object a line
      schema.pbtxt                           tensorflow_metadata Schema of the stored records
      <name>.tfrecord-00000-of-00004.gz      shards (no --splits)
      <name>-train.tfrecord-00000-of-00003   shards of split "train" (with --splits)
      offsets/<shard filename>.offsets       v4: where each record of that shard starts
      manifests/<v>.json                     v5: version v's manifest, immutable (appended only)
      appends/<token>/                       v5: one appended commit: its shards, offsets/,
                                             files.jsonl and errors.jsonl, as the root holds them
      transform_fn/                          TFT SavedModel: vocabulary + normalisation
      transformed_metadata/                  TFT schema of the transformed records
      metadata/schema.pbtxt                  schema of the raw keys (TFT's raw metadata)
      feature_fn/                            SavedModel: raw waveform -> raw features

Element specs and their encodings: `replay.format_elements` (``manifest["elements"]``).

Record offsets (format version 4). Beside each shard, ``offsets/<shard filename>.offsets`` holds
where each of its records starts: one little-endian uint64 a record, in record order, the byte
offset of the record's TFRecord frame in the shard's uncompressed stream (for GZIP / ZLIB shards,
after decompression). The manifest's shard entry gives the file's size and SHA-256 (``offsets``:
``{"num_bytes", "sha256"}``; the size is 8 bytes a record); the name is fixed here
(`offsets_filename`). The shards' bytes are what version 3 wrote: the offsets only let a reader
start at any record (`replay.global_order`).

Source tables (format version 3). Versions 1 and 2 list every input file (``files``) and every
failure (``errors``) inside manifest.json, a few hundred bytes a file, parsed by every
`load_info`. Version 3 moves both lists into files of their own, written before the
manifest (which is still written last, atomically), so a reader starts by parsing a manifest whose
size does not grow with the file count:

- ``files.jsonl`` (`FILES_TABLE`): the ``files`` entries, by ``index``;
- ``errors.jsonl`` (`ERRORS_TABLE`): the ``errors`` entries, by ``path``.

JSON Lines: one JSON object a line, each line ending in ``\\n`` (ASCII: non-ASCII characters are
``\\u`` escapes), no blank line, at most `MAX_TABLE_LINE_BYTES` a line; the entries are exactly
what version 2's lists held. The names are fixed here and never read from the manifest (a crafted
manifest cannot point a reader at another file). The manifest gives their entry counts
(``num_files``, ``num_errors``) and, under ``tables``, each file's byte size and SHA-256
(``{"files": {"num_bytes", "sha256"}, "errors": {...}}``); a reader refuses a table that
disagrees with them, and a missing one unless its count is 0. `replay.load_info` never opens
them: `DatasetInfo.files` / ``.errors`` read and check a table on first use.

Versions and commits (format version 5): `replay.format_commits`.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from replay.format_commits import (  # noqa: F401 - re-exported: fmt.<name> for every name
    APPEND_MODE,
    APPEND_TRANSFORMS,
    APPENDS_DIR,
    COMMIT_MODES,
    COMMIT_TOKEN_RE,
    FROZEN_TRANSFORM,
    MANIFESTS_DIR,
    RECORD_MODE,
    REFRESH_TRANSFORM,
    append_dir,
    commit_dir_problem,
    commit_file,
    commit_token_problem,
    split_shard_filename,
    version_manifest_filename,
)
from replay.format_elements import (  # noqa: F401 - re-exported: fmt.<name> for every name
    DTYPES,
    ENCODING_BYTES_LIST,
    ENCODING_FLOAT_LIST,
    ENCODING_INT64_LIST,
    ENCODING_RAW,
    ENCODING_Z_SCORE,
    ENCODINGS,
    FEATURE_DTYPES,
    STORED_DTYPES,
    ElementSpec,
    ZScore,
    element_specs,
    stored_encoding,
    stored_spec,
    stored_specs,
    z_score_spec,
)

FORMAT_NAME = "audiorecords"
FORMAT_VERSION = 5  # bump on any change an older reader cannot read
READABLE_VERSIONS = (1, 2, 3, 4, 5)  # format versions this reader reads
TABLES_VERSION = 3  # from this version on, files / errors are tables of their own
OFFSETS_VERSION = 4  # from this version on, every shard has a record offsets file
COMMITS_VERSION = 5  # from this version on, a manifest lists its commits (dataset versions)

MANIFEST_FILENAME = "manifest.json"
FILES_TABLE = "files.jsonl"  # v3: the "files" entries (never a name taken from the manifest)
ERRORS_TABLE = "errors.jsonl"  # v3: the "errors" entries
TABLE_FILENAMES = {"files": FILES_TABLE, "errors": ERRORS_TABLE}  # manifest "tables" key -> file
TABLE_COUNT_KEYS = {"files": "num_files", "errors": "num_errors"}  # -> the manifest's count
MAX_TABLE_LINE_BYTES = 1 << 20  # one entry; an annotated file's summary takes a few KB
OFFSETS_DIR = "offsets"  # v4: <shard filename>.offsets, one per shard (`offsets_filename`)
OFFSETS_SUFFIX = ".offsets"
OFFSET_BYTES = 8  # one little-endian uint64 a record
FRAME_BYTES = 16  # TFRecord's framing of a record: its length and that's CRC, then the data's CRC
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
# --annotations: multi-hot labels, the events overlapping each window, and their count
LABELS_KEY = "labels"
EVENTS_KEY = "events"
NUM_EVENTS_KEY = "num_events"
NORMALIZED_SUFFIX = "_norm"  # "<feature>_norm": tft.scale_to_z_score of "<feature>"

# Compression names as tf.data's TFRecordDataset spells them, and the shard suffix of each.
COMPRESSION_SUFFIXES = {"NONE": "", "GZIP": ".gz", "ZLIB": ".zlib"}

GLOB_CHARACTERS = "*?[]{}"  # never in a dataset or shard name (tf.io.gfile.glob, gsutil, shells)
MAX_NAME_BYTES = 200  # a shard name adds ~35 bytes; file systems allow 255

_SHARD_RE = re.compile(
    r"^(?P<name>[^/]+?)(?:-(?P<split>[A-Za-z0-9_]+))?\.tfrecord-(?P<index>\d{5})-of-(?P<count>\d{5})"
    r"(?P<suffix>\.gz|\.zlib)?$"
)


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


def offsets_filename(shard: str) -> str:
    """The record offsets file of the shard file named `shard`, relative to the dataset
    directory (format version 4): ``offsets/<name>.offsets`` beside the shard, so
    ``appends/<token>/offsets/<name>.offsets`` for ``appends/<token>/<name>`` (version 5)."""
    directory, name = split_shard_filename(shard)
    return commit_file(directory, f"{OFFSETS_DIR}/{name}{OFFSETS_SUFFIX}")


def implicit_commit(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The one commit of a format version <= 4 manifest (version 1, recorded, the dataset
    directory), as a version 5 manifest lists it; ``tables`` only from version 3."""
    params = manifest.get("params") or {}
    pattern = params.get("input_pattern", "") if isinstance(params, Mapping) else ""
    commit = {
        "version": 1,
        "dir": "",
        "mode": RECORD_MODE,
        "created_utc": manifest.get("created_utc", ""),
        "input_pattern": pattern if isinstance(pattern, str) else "",
        "num_files": manifest.get("num_files", len(manifest.get("files", ()))),
        "num_errors": manifest.get("num_errors", len(manifest.get("errors", ()))),
        "num_examples": manifest["num_examples"],
    }
    if "tables" in manifest:
        commit["tables"] = manifest["tables"]
    return commit


def manifest_commits(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A manifest's commits, in order; before format version 5 its one `implicit_commit`."""
    if manifest["format_version"] < COMMITS_VERSION:
        return [implicit_commit(manifest)]
    return list(manifest["commits"])


def offsets_bytes(offsets: Sequence[int]) -> bytes:
    """A record offsets file's content: each offset a little-endian uint64."""
    return struct.pack(f"<{len(offsets)}Q", *offsets)


def parse_offsets(data: bytes) -> tuple[int, ...]:
    """The offsets of a record offsets file's content (`offsets_bytes`)."""
    if len(data) % OFFSET_BYTES:
        raise ValueError(f"{len(data)} bytes is not a whole number of {OFFSET_BYTES}-byte offsets")
    return struct.unpack(f"<{len(data) // OFFSET_BYTES}Q", data)


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
#   format_version    5 (4: no commits; 3: also no record offsets; 2: also files / errors
#                      inside the manifest; 1: also float tensors as float_list, <feature>_norm
#                      stored; all read still)
#   complete          true (a manifest is only ever written complete, atomically, last)
#   name              dataset name used in shard file names
#   created_utc       ISO-8601 time; the only field that differs between identical runs
#   compression       NONE | GZIP | ZLIB   (what the shards use; tf.data's spelling)
#   elements          {key: ElementSpec.to_json()}  every key of a decoded element (v2: a
#                      "<feature>_norm" key has encoding z_score with its source and statistics)
#   num_examples      total windows in all splits
#   classes           the class vocabulary, in `target` order (class i has target i): sorted
#                      label names, or --classes; fixed at planning (a label outside: -1)
#   num_classes       len(classes)
#   splits            {split: {"num_examples": n, "shards": [{"filename", "num_examples",
#                      "num_bytes", "offsets"}]}} ; split "all" when the run had no --splits;
#                      "offsets" (v4): {"num_bytes": n, "sha256": hex} of the shard's record
#                      offsets file (`offsets_filename`); v5: every commit's shards in commit
#                      order, an appended commit's named "<dir>/<name>"
#   analyzed_splits   [split]  the splits TFT's statistics (<feature>_norm) were computed on
#                      (added in 2026-11 without a version bump; older manifests lack it)
#   num_files         v3: entries of files.jsonl (FILES_TABLE); v5: the sum over commits
#   num_errors        v3: entries of errors.jsonl (ERRORS_TABLE); v5: the sum over commits
#   tables            v3, v4: {"files": {"num_bytes": n, "sha256": hex}, "errors": {...}}: each
#                      table file's size and SHA-256 (64 lowercase hex digits); the file names
#                      are fixed (TABLE_FILENAMES), never given here; v5: in each commit
#   dataset_version   v5: the version this manifest describes (1: the first record)
#   commits           v5: [{"version", "dir", "mode", "created_utc", "input_pattern",
#                      "num_files", "num_errors", "num_examples", "tables"}], one per version
#                      1 .. dataset_version (`replay.format_commits`)
#   files             v1, v2 only (v3: one entry a line of files.jsonl):
#                      [{"path", "index", "label", "split", "num_windows", "sample_rate",
#                       "num_frames", "num_channels", "subtype", "full_scale"}]  every decoded
#                      input file; features see signal / full_scale (2**(bits-1), 1.0 for float);
#                      a lossy one (Ogg Vorbis) also has "lossy": true and "lossy_reason";
#                      with --annotations each has "annotation" (per-class events, event
#                      seconds, windows: transforms.audio.annotation_stats) and "label" is ""
#   errors            v1, v2 only (v3: one entry a line of errors.jsonl): [{"path", "reason"}]
#                      every input file that failed, with its reason;
#                      with --annotations also every bad table row, "path" "<table>:<line>"
#                      (annotated runs add the element keys labels, events, num_events and
#                      the annotation params; all optional, without a version bump)
#   params            the run's options (win_len, hop_len, features, ...) as JSON
#   versions          {"audiorecords", "apache_beam", "tensorflow", "tensorflow_transform",
#                      "python"}


def table_bytes(entries: Sequence[Mapping[str, Any]]) -> bytes:
    """A source table's file content (format version 3): one compact JSON object a line, ASCII
    (``\\u`` escapes), each line ending in ``\\n``; deterministic for the same entries."""
    return b"".join(map(table_line, entries))


# `table_line`'s encoder, made once: ``json.dumps`` with these options makes one per call
_TABLE_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)


def table_line(entry: Mapping[str, Any]) -> bytes:
    """One entry's line of a source table (`table_bytes`), ``\\n`` included."""
    return _TABLE_ENCODER.encode(entry).encode("ascii") + b"\n"


def table_digest(data: bytes) -> dict[str, Any]:
    """The manifest's ``tables`` entry of a table file's bytes: its size and SHA-256."""
    return {"num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


class FormatError(ValueError):
    """The directory is not a readable audiorecords dataset (names the path and the reason)."""


# --- helpers shared by readers (added for `replay`) --------------------------------------------


def tf_compression_type(compression: str) -> str:
    """`compression` (NONE / GZIP / ZLIB) as tf.data's ``compression_type`` ("" for NONE)."""
    if compression not in COMPRESSION_SUFFIXES:
        raise ValueError(f"unknown compression {compression!r}")
    return "" if compression == "NONE" else compression
