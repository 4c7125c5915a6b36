"""The on-disk layout of an audiorecords dataset: the one contract between record and replay.

Both sides import this module: `pipelines.record` writes what it describes, `replay` reads it. It
depends on the standard library only, so the reader stays free of Beam and tensorflow-transform.

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

Each record is a serialized `tf.train.Example`. Keys, dtypes and shapes of the decoded element
are in `manifest["elements"]` (an `ElementSpec` per key). Encodings:

- ``encoding == "raw"``: one bytes value holding the little-endian tensor bytes, row-major: the
  ``signal`` key (int16 / int32 / float32 / float64 samples, bit-exact) and, from format version
  2, every float tensor (features, ``labels``). ``stored_dtype`` (float16 / bfloat16, optional)
  is the dtype of the bytes when it differs from the decoded ``dtype`` (float32): compact storage
  of features (``--feature_dtype``), widened back to float32 when read.
- ``encoding == "float_list"`` / ``"int64_list"``: the flattened tensor, row-major (format
  version 1 stores float tensors as float_list).
- ``encoding == "bytes_list"``: one bytes value (strings, e.g. ``class``, ``filepath``).
- ``encoding == "z_score"`` (version 2): not stored. The reader computes the key from the stored
  key ``source`` with the analysis statistics ``mean`` and ``var`` (float32 values, exact in
  JSON) and tensorflow-transform's ``scale_to_z_score`` ops, bit for bit what version 1 stored
  (`z_score`). Version 1 stores ``<feature>_norm`` as a float_list copy.

`stored_encoding` is the one rule the writer follows: strings bytes_list, int64 int64_list,
every other dtype raw.

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

Versions and commits (format version 5). A dataset grows by appending: each append records only
new inputs into a directory of its own, ``appends/<token>/`` (`APPENDS_DIR`; the token matches
`COMMIT_TOKEN_RE`, one path segment), and commits a new *dataset version*. The manifest's
``dataset_version`` (an integer >= 1: the first record is version 1, each append adds 1) and
``commits``, one entry per version 1 .. ``dataset_version`` in order, describe them. Commit i
(0-based) has:

- ``version``: i + 1;
- ``dir``: ``""`` for version 1 (the dataset directory itself), else ``appends/<token>``
  (`commit_dir_problem`: no other form, so no ``..``, absolute path, backslash or empty
  segment);
- ``mode``: ``"record"`` for version 1, ``"append"`` after (`COMMIT_MODES`);
- ``created_utc`` (ISO-8601), ``input_pattern`` (the run's input glob);
- ``num_files``, ``num_errors``, ``num_examples``: that commit's own counts (integers >= 0;
  ``num_examples`` is the sum of the commit's shards over every split);
- ``tables``: ``{"files": {"num_bytes", "sha256"}, "errors": {...}}`` of that commit's own
  source tables, ``<dir>/files.jsonl`` and ``<dir>/errors.jsonl`` (the root ones for ``""``).

A version 5 manifest has no top-level ``tables``; its ``num_files``, ``num_errors`` and
``num_examples`` are the sums over its commits. ``splits[split].shards`` is the union of every
commit's shards of that split, in commit order: a shard of commit directory D is named
``D/<name>`` (``<name>`` alone for ``""``), where ``<name>`` is `shard_filename` of its index and
count *within that commit's shards of the split*; its record offsets file is
``D/offsets/<name>.offsets`` (`offsets_filename`). The reader's source tables are the
concatenation of every commit's, in commit order. ``transform_fn/``, ``feature_fn/`` and the
other metadata stay at the root (version 1's).

Each version's manifest is also stored, immutable, as ``manifests/<v>.json``
(`version_manifest_filename`). An append writes its files, then ``manifests/<v>.json`` of the
version it appends to when that is absent, then creates ``manifests/<v+1>.json`` exclusively
and whole (the commit point: written aside, then linked into place, or uploaded only if absent;
a reader takes any file there for the committed version), then replaces ``manifest.json`` with
the same bytes. A reader takes
``manifest.json`` and then, while ``manifests/<v+1>.json`` exists, that one (an append killed
between its commit point and the pointer update is committed). A dataset never appended to has
no ``manifests/`` directory: its manifest.json is version 1. A format version <= 4 dataset is
version 1 with one implicit commit (`implicit_commit`). Shards are never rewritten, so a reader
holding version v's manifest keeps reading exactly v while later versions are committed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

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
MANIFESTS_DIR = "manifests"  # v5: <v>.json, version v's manifest (`version_manifest_filename`)
APPENDS_DIR = "appends"  # v5: <token>/, one appended commit's files
COMMIT_TOKEN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # fullmatch: one segment
RECORD_MODE = "record"  # version 1's commit
APPEND_MODE = "append"  # every later commit
COMMIT_MODES = (RECORD_MODE, APPEND_MODE)
# an append's ``transform``: frozen keeps the transform before it; refresh brings its own
# (``<dir>/transform_fn/``, the statistics of the union in the version's elements)
FROZEN_TRANSFORM, REFRESH_TRANSFORM = "frozen", "refresh"
APPEND_TRANSFORMS = (FROZEN_TRANSFORM, REFRESH_TRANSFORM)
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

ENCODING_RAW = "raw"
ENCODING_FLOAT_LIST = "float_list"
ENCODING_INT64_LIST = "int64_list"
ENCODING_BYTES_LIST = "bytes_list"
ENCODING_Z_SCORE = "z_score"  # version 2: computed by the reader, not stored
ENCODINGS = (
    ENCODING_RAW,
    ENCODING_FLOAT_LIST,
    ENCODING_INT64_LIST,
    ENCODING_BYTES_LIST,
    ENCODING_Z_SCORE,
)
DTYPES = ("int16", "int32", "int64", "float32", "float64", "string")  # float64: signal only
# --feature_dtype: how float32 features are stored (raw), always read back as float32. float16:
# relative error <= 2**-11 for |x| in [2**-14, 65504], larger values refused; bfloat16: float32's
# range, relative error <= 2**-8.
FEATURE_DTYPES = ("float32", "float16", "bfloat16")
STORED_DTYPES = ("float16", "bfloat16")  # raw bytes narrower than the decoded float32
_ENCODINGS, _DTYPES = ENCODINGS, DTYPES
GLOB_CHARACTERS = "*?[]{}"  # never in a dataset or shard name (tf.io.gfile.glob, gsutil, shells)
MAX_NAME_BYTES = 200  # a shard name adds ~35 bytes; file systems allow 255

_SHARD_RE = re.compile(
    r"^(?P<name>[^/]+?)(?:-(?P<split>[A-Za-z0-9_]+))?\.tfrecord-(?P<index>\d{5})-of-(?P<count>\d{5})"
    r"(?P<suffix>\.gz|\.zlib)?$"
)


@dataclasses.dataclass(frozen=True)
class ZScore:
    """A key computed at read time: ``scale_to_z_score(<source>)`` with the analysis statistics.

    Attributes:
      source: the stored key it is computed from.
      mean: tensorflow-transform's mean of `source` over the analysed splits (a float32 value).
      var: its (biased) variance (a float32 value, >= 0).
    """

    source: str
    mean: float
    var: float


@dataclasses.dataclass(frozen=True)
class ElementSpec:
    """How one key of an element is stored and what it decodes to.

    Attributes:
      dtype: decoded dtype name: int16, int32, int64, float32, float64 or string.
      shape: decoded shape ([] for scalars).
      encoding: one of raw, float_list, int64_list, bytes_list, z_score (module docstring).
      stored_dtype: raw only: float16 or bfloat16 when the bytes are narrower than `dtype`.
      z_score: z_score only: what the key is computed from.
    """

    dtype: str
    shape: tuple[int, ...]
    encoding: str
    stored_dtype: str | None = None
    z_score: ZScore | None = None

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {_DTYPES}")
        if self.encoding not in _ENCODINGS:
            raise ValueError(f"unknown encoding {self.encoding!r}; expected one of {_ENCODINGS}")
        if self.stored_dtype is not None and (
            self.stored_dtype not in STORED_DTYPES
            or self.encoding != ENCODING_RAW
            or self.dtype != "float32"
        ):
            raise ValueError(f"stored_dtype {self.stored_dtype!r}: only float16/bfloat16 raw")
        if (self.z_score is None) != (self.encoding != ENCODING_Z_SCORE):
            raise ValueError("a z_score key needs its source and statistics, others have none")

    @property
    def stored(self) -> bool:
        """Whether the records hold this key (z_score keys are computed when read)."""
        return self.encoding != ENCODING_Z_SCORE

    def to_json(self) -> dict[str, Any]:
        obj = {"dtype": self.dtype, "shape": list(self.shape), "encoding": self.encoding}
        if self.stored_dtype is not None:
            obj["stored_dtype"] = self.stored_dtype
        if self.z_score is not None:
            obj.update(source=self.z_score.source, mean=self.z_score.mean, var=self.z_score.var)
        return obj

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ElementSpec:
        z_score = None
        if obj["encoding"] == ENCODING_Z_SCORE:
            z_score = ZScore(source=obj["source"], mean=obj["mean"], var=obj["var"])
        return cls(
            dtype=obj["dtype"],
            shape=tuple(obj["shape"]),
            encoding=obj["encoding"],
            stored_dtype=obj.get("stored_dtype"),
            z_score=z_score,
        )


def stored_encoding(dtype: str) -> str:
    """The encoding the writer uses for a key of decoded `dtype` (format version 2).

    Strings: bytes_list; int64 (ids, counts, offsets): int64_list; every other dtype (signal
    samples, float tensors): raw little-endian bytes, which parse faster than float_list
    (docs/performance.md) and keep samples bit-exact.
    """
    if dtype == "string":
        return ENCODING_BYTES_LIST
    if dtype == "int64":
        return ENCODING_INT64_LIST
    return ENCODING_RAW


def stored_spec(dtype: str, shape: Sequence[int], *, stored_dtype: str = "") -> ElementSpec:
    """The `ElementSpec` of a stored key by `stored_encoding`; `stored_dtype` (float16 /
    bfloat16) narrows a float32 key's bytes (``float32`` or empty: none)."""
    narrow = stored_dtype if stored_dtype and stored_dtype != dtype else None
    return ElementSpec(dtype, tuple(shape), stored_encoding(dtype), stored_dtype=narrow)


