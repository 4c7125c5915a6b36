"""The manifest.json schema: one validator, run on every manifest before anything is built from it.

Datasets travel (a colleague's bucket, a download), so a manifest is untrusted input. `validate`
checks every field a reader uses, completely, before `load_info` returns: types (a count is a
JSON integer, never a bool, float or string), ranges, element shapes (positive, bounded by
`MAX_VALUES_PER_KEY`), dtypes and encodings from the known sets, counts that add up (a split's
``num_examples`` is the sum of its shards', the manifest's the sum over splits), shard sizes that
can hold the records they claim, and shard file names that are plain names of this dataset
(`shard_name_problem`). Format version 5 adds the commits (`format`, "Versions and commits"):
versions 1 .. ``dataset_version`` in order, each commit's directory the dataset directory or
``appends/<token>`` and nothing else, its counts and source tables; every shard in the directory
of a commit, named for its index within that commit's shards of the split, in commit order; the
manifest's counts the sums over the commits. Any failure is a `ManifestError` naming the
manifest and the field, e.g.
``out/manifest.json: splits.train.shards[0].filename: '../x.tfrecord' is not ...``.

Keys this reader does not use are tolerated anywhere (other writers may add optional fields);
keys it uses are validated wherever they appear. Hand-written rather than a JSON-Schema library:
the reader imports only TensorFlow and the standard library, and the checks that matter most
(sums, names derived from other fields, sizes against shapes) are not expressible in JSON Schema.
"""

from __future__ import annotations

import math
import re
import struct
from collections import Counter
from collections.abc import Mapping
from typing import Any

from replay import format as fmt
from replay.errors import IncompleteDatasetError
from replay.json_checks import (
    MAX_COUNT,  # noqa: F401 - one of the manifest's limits, importable here with the others
    MAX_JSON_DEPTH,
    Checker,
    depth_ok,
    field_of,
    got,
    kind_of,
    show,
)

MAX_MANIFEST_BYTES = 1 << 30  # a manifest is read whole; 1M source files take ~300 MB
MAX_RANK = 8
MAX_VALUES_PER_KEY = 1 << 28  # values of one key of one element (1 GiB of float32)
MAX_KEYS = 10_000
MAX_SPLITS = 1_000
MAX_SHARDS_PER_SPLIT = 1_000_000
MAX_COMMITS = 100_000  # dataset versions of one dataset
RECORD_OVERHEAD_BYTES = 16  # TFRecord framing per record: length, its CRC, data CRC
MAX_DEFLATE_RATIO = 1032  # zlib's maximum compression ratio: GZIP / ZLIB shards shrink at most so
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+")
_VALUE_BYTES = {"int16": 2, "int32": 4, "int64": 8, "float32": 4, "float64": 8}
_VALUE_BYTES.update(float16=2, bfloat16=2)  # stored_dtype of a raw float32 key
_FLOAT32_MAX = 3.4028234663852886e38
_SAMPLES = ("int16", "int32", "float32", "float64")  # signal dtypes


def check_header(manifest: Any, *, path: str) -> dict[str, Any]:
    """The first checks: a JSON object of our format, a version we read, marked complete.

    Raises:
      ManifestError: not an object, not an audiorecords manifest, a format_version that is not
        an integer or is newer than `format.FORMAT_VERSION`.
      IncompleteDatasetError: an audiorecords manifest not marked complete.
    """
    c = Checker(path)
    if not isinstance(manifest, dict):
        c.fail("manifest", f"expected a JSON object, got {kind_of(manifest)}")
    if manifest.get("format") != fmt.FORMAT_NAME:
        c.fail("format", f"not an {fmt.FORMAT_NAME} manifest ({show(manifest.get('format'))})")
    if "format_version" not in manifest:
        c.fail("format_version", "missing")
    version = manifest["format_version"]
    if type(version) is not int:
        c.fail("format_version", f"expected an integer, got {got(version)}")
    if version > max(fmt.READABLE_VERSIONS):
        c.fail(
            "format_version",
            f"{version} is newer than this reader understands ({max(fmt.READABLE_VERSIONS)}); "
            "upgrade audiorecords",
        )
    if version < 1:
        c.fail("format_version", f"{version} is not a version (versions start at 1)")
    if manifest.get("complete") is not True:
        raise IncompleteDatasetError(f"{path}: incomplete dataset: manifest is not marked complete")
    return manifest


