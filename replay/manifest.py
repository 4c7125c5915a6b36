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

Here: the limits, `check_header`, `validate` (the order of the checks) and the elements' checks.
The splits and shards are checked in `replay.manifest_splits`, the versions and commits in
`replay.manifest_commits`, the source tables in `replay.manifest_tables`; the manifest is read
(size, JSON, then `validate`) by `replay.info`.
"""

from __future__ import annotations

import struct
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
from replay.manifest_commits import (  # noqa: F401 - the limits importable here with the others
    MAX_COMMITS,
    check_commit_sums,
    check_commits,
)
from replay.manifest_splits import (  # noqa: F401 - the limits importable here with the others
    MAX_DEFLATE_RATIO,
    MAX_SHARDS_PER_SPLIT,
    MAX_SPLITS,
    check_splits,
    shard_name_problem,  # re-exported: the module docstring's name check
)
from replay.manifest_tables import check_sources, check_tables

MAX_MANIFEST_BYTES = 1 << 30  # a manifest is read whole; 1M source files take ~300 MB
MAX_RANK = 8
MAX_VALUES_PER_KEY = 1 << 28  # values of one key of one element (1 GiB of float32)
MAX_KEYS = 10_000
RECORD_OVERHEAD_BYTES = 16  # TFRecord framing per record: length, its CRC, data CRC
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
    commits = check_commits(c, manifest)  # before the shards: their directories
    per_commit = [0] * len(commits)
    total = check_splits(
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
        check_commit_sums(c, manifest, commits)
    elif version >= fmt.TABLES_VERSION:
        check_tables(c, manifest)
    else:
        check_sources(c, manifest)
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


def _check_vocabulary(c: Checker, manifest: Mapping[str, Any]) -> None:
    classes = c.optional_list(manifest, "classes", "")
    for i, label in enumerate(classes or ()):
        c.as_str(label, f"classes[{i}]")
    num = c.optional(manifest, "num_classes", "", c.as_int)
    if num is not None and classes is not None and num != len(classes):
        c.fail("num_classes", f"{num} but classes lists {len(classes)}")