def z_score_spec(source: str, spec: ElementSpec, *, mean: float, var: float) -> ElementSpec:
    """The spec of ``<source>_norm``, computed by the reader from the stored key `source`."""
    z_score = ZScore(source=source, mean=float(mean), var=float(var))
    return ElementSpec(spec.dtype, spec.shape, ENCODING_Z_SCORE, z_score=z_score)


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


def split_shard_filename(filename: str) -> tuple[str, str]:
    """``(commit dir, shard name)`` of a manifest's shard `filename` (format version 5):
    ``("appends/t", "x.tfrecord-...")`` for ``appends/t/x.tfrecord-...``, ``("", filename)``
    for a name without a directory."""
    directory, _, name = filename.rpartition("/")
    return directory, name


def commit_file(directory: str, name: str) -> str:
    """The path, relative to the dataset directory, of file `name` of the commit whose
    directory is `directory` (``""``: the dataset directory itself)."""
    return f"{directory}/{name}" if directory else name


def append_dir(token: str) -> str:
    """The commit directory of an append named `token`: ``appends/<token>``."""
    problem = commit_token_problem(token)
    if problem:
        raise ValueError(f"append token {token!r} {problem}")
    return f"{APPENDS_DIR}/{token}"


def commit_token_problem(token: str) -> str | None:
    """Why `token` cannot name an append's directory, or None when it can."""
    if not isinstance(token, str) or not COMMIT_TOKEN_RE.fullmatch(token):
        return f"does not match {COMMIT_TOKEN_RE.pattern}"
    return None