def validate(manifest: Any, *, path: str) -> dict[str, Any]:
    """Checks a parsed manifest.json completely; returns it unchanged.

    Args:
      manifest: the parsed JSON.
      path: the manifest's path, for messages.

    Raises:
      ManifestError: the first problem, naming `path` and the field.
      IncompleteDatasetError: see `check_header`.
    """
    c = Checker(path)
    manifest = check_header(manifest, path=path)
    if not depth_ok(manifest):
        c.fail("manifest", f"nested deeper than {MAX_JSON_DEPTH} levels")
    for key in ("compression", "elements", "splits", "num_examples"):
        if key not in manifest:
            c.fail(key, "missing")
    name = c.optional(manifest, "name", "", c.as_str)
    name = fmt.DEFAULT_NAME if name is None else name
    problem = fmt.plain_name_problem(name)
    if problem:
        c.fail("name", f"{show(name)} {problem}")
    c.optional(manifest, "created_utc", "", c.as_str)
    compression = manifest["compression"]
    if not isinstance(compression, str) or compression not in fmt.COMPRESSION_SUFFIXES:
        known = list(fmt.COMPRESSION_SUFFIXES)
        c.fail("compression", f"{show(compression)} is not one of {known}")
    version = manifest["format_version"]
    record_bytes = _check_elements(c, manifest["elements"], version=version)
    commits = _check_commits(c, manifest)  # before the shards: their directories
    per_commit = [0] * len(commits)
    total = _check_splits(
        c,
        manifest["splits"],
        name=name,
        compression=compression,
        record_bytes=record_bytes,
        version=version,
        commit_dirs={commit["dir"]: i for i, commit in enumerate(commits)},
        per_commit=per_commit,
    )
    if c.as_int(manifest["num_examples"], "num_examples") != total:
        c.fail("num_examples", f"{manifest['num_examples']} but the splits hold {total}")
    for i, commit in enumerate(commits):
        if commit["num_examples"] != per_commit[i]:
            c.fail(
                f"commits[{i}].num_examples",
                f"{commit['num_examples']} but its shards hold {per_commit[i]}",
            )
    _check_vocabulary(c, manifest)
    if version >= fmt.COMMITS_VERSION:
        _check_commit_sums(c, manifest, commits)
    elif version >= fmt.TABLES_VERSION:
        _check_tables(c, manifest)
    else:
        _check_sources(c, manifest)
    params = c.optional(manifest, "params", "", c.as_obj)
    if params is not None:
        features = c.optional_list(params, "features", "params", limit=MAX_KEYS)
        for i, feature in enumerate(features or ()):
            c.as_str(feature, f"params.features[{i}]")
    c.optional(manifest, "versions", "", c.as_obj)
    return manifest


def _check_elements(c: Checker, elements: Any, *, version: int) -> int:
    """Checks every ElementSpec; returns the fewest bytes one serialized record can take."""
    elements = c.as_obj(elements, "elements")
    if not elements:
        c.fail("elements", "no keys")
    if len(elements) > MAX_KEYS:
        c.fail("elements", f"{len(elements)} keys, more than the limit {MAX_KEYS}")
    least = RECORD_OVERHEAD_BYTES
    for key, spec in elements.items():
        field = field_of("elements", key)
        if not key:
            c.fail(field, "empty key")
        spec = c.as_obj(spec, field)
        for part in ("dtype", "shape", "encoding"):
            if part not in spec:
                c.fail(field_of(field, part), "missing")
        dtype, encoding = spec["dtype"], spec["encoding"]
        if not isinstance(dtype, str) or dtype not in fmt.DTYPES:
            c.fail(field_of(field, "dtype"), f"{show(dtype)} is not one of {list(fmt.DTYPES)}")
        if not isinstance(encoding, str) or encoding not in fmt.ENCODINGS:
            c.fail(
                field_of(field, "encoding"), f"{show(encoding)} is not one of {list(fmt.ENCODINGS)}"
            )
        shape = c.as_list(spec["shape"], field_of(field, "shape"), limit=MAX_RANK)
        values = 1
        for i, dim in enumerate(shape):
            dim_field = f"{field_of(field, 'shape')}[{i}]"
            values *= c.as_int(dim, dim_field, low=1, high=MAX_VALUES_PER_KEY)
        if values > MAX_VALUES_PER_KEY:
            c.fail(field_of(field, "shape"), f"{shape} holds {values} values, over the limit")
        if (dtype == "string") != (encoding == fmt.ENCODING_BYTES_LIST):
            c.fail(field, f"dtype {dtype} cannot be stored as {encoding}")
        if encoding == fmt.ENCODING_BYTES_LIST and shape:
            c.fail(field, f"a {encoding} key holds one string: shape must be [], not {shape}")
        if encoding == fmt.ENCODING_FLOAT_LIST and dtype != "float32":
            c.fail(field, f"{encoding} decodes to float32, not {dtype}")
        if encoding == fmt.ENCODING_INT64_LIST and dtype == "float32":
            c.fail(field, f"{encoding} decodes to an integer dtype, not {dtype}")
        stored_dtype = _check_v2_parts(c, field, spec, elements, version=version)
        if encoding == fmt.ENCODING_RAW:
            least += values * _VALUE_BYTES[stored_dtype or dtype]
        elif encoding == fmt.ENCODING_FLOAT_LIST:
            least += values * 4  # packed floats
        elif encoding == fmt.ENCODING_INT64_LIST:
            least += values  # packed varints: at least a byte each
    _check_core_keys(c, elements)
    return least