def commit_dir_problem(directory: str, *, version: int) -> str | None:
    """Why `directory` is not a valid ``dir`` of commit `version` (format version 5), or None.

    Version 1's is ``""``; every later one's is ``appends/<token>`` with a token matching
    `COMMIT_TOKEN_RE`: one segment, so no ``..``, absolute path, backslash or empty segment.
    """
    if version == 1:
        return None if directory == "" else "must be '' (version 1 is the dataset directory)"
    prefix = f"{APPENDS_DIR}/"
    if not directory.startswith(prefix) or commit_token_problem(directory[len(prefix) :]):
        return f"is not {prefix}<token> (<token> matching {COMMIT_TOKEN_RE.pattern})"
    return None


def version_manifest_filename(version: int) -> str:
    """Version `version`'s immutable manifest, relative to the dataset directory (format
    version 5): ``manifests/<version>.json``."""
    if type(version) is not int or version < 1:
        raise ValueError(f"a dataset version is an integer >= 1, not {version!r}")
    return f"{MANIFESTS_DIR}/{version}.json"


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
#                      1 .. dataset_version (module docstring, "Versions and commits")
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


def element_specs(manifest: Mapping[str, Any]) -> dict[str, ElementSpec]:
    """The `ElementSpec` of every key of a decoded element, in manifest order."""
    return {key: ElementSpec.from_json(obj) for key, obj in manifest["elements"].items()}


def tf_compression_type(compression: str) -> str:
    """`compression` (NONE / GZIP / ZLIB) as tf.data's ``compression_type`` ("" for NONE)."""
    if compression not in COMPRESSION_SUFFIXES:
        raise ValueError(f"unknown compression {compression!r}")
    return "" if compression == "NONE" else compression


def stored_specs(
    specs: Mapping[str, ElementSpec], elements: Mapping[str, ElementSpec] | None = None
) -> dict[str, ElementSpec]:
    """The stored keys to parse for `specs`: the stored ones, and each z_score key's source
    (looked up in `elements`, every key of the dataset; default `specs`)."""
    elements = specs if elements is None else elements
    stored = {}
    for key, spec in specs.items():
        if spec.z_score is not None:
            source = spec.z_score.source
            if source not in elements or not elements[source].stored:
                raise ValueError(f"{key}: source key {source!r} is not a stored key")
            stored[source] = elements[source]
        else:
            stored[key] = spec
    return stored