def _check_v2_parts(
    c: Checker, field: str, spec: Mapping[str, Any], elements: Mapping[str, Any], *, version: int
) -> str | None:
    """Checks ``stored_dtype`` and a z_score key's source and statistics (format version 2);
    returns the stored dtype (None: the decoded dtype)."""
    encoding = spec["encoding"]
    stored_dtype = spec.get("stored_dtype")
    if version < 2 and ("stored_dtype" in spec or encoding == fmt.ENCODING_Z_SCORE):
        what = "stored_dtype" if "stored_dtype" in spec else f"encoding {encoding}"
        c.fail(field, f"{what} needs format_version 2, the manifest says {version}")
    if "stored_dtype" in spec:
        if not isinstance(stored_dtype, str) or stored_dtype not in fmt.STORED_DTYPES:
            known = list(fmt.STORED_DTYPES)
            c.fail(field_of(field, "stored_dtype"), f"{show(stored_dtype)} is not one of {known}")
        if encoding != fmt.ENCODING_RAW or spec["dtype"] != "float32":
            c.fail(field, f"stored_dtype {stored_dtype}: only for raw float32 keys")
    if encoding != fmt.ENCODING_Z_SCORE:
        return stored_dtype
    for part in ("source", "mean", "var"):
        if part not in spec:
            c.fail(field_of(field, part), "missing")
    source = c.as_str(spec["source"], field_of(field, "source"))
    source_spec = elements.get(source)
    if (
        not isinstance(source_spec, dict)
        or source_spec.get("encoding") not in (fmt.ENCODING_RAW, fmt.ENCODING_FLOAT_LIST)
        or source_spec.get("dtype") != "float32"
        or source_spec.get("shape") != spec["shape"]
    ):
        c.fail(
            field_of(field, "source"),
            f"{show(source)} is not a stored float32 key of shape {spec['shape']}"
            + (
                f" (it is {show(source_spec.get('dtype'))} {show(source_spec.get('shape'))})"
                if isinstance(source_spec, dict)
                else ""
            ),
        )
    if spec["dtype"] != "float32":
        c.fail(field, f"{encoding} decodes to float32, not {spec['dtype']}")
    for part in ("mean", "var"):
        value = spec[part]
        if type(value) not in (int, float) or not abs(value) <= _FLOAT32_MAX:  # also NaN
            c.fail(field_of(field, part), f"expected a finite float32 number, got {got(value)}")
        if struct.unpack("<f", struct.pack("<f", value))[0] != value:
            c.fail(field_of(field, part), f"{show(value)} is not a float32 value")
    if spec["var"] < 0:
        c.fail(field_of(field, "var"), f"{show(spec['var'])} is negative")
    return None


def _check_core_keys(c: Checker, elements: Mapping[str, Any]) -> None:
    """Every dataset has a ``class`` string and a raw ``signal`` window (readers rely on both)."""
    for key, dtypes, rank in ((fmt.CLASS_KEY, ("string",), 0), (fmt.SIGNAL_KEY, _SAMPLES, 1)):
        spec = elements.get(key)
        if spec is None:
            c.fail(field_of("elements", key), "missing")
        if spec["dtype"] not in dtypes or len(spec["shape"]) != rank:
            c.fail(
                field_of("elements", key),
                f"must be {' or '.join(dtypes)} of rank {rank}, not {spec['dtype']} "
                f"{spec['shape']}",
            )
    if elements[fmt.SIGNAL_KEY]["encoding"] != fmt.ENCODING_RAW:
        c.fail(field_of("elements", fmt.SIGNAL_KEY), "must be stored raw")


def _check_splits(
    c: Checker,
    splits: Any,
    *,
    name: str,
    compression: str,
    record_bytes: int,
    version: int,
    commit_dirs: Mapping[str, int],
    per_commit: list[int],
) -> int:
    """Checks every split and shard entry; returns the total example count.

    `commit_dirs`: each commit's directory -> its index (format version 5; ``{"": 0}`` before:
    the one implicit commit). Adds each shard's examples to `per_commit` at its commit's index.
    """
    splits = c.as_obj(splits, "splits")
    if not splits or len(splits) > MAX_SPLITS:
        c.fail("splits", f"{len(splits)} splits; expected 1 to {MAX_SPLITS}")
    if fmt.ALL_SPLIT in splits and len(splits) > 1:
        c.fail("splits", f"split {fmt.ALL_SPLIT!r} (a run without --splits) stands alone")
    total = 0
    for split, entry in splits.items():
        field = field_of("splits", split)
        if not _SPLIT_NAME.fullmatch(split) or not split.isascii():
            c.fail(field, "a split name is letters, digits and '_'")
        entry = c.as_obj(entry, field)
        for part in ("num_examples", "shards"):
            if part not in entry:
                c.fail(field_of(field, part), "missing")
        shards = c.as_list(entry["shards"], field_of(field, "shards"), limit=MAX_SHARDS_PER_SPLIT)
        listed = Counter(s["filename"] for s in shards if _named(s))
        places = _shard_places(c, shards, field_of(field, "shards"), commit_dirs, version=version)
        groups = Counter(directory for directory, _, _ in places)
        seen: Counter[str] = Counter()  # shards of each commit directory so far
        count = 0
        for i, (shard, (directory, commit, base)) in enumerate(zip(shards, places, strict=True)):
            sfield = f"{field_of(field, 'shards')}[{i}]"
            filename = shard["filename"]
            problem = shard_name_problem(
                base, name=name, split=split, index=seen[directory],
                num_shards=groups[directory], compression=compression,
            )  # fmt: skip
            seen[directory] += 1
            if listed[filename] > 1:
                problem = f"is listed {listed[filename]} times (each shard is read once)"
            if problem:
                c.fail(field_of(sfield, "filename"), f"{show(filename)} {problem}")
            examples = c.as_int(shard["num_examples"], field_of(sfield, "num_examples"))
            size = c.as_int(shard["num_bytes"], field_of(sfield, "num_bytes"))
            ratio = 1 if compression == "NONE" else MAX_DEFLATE_RATIO
            if examples * record_bytes > size * ratio:
                c.fail(
                    field_of(sfield, "num_bytes"),
                    f"{size} bytes cannot hold {examples} records of at least {record_bytes} "
                    "bytes (the element shapes or counts are wrong)",
                )
            _check_offsets(c, shard, sfield, version=version)
            count += examples
            per_commit[commit] += examples
        if c.as_int(entry["num_examples"], field_of(field, "num_examples")) != count:
            claim = entry["num_examples"]
            c.fail(field_of(field, "num_examples"), f"{claim} but its shards hold {count}")
        total += count
    return total


def _shard_places(
    c: Checker, shards: list[Any], field: str, commit_dirs: Mapping[str, int], *, version: int
) -> list[tuple[str, int, str]]:
    """``(commit directory, commit index, name in it)`` of each shard entry, every entry an
    object with its parts, its file inside the directory of a commit (a plain name in it), in
    commit order. Checked for every shard before any name is compared with the name its index
    gives, so a path that leaves its directory is the error reported."""
    places = []
    last = 0  # the commit of the shard before: shards come in commit order
    for i, shard in enumerate(shards):
        sfield = f"{field}[{i}]"
        shard = c.as_obj(shard, sfield)
        for part in ("filename", "num_examples", "num_bytes"):
            if part not in shard:
                c.fail(field_of(sfield, part), "missing")
        filename = c.as_str(shard["filename"], field_of(sfield, "filename"))
        directory = _commit_dir(filename, version)
        commit = commit_dirs.get(directory)
        if commit is None:
            known = [d for d in commit_dirs if d]
            c.fail(
                field_of(sfield, "filename"),
                f"{show(filename)} is in no commit's directory (the commits' directories: '' "
                f"and {show(known)})",
            )
        base = filename[len(directory) + 1 :] if directory else filename
        problem = fmt.plain_name_problem(base)
        if problem:
            c.fail(field_of(sfield, "filename"), f"{show(filename)} {problem}")
        if commit < last:
            c.fail(
                field_of(sfield, "filename"),
                f"{show(filename)} of commit {commit + 1} comes after a shard of commit "
                f"{last + 1} (shards are listed in commit order)",
            )
        last = commit
        places.append((directory, commit, base))
    return places


def _named(shard: Any) -> bool:
    return isinstance(shard, dict) and isinstance(shard.get("filename"), str)


def _commit_dir(filename: str, version: int) -> str:
    """The commit directory a shard `filename` names (format version 5: the part before its
    last ``/``); "" before version 5, where a shard name holds no directory."""
    if version < fmt.COMMITS_VERSION:
        return ""
    return fmt.split_shard_filename(filename)[0]


_COMMIT_COUNTS = ("num_files", "num_errors", "num_examples")


def _check_commits(c: Checker, manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Format version 5: ``dataset_version`` and ``commits`` (`format`, "Versions and
    commits"); returns the commits. Before version 5: neither key, one implicit commit."""
    version = manifest["format_version"]
    if version < fmt.COMMITS_VERSION:
        for key in ("dataset_version", "commits"):
            if key in manifest:
                c.fail(
                    key, f"needs format_version {fmt.COMMITS_VERSION}, the manifest says {version}"
                )
        return [{"dir": "", "num_examples": manifest["num_examples"]}]
    for key in ("dataset_version", "commits"):
        if key not in manifest:
            c.fail(key, "missing")
    dataset_version = c.as_int(
        manifest["dataset_version"], "dataset_version", low=1, high=MAX_COMMITS
    )
    commits = c.as_list(manifest["commits"], "commits", limit=MAX_COMMITS)
    if len(commits) != dataset_version:
        c.fail(
            "commits",
            f"{len(commits)} commits, but dataset_version is {dataset_version} (one commit a "
            "version)",
        )
    dirs: set[str] = set()
    for i, commit in enumerate(commits):
        field = f"commits[{i}]"
        commit = c.as_obj(commit, field)
        for part in ("version", "dir", "mode", "created_utc", "input_pattern", *_COMMIT_COUNTS,
                     "tables"):  # fmt: skip
            if part not in commit:
                c.fail(field_of(field, part), "missing")
        number = c.as_int(commit["version"], field_of(field, "version"), high=MAX_COMMITS)
        if number != i + 1:
            c.fail(field_of(field, "version"), f"{number}, but commit {i} is version {i + 1}")
        directory = c.as_str(commit["dir"], field_of(field, "dir"))
        problem = fmt.commit_dir_problem(directory, version=i + 1)
        if problem:
            c.fail(field_of(field, "dir"), f"{show(directory)} {problem}")
        if directory in dirs:
            c.fail(field_of(field, "dir"), f"{show(directory)} is an earlier commit's directory")
        dirs.add(directory)
        mode = commit["mode"]
        expected = fmt.RECORD_MODE if i == 0 else fmt.APPEND_MODE
        if mode != expected:
            c.fail(field_of(field, "mode"), f"{show(mode)}, but version {i + 1} is {expected!r}")
        c.as_str(commit["created_utc"], field_of(field, "created_utc"))
        c.as_str(commit["input_pattern"], field_of(field, "input_pattern"))
        for key in _COMMIT_COUNTS:
            c.as_int(commit[key], field_of(field, key))
        _check_table_digests(c, commit, field)
        _check_commit_transform(c, commit, field, first=i == 0)
    return commits


def _check_commit_transform(c: Checker, commit: Mapping[str, Any], field: str, *, first: bool):
    """A commit's optional ``transform`` (appends only: which transform the version uses) and
    ``moments`` ({feature: {count, total, total_sq, nonfinite}}, integers)."""
    if "transform" in commit:
        transform = commit["transform"]
        if first or transform not in fmt.APPEND_TRANSFORMS:
            allowed = "none on version 1" if first else f"one of {list(fmt.APPEND_TRANSFORMS)}"
            c.fail(field_of(field, "transform"), f"{show(transform)}: {allowed}")
    moments = c.optional(commit, "moments", field, c.as_obj)
    for feature, value in (moments or {}).items():
        where = field_of(field_of(field, "moments"), feature)
        value = c.as_obj(value, where)
        for key in ("count", "total", "total_sq", "nonfinite"):
            if key not in value:
                c.fail(field_of(where, key), "missing")
            if type(value[key]) is not int:  # exact totals: any size, any sign
                c.fail(field_of(where, key), f"expected an integer, got {show(value[key])}")


def _check_commit_sums(
    c: Checker, manifest: Mapping[str, Any], commits: list[dict[str, Any]]
) -> None:
    """Format version 5: no top-level tables or lists; the counts are the commits' sums."""
    for key in (*fmt.TABLE_FILENAMES, "tables"):
        if key in manifest:
            c.fail(
                key,
                f"a format_version {manifest['format_version']} manifest keeps its source "
                "tables per commit (commits[i].tables)",
            )
    for key in fmt.TABLE_COUNT_KEYS.values():
        if key not in manifest:
            c.fail(key, "missing")
        total = sum(commit[key] for commit in commits)
        if c.as_int(manifest[key], key) != total:
            c.fail(key, f"{manifest[key]} but the commits hold {total}")


def _check_vocabulary(c: Checker, manifest: Mapping[str, Any]) -> None:
    classes = c.optional_list(manifest, "classes", "")
    for i, label in enumerate(classes or ()):
        c.as_str(label, f"classes[{i}]")
    num = c.optional(manifest, "num_classes", "", c.as_int)
    if num is not None and classes is not None and num != len(classes):
        c.fail("num_classes", f"{num} but classes lists {len(classes)}")


_FILE_FIELDS = {  # files[] keys the readers use -> ("str" | "int" | "time" | "scale", required)
    "path": ("str", True),
    "index": ("int", True),
    "size_bytes": ("int", False),  # format version 5
    "modified": ("time", False),  # format version 5: seconds since the epoch
    "label": ("str", False),
    "split": ("str", False),
    "num_windows": ("int", False),
    "sample_rate": ("int", False),
    "num_frames": ("int", False),
    "num_channels": ("int", False),
    "subtype": ("str", False),
    "full_scale": ("scale", False),
}


def _check_sources(c: Checker, manifest: Mapping[str, Any]) -> None:
    """``files`` and ``errors`` (format versions 1, 2): the source-file lists `pipelines.inspect`
    and serving read."""
    files = c.optional_list(manifest, "files", "")
    for i, entry in enumerate(files or ()):
        check_file_entry(c, entry, f"files[{i}]")
    errors = c.optional_list(manifest, "errors", "")
    for i, entry in enumerate(errors or ()):
        check_error_entry(c, entry, f"errors[{i}]")


def check_file_entry(c: Checker, entry: Any, field: str) -> dict[str, Any]:
    """One ``files`` entry (a manifest list item, or a line of files.jsonl); returns it."""
    entry = c.as_obj(entry, field)
    for key, (kind, required) in _FILE_FIELDS.items():
        if key not in entry:
            if required:
                c.fail(field_of(field, key), "missing")
            continue
        value = entry[key]
        if kind == "str":
            c.as_str(value, field_of(field, key))
        elif kind == "int":
            c.as_int(value, field_of(field, key))
        elif kind == "time":
            if type(value) not in (int, float) or not (math.isfinite(value) and value >= 0):
                c.fail(field_of(field, key), f"expected a time >= 0, got {show(value)}")
        elif type(value) not in (int, float) or not (math.isfinite(value) and value > 0):
            c.fail(field_of(field, key), f"expected a positive number, got {show(value)}")
    return entry


def check_error_entry(c: Checker, entry: Any, field: str) -> dict[str, Any]:
    """One ``errors`` entry (a manifest list item, or a line of errors.jsonl); returns it."""
    entry = c.as_obj(entry, field)
    for key in ("path", "reason"):
        c.optional(entry, key, field, c.as_str)
    return entry


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _check_tables(c: Checker, manifest: Mapping[str, Any]) -> None:
    """Format version 3: the counts and digests of files.jsonl / errors.jsonl (their entries
    are checked when a reader reads them, `replay.tables`); no list in the manifest itself."""
    for key in fmt.TABLE_FILENAMES:
        if key in manifest:
            c.fail(
                key,
                f"a format_version {manifest['format_version']} manifest holds no {key} list "
                f"(its entries are in {fmt.TABLE_FILENAMES[key]})",
            )
    for key in (*fmt.TABLE_COUNT_KEYS.values(), "tables"):
        if key not in manifest:
            c.fail(key, "missing")
    _check_table_digests(c, manifest, "")


def _check_table_digests(c: Checker, owner: Mapping[str, Any], parent: str) -> None:
    """`owner`'s ``tables`` (the manifest's, v3 and v4; a commit's, v5) against its counts."""
    tables = c.as_obj(owner["tables"], field_of(parent, "tables"))
    for key, count_key in fmt.TABLE_COUNT_KEYS.items():
        count = c.as_int(owner[count_key], field_of(parent, count_key))
        field = field_of(field_of(parent, "tables"), key)
        if key not in tables:
            c.fail(field, "missing")
        size = _check_digest(c, tables[key], field)
        least, most = 3 * count, count * fmt.MAX_TABLE_LINE_BYTES  # "{}\n" .. the longest line
        if not least <= size <= most:
            c.fail(
                field_of(field, "num_bytes"),
                f"{size} bytes cannot hold {field_of(parent, count_key)} {count} lines of 3 to "
                f"{fmt.MAX_TABLE_LINE_BYTES} bytes",
            )


def _check_digest(c: Checker, entry: Any, field: str) -> int:
    """A file's ``{"num_bytes", "sha256"}`` entry (a source table's, a shard's record offsets');
    returns its size."""
    entry = c.as_obj(entry, field)
    for part in ("num_bytes", "sha256"):
        if part not in entry:
            c.fail(field_of(field, part), "missing")
    size = c.as_int(entry["num_bytes"], field_of(field, "num_bytes"))
    digest = c.as_str(entry["sha256"], field_of(field, "sha256"))
    if not _SHA256.fullmatch(digest):
        c.fail(field_of(field, "sha256"), f"{show(digest)} is not 64 lowercase hex digits")
    return size


def _check_offsets(c: Checker, shard: Mapping[str, Any], field: str, *, version: int) -> None:
    """Format version 4: a shard's record offsets file, 8 bytes a record; none before."""
    if version < fmt.OFFSETS_VERSION:
        if "offsets" in shard:
            c.fail(field_of(field, "offsets"), f"needs format_version {fmt.OFFSETS_VERSION}")
        return
    if "offsets" not in shard:
        c.fail(field_of(field, "offsets"), "missing")
    size = _check_digest(c, shard["offsets"], field_of(field, "offsets"))
    expected = fmt.OFFSET_BYTES * shard["num_examples"]
    if size != expected:
        c.fail(
            field_of(field_of(field, "offsets"), "num_bytes"),
            f"{size} bytes, but {shard['num_examples']} records take {expected}",
        )


def shard_name_problem(
    filename: str, *, name: str, split: str, index: int, num_shards: int, compression: str
) -> str | None:
    """Why `filename` is not the name of shard `index` of `split`, or None when it is.

    A shard name must be a plain file name inside the dataset directory (no separator, no
    ``..``, not absolute, no glob or control characters) and exactly the name the writer gives
    that shard (`format.shard_filename`): dataset name, split, index, count and compression
    suffix all agree with the manifest.
    """
    problem = fmt.plain_name_problem(filename)
    if problem:
        return problem
    expected = fmt.shard_filename(
        name=name, split=split, index=index, num_shards=num_shards, compression=compression
    )
    if filename != expected:
        return f"is not shard {index} of split {split!r} of this dataset (expected {expected!r})"
    return None
