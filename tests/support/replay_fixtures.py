"""Small hand-made audiorecords datasets for the `replay` tests.

`write_dataset` writes shards + manifest.json per `replay.format` with plain
`tf.io.TFRecordWriter` + `tf.train.Example` (no Beam, no tensorflow-transform), in the layout the
record job writes: format version 4 (each shard's record offsets in ``offsets/``, counted from
the records' lengths; the source files and errors in ``files.jsonl`` / ``errors.jsonl``,
`write_tables`), or with ``format_version=3`` without the offsets, with ``format_version=2``
also the lists inside the manifest; from
version 2 on, float features as raw little-endian bytes, in ``--feature_dtype``, encoded by the
writer's own `raw_float_rows`; ``log_mel_norm`` not stored but a ``z_score`` key whose
statistics are in the manifest), or with ``format_version=1`` the
version-1 layout (features and their ``_norm`` copies as float lists). The element values it
returns are computed in numpy, independently of the writer and of the reader: the float32
values the writer was given, rounded as `stored_values` says, and their z-scores.

Format version 5 (``format_version=5``): the same files as version 4, the manifest with
``dataset_version`` 1 and its one commit; `append_commit` then adds a dataset version as an
append does (`replay.format`, "Versions and commits"): new records in ``appends/<token>/``
(shards, record offsets, source tables), ``manifests/<v>.json`` of the version appended to and
of the new one (created exclusively: the commit point), then ``manifest.json`` replaced.

Real record runs, and reading stored records without `replay`: `tests.support.replay_recorded`.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from replay import format as fmt
from tests.support.record_helpers import z_score

CLASSES = ("cat", "dog", "owl")
SAMPLE_RATE = 16000
FEATURE = "log_mel"
NORM = FEATURE + fmt.NORMALIZED_SUFFIX
FEATURE_SHAPE = (4, 8)  # log_mel [frames, bins]
NAME = "audiorecords"
# Exact ties of float32 between two neighbours, written into the first element's log_mel: the
# writer rounds to nearest even, so the first of each pair rounds down, the second up (a
# truncating writer would round both down). bfloat16 keeps 8 significand bits, float16 11.
BFLOAT16_TIES = (1 + 2.0**-8, 1 + 3 * 2.0**-8)  # -> 1, 1 + 2**-6
FLOAT16_TIES = (1 + 2.0**-11, 1 + 3 * 2.0**-11)  # -> 1, 1 + 2**-9


def bfloat16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bfloat16 value, ties to even, as float32 (finite inputs).

    What the writer stores for ``--feature_dtype bfloat16`` (`raw_float_rows`: ml_dtypes'
    ``astype(bfloat16)``, round to nearest even), in plain numpy bit arithmetic: add 0x7FFF,
    plus 1 when the lowest kept bit is set, to the float32 bits, then keep the high 16 bits.
    """
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def stored_values(x: np.ndarray, feature_dtype: str) -> np.ndarray:
    """The float32 values a reader must return for float32 `x` stored in `feature_dtype`."""
    x = np.asarray(x, np.float32)
    if feature_dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    if feature_dtype == "bfloat16":
        return bfloat16_round(x)
    if feature_dtype == "float32":
        return x
    raise ValueError(f"unknown feature dtype {feature_dtype!r}")


def _feature_specs(
    *, format_version: int, feature_dtype: str, mean: float, var: float
) -> dict[str, fmt.ElementSpec]:
    """``log_mel`` and ``log_mel_norm`` as the writer of `format_version` describes them."""
    if format_version == 1:
        spec = fmt.ElementSpec("float32", FEATURE_SHAPE, fmt.ENCODING_FLOAT_LIST)
        return {FEATURE: spec, NORM: spec}
    spec = fmt.stored_spec("float32", FEATURE_SHAPE, stored_dtype=feature_dtype)
    return {FEATURE: spec, NORM: fmt.z_score_spec(FEATURE, spec, mean=mean, var=var)}


def _element_specs(*, win_len: int, signal_dtype: str) -> dict[str, fmt.ElementSpec]:
    return {
        fmt.CLASS_KEY: fmt.ElementSpec("string", (), fmt.ENCODING_BYTES_LIST),
        fmt.TARGET_KEY: fmt.ElementSpec("int64", (), fmt.ENCODING_INT64_LIST),
        fmt.NUM_CLASSES_KEY: fmt.ElementSpec("int64", (), fmt.ENCODING_INT64_LIST),
        fmt.FILEPATH_KEY: fmt.ElementSpec("string", (), fmt.ENCODING_BYTES_LIST),
        fmt.INDEX_KEY: fmt.ElementSpec("int64", (), fmt.ENCODING_INT64_LIST),
        fmt.WIN_START_KEY: fmt.ElementSpec("int64", (), fmt.ENCODING_INT64_LIST),
        fmt.SIGNAL_KEY: fmt.ElementSpec(signal_dtype, (win_len,), fmt.ENCODING_RAW),
        fmt.SAMPLE_RATE_KEY: fmt.ElementSpec("int32", (), fmt.ENCODING_INT64_LIST),
        fmt.CHANNEL_KEY: fmt.ElementSpec("int64", (), fmt.ENCODING_INT64_LIST),
    }


def _signal(rng: np.random.Generator, win_len: int, dtype: str) -> np.ndarray:
    if dtype == "float32":
        return rng.uniform(-1, 1, win_len).astype(np.float32)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, win_len, endpoint=True, dtype=dtype)


def _raw_feature_bytes(given: np.ndarray, spec: fmt.ElementSpec) -> bytes:
    """The bytes the record job stores for a float feature: its own encoder's output."""
    import pyarrow as pa

    from transforms.stages.examples import raw_float_rows

    column = pa.array([np.asarray(given, np.float32).reshape(-1)], pa.list_(pa.float32()))
    rows = raw_float_rows(FEATURE, column, stored_dtype=spec.stored_dtype or "float32")
    return rows.to_pylist()[0][0]


def _example(
    element: Mapping[str, np.ndarray],
    specs: Mapping[str, fmt.ElementSpec],
    raw: Mapping[str, bytes],
) -> bytes:
    """A serialized Example of `element`'s stored keys; `raw`: bytes of raw keys given whole."""
    feature = {}
    for key, spec in specs.items():
        if not spec.stored:
            continue
        value = element[key]
        if key in raw:
            feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[raw[key]]))
        elif spec.encoding == fmt.ENCODING_RAW:
            data = np.asarray(value).astype(np.dtype(spec.dtype).newbyteorder("<")).tobytes()
            feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[data]))
        elif spec.encoding == fmt.ENCODING_BYTES_LIST:
            feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        elif spec.encoding == fmt.ENCODING_INT64_LIST:
            ints = np.asarray(value).reshape(-1).tolist()
            feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=ints))
        else:
            floats = np.asarray(value, np.float32).reshape(-1).tolist()
            feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=floats))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_dataset(
    directory: str | os.PathLike,
    *,
    num_examples_per_shard: Sequence[int] | Mapping[str, Sequence[int]] = (5, 7, 3),
    split_names: Sequence[str] | None = None,
    compression: str = "GZIP",
    win_len: int = 64,
    signal_dtype: str = "int16",
    with_features: bool = True,
    format_version: int = fmt.FORMAT_VERSION,
    feature_dtype: str = "float32",
    seed: int = 0,
) -> dict[str, Any]:
    """Write shards + manifest.json of a small random dataset into `directory`.

    Args:
      directory: output directory (created).
      num_examples_per_shard: records per shard, for every split (a sequence) or per split
        (a mapping split -> sequence).
      split_names: split names; None: one split "all" (shard names without a split).
      compression: NONE, GZIP or ZLIB.
      win_len: samples per window (``signal`` shape).
      signal_dtype: int16, int32 or float32.
      with_features: also the ``log_mel`` feature (float32 values like a log-mel's, mean about
        -3, variance about 6) and ``log_mel_norm``, its z-score with the dataset's statistics.
      format_version: 5 (version 4 with one commit), 4 (the layout of module docstring), 3
        (the same without record
        offsets), 2 (also with ``files`` and
        ``errors`` in the manifest) or 1 (the version-1 layout).
      feature_dtype: float32, float16 or bfloat16: how versions 2 and 3 store ``log_mel``.
      seed: random seed of the contents.

    Returns:
      ``{"manifest": dict, "files": [entry], "errors": [entry], "elements": {split: [element]},
      "shards": {split: [path]}, "given": {index: log_mel}}`` ("manifest" as written: from
      version 3 without the lists, which "files" and "errors" hold for every version); each
      element is a dict of numpy values (bytes for strings) in shard-then-record order, holding
      what a reader must return (``log_mel``: the float32 values the writer was given in
      ``given``, rounded by `stored_values`; ``log_mel_norm``: the numpy z-score of that).
      Every element's ``index`` (input file index) is unique within the dataset, so
      ``(index, win_start_idx)`` identifies it.
    """
    if format_version == 1 and feature_dtype != "float32":
        raise ValueError("format version 1 stores features as float32 lists only")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    splits = list(split_names) if split_names is not None else [fmt.ALL_SPLIT]
    if isinstance(num_examples_per_shard, Mapping):
        counts = {split: list(num_examples_per_shard[split]) for split in splits}
    else:
        counts = {split: list(num_examples_per_shard) for split in splits}
    shards, given, files = _random_elements(
        rng, counts, win_len=win_len, signal_dtype=signal_dtype, with_features=with_features
    )
    specs = _element_specs(win_len=win_len, signal_dtype=signal_dtype)
    store = _feature_store(given, specs, format_version=format_version, feature_dtype=feature_dtype)
    elements, shard_paths, manifest_splits = _write_shards(
        directory,
        shards,
        specs,
        compression=compression,
        store=store,
        offsets=format_version >= fmt.OFFSETS_VERSION,
    )
    manifest, errors = _write_metadata(
        directory,
        specs,
        manifest_splits,
        files,
        format_version=format_version,
        compression=compression,
        win_len=win_len,
        feature_dtype=feature_dtype,
    )
    return {
        "manifest": manifest,
        "files": files,
        "errors": errors,
        "elements": elements,
        "shards": shard_paths,
        "given": given,
    }


def latest_manifest(directory: str | os.PathLike) -> dict[str, Any]:
    """The latest version's manifest as JSON: manifest.json, or ``manifests/<v+1>.json`` while
    one exists past it (read here with json, not with `replay`)."""
    directory = os.fspath(directory)
    with open(os.path.join(directory, fmt.MANIFEST_FILENAME)) as f:
        manifest = json.load(f)
    while True:
        following = os.path.join(directory, "manifests", f"{manifest['dataset_version'] + 1}.json")
        if not os.path.exists(following):
            return manifest
        with open(following) as f:
            manifest = json.load(f)


def append_commit(
    directory: str | os.PathLike,
    *,
    token: str,
    num_examples_per_shard: Sequence[int] | Mapping[str, Sequence[int]] = (4, 2),
    seed: int = 1,
    update_pointer: bool = True,
    num_errors: int = 1,
) -> dict[str, Any]:
    """Appends a dataset version to the format version 5 dataset in `directory`, as the record
    job's ``--append`` does (module docstring): new random records, with the latest version's
    element specs (the same z-score statistics), in ``appends/<token>/``.

    Args:
      directory: a dataset `write_dataset` wrote with ``format_version=5`` (appended to or not).
      token: the append's directory name, ``appends/<token>``.
      num_examples_per_shard: records per shard of this commit, for every split or per split.
      seed: random seed of the contents.
      update_pointer: replace manifest.json after the commit point (False: an append killed
        between creating ``manifests/<v+1>.json`` and replacing manifest.json).
      num_errors: entries of this commit's errors table.

    Returns:
      ``{"manifest", "files", "errors", "elements", "shards", "given"}`` as `write_dataset`,
      of this commit only ("manifest": the new version's whole manifest).
    """
    directory = os.fspath(directory)
    previous = latest_manifest(directory)
    version = previous["dataset_version"] + 1
    commit_dir = f"appends/{token}"
    splits = list(previous["splits"])
    if isinstance(num_examples_per_shard, Mapping):
        counts = {split: list(num_examples_per_shard.get(split, ())) for split in splits}
    else:
        counts = {split: list(num_examples_per_shard) for split in splits}
    specs = fmt.element_specs(previous)
    win_len = specs[fmt.SIGNAL_KEY].shape[0]
    rng = np.random.default_rng(seed)
    shards, given, files = _random_elements(
        rng,
        counts,
        win_len=win_len,
        signal_dtype=specs[fmt.SIGNAL_KEY].dtype,
        with_features=FEATURE in specs,
        first_index=previous["num_files"],
    )
    store = _append_store(given, specs, feature_dtype=previous["params"].get("feature_dtype"))
    elements, shard_paths, new_splits = _write_shards(
        directory,
        shards,
        specs,
        compression=previous["compression"],
        store=store,
        offsets=True,
        commit_dir=commit_dir,
    )
    errors = [{"path": f"/data/bad-{token}-{i}.wav", "reason": "empty"} for i in range(num_errors)]
    tables = write_tables(os.path.join(directory, commit_dir), files=files, errors=errors)
    manifest = json.loads(json.dumps(previous))
    added = sum(len(e) for e in elements.values())
    for split, entry in new_splits.items():
        manifest["splits"][split]["shards"] += entry["shards"]
        manifest["splits"][split]["num_examples"] += entry["num_examples"]
    manifest["num_examples"] += added
    manifest["num_files"] += tables["num_files"]
    manifest["num_errors"] += tables["num_errors"]
    manifest["dataset_version"] = version
    manifest["created_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    manifest["commits"].append(
        {
            "version": version,
            "dir": commit_dir,
            "mode": "append",
            "created_utc": manifest["created_utc"],
            "input_pattern": f"/data/{token}/*.wav",
            "num_files": tables["num_files"],
            "num_errors": tables["num_errors"],
            "num_examples": added,
            "tables": tables["tables"],
        }
    )
    commit_manifest(directory, manifest, previous=previous, update_pointer=update_pointer)
    return {
        "manifest": manifest,
        "files": files,
        "errors": errors,
        "elements": elements,
        "shards": shard_paths,
        "given": given,
    }


def commit_manifest(
    directory: str | os.PathLike,
    manifest: Mapping[str, Any],
    *,
    previous: Mapping[str, Any],
    update_pointer: bool = True,
) -> None:
    """Commits `manifest` (version v+1) over `previous` (version v), as an append does:
    ``manifests/<v>.json`` when absent, ``manifests/<v+1>.json`` created exclusively (the
    commit point: written aside, then hard-linked into place, so it appears whole and only once),
    then manifest.json replaced with the same bytes (with `update_pointer`)."""
    directory = os.fspath(directory)
    stored = os.path.join(directory, "manifests")
    os.makedirs(stored, exist_ok=True)
    old = os.path.join(stored, f"{previous['dataset_version']}.json")
    if not os.path.exists(old):
        with open(old, "x") as f:
            json.dump(previous, f, indent=1)
    data = json.dumps(manifest, indent=1)
    temporary = os.path.join(directory, f".manifest-{manifest['dataset_version']}.tmp")
    with open(temporary, "w") as f:
        f.write(data)
    # The commit point: the file appears whole, and only if no other append made it first.
    os.link(temporary, os.path.join(stored, f"{manifest['dataset_version']}.json"))
    os.remove(temporary)
    if update_pointer:
        temporary = os.path.join(directory, fmt.MANIFEST_FILENAME + ".tmp")
        with open(temporary, "w") as f:
            f.write(data)
        os.replace(temporary, os.path.join(directory, fmt.MANIFEST_FILENAME))


def _append_store(
    given: dict[int, np.ndarray], specs: Mapping[str, fmt.ElementSpec], *, feature_dtype: Any
) -> Callable[[dict[str, Any]], dict[str, bytes]]:
    """`_feature_store`'s ``store`` for an appended commit: the feature keys with the dataset's
    own z-score statistics (fixed by version 1)."""
    if not given:
        return lambda element: {}
    z = specs[NORM].z_score

    def store(element: dict[str, Any]) -> dict[str, bytes]:
        mel = given[int(element[fmt.INDEX_KEY])]
        element[FEATURE] = stored_values(mel, feature_dtype or "float32")
        element[NORM] = z_score(element[FEATURE], z.mean, z.var)
        return {FEATURE: _raw_feature_bytes(mel, specs[FEATURE])}

    return store


def _random_elements(
    rng: np.random.Generator,
    counts: Mapping[str, Sequence[int]],
    *,
    win_len: int,
    signal_dtype: str,
    with_features: bool,
    first_index: int = 0,
) -> tuple[dict[str, list[list[dict[str, Any]]]], dict[int, np.ndarray], list[dict[str, Any]]]:
    """Random elements without their feature keys, shard by shard: ``({split: [[element]]},
    given, files)``: `given` the log_mel of each index as the writer is given it (with
    `with_features`), `files` a files-table entry per element; indices from `first_index`."""
    shards: dict[str, list[list[dict[str, Any]]]] = {}  # split -> shard -> elements
    given: dict[int, np.ndarray] = {}  # index -> log_mel as the writer is given it
    files: list[dict[str, Any]] = []
    for split, split_counts in counts.items():
        shards[split] = []
        for count in split_counts:
            shards[split].append([])
            for _ in range(count):
                index = first_index + len(files)
                target = int(rng.integers(len(CLASSES)))
                element = {
                    fmt.CLASS_KEY: CLASSES[target].encode(),
                    fmt.TARGET_KEY: np.int64(target),
                    fmt.NUM_CLASSES_KEY: np.int64(len(CLASSES)),
                    fmt.FILEPATH_KEY: f"/data/{CLASSES[target]}/{index}.wav".encode(),
                    fmt.INDEX_KEY: np.int64(index),
                    fmt.WIN_START_KEY: np.int64(rng.integers(0, 10) * win_len),
                    fmt.SIGNAL_KEY: _signal(rng, win_len, signal_dtype),
                    fmt.SAMPLE_RATE_KEY: np.int32(SAMPLE_RATE),
                    fmt.CHANNEL_KEY: np.int64(0),
                }
                if with_features:
                    given[index] = rng.normal(-3.0, 2.5, FEATURE_SHAPE).astype(np.float32)
                shards[split][-1].append(element)
                files.append(_file_entry(element, split=split, win_len=win_len))
    return shards, given, files


def _file_entry(element: Mapping[str, Any], *, split: str, win_len: int) -> dict[str, Any]:
    """The files-table entry of the one-window input file of `element`."""
    return {
        "path": element[fmt.FILEPATH_KEY].decode(),
        "index": int(element[fmt.INDEX_KEY]),
        "label": element[fmt.CLASS_KEY].decode(),
        "split": split,
        "num_windows": 1,
        "sample_rate": SAMPLE_RATE,
        "num_frames": win_len,
        "num_channels": 1,
        "subtype": "PCM_16",
        "full_scale": 32768.0,
    }


def _feature_store(
    given: dict[int, np.ndarray],
    specs: dict[str, fmt.ElementSpec],
    *,
    format_version: int,
    feature_dtype: str,
) -> Callable[[dict[str, Any]], dict[str, bytes]]:
    """Adds the feature specs to `specs` (statistics: those of `given`, whose first values
    become the rounding ties); returns ``store(element)``, which sets an element's feature
    keys to what a reader must return and gives the bytes of its raw keys (none without
    features)."""
    if not given:
        return lambda element: {}
    given[0].flat[:4] = (*BFLOAT16_TIES, *FLOAT16_TIES)
    values = np.stack(list(given.values())).astype(np.float64)
    # The analysis statistics, as float32 values (the manifest holds them exactly).
    mean, var = float(np.float32(values.mean())), float(np.float32(values.var()))
    specs.update(
        _feature_specs(
            format_version=format_version, feature_dtype=feature_dtype, mean=mean, var=var
        )
    )

    def store(element: dict[str, Any]) -> dict[str, bytes]:
        raw = {}
        mel = given[int(element[fmt.INDEX_KEY])]
        if format_version == 1:
            element[FEATURE] = mel
        else:
            raw[FEATURE] = _raw_feature_bytes(mel, specs[FEATURE])
            element[FEATURE] = stored_values(mel, feature_dtype)
        element[NORM] = z_score(element[FEATURE], mean, var)
        return raw

    return store


def _write_shards(
    directory: str,
    shards: Mapping[str, Sequence[Sequence[dict[str, Any]]]],
    specs: Mapping[str, fmt.ElementSpec],
    *,
    compression: str,
    store: Callable[[dict[str, Any]], dict[str, bytes]],
    offsets: bool,
    commit_dir: str = "",
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[str]], dict[str, Any]]:
    """Writes every shard of `shards` (with `offsets`, also its record offsets file, each
    record's start counted here from the records' lengths) into `commit_dir` of `directory`,
    each shard named for its index among that commit's shards of its split; returns
    ``(elements, shard paths, manifest splits)``, each by split."""
    elements: dict[str, list[dict[str, Any]]] = {}
    shard_paths: dict[str, list[str]] = {}
    manifest_splits: dict[str, Any] = {}
    for split, split_shards in shards.items():
        elements[split], shard_paths[split], entries = [], [], []
        for shard_index, shard in enumerate(split_shards):
            filename = fmt.shard_filename(
                name=NAME,
                split=split,
                index=shard_index,
                num_shards=len(split_shards),
                compression=compression,
            )
            if commit_dir:  # the manifest's name: "<dir>/<name>", written by hand here
                filename = f"{commit_dir}/{filename}"
            path = os.path.join(directory, filename)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            starts, position = [], 0
            with tf.io.TFRecordWriter(path, options=fmt.tf_compression_type(compression)) as w:
                for element in shard:
                    record = _example(element, specs, store(element))
                    w.write(record)
                    starts.append(position)
                    position += len(record) + 16  # TFRecord framing: 8 + 4 before, 4 after
                    elements[split].append(element)
            shard_paths[split].append(path)
            entry = {
                "filename": filename,
                "num_examples": len(shard),
                "num_bytes": os.path.getsize(path),
            }
            if offsets:
                data = struct.pack(f"<{len(starts)}Q", *starts)
                offsets_dir = os.path.join(directory, commit_dir, fmt.OFFSETS_DIR)
                os.makedirs(offsets_dir, exist_ok=True)
                name = filename.rsplit("/", 1)[-1]
                with open(os.path.join(offsets_dir, name + fmt.OFFSETS_SUFFIX), "wb") as f:
                    f.write(data)
                entry["offsets"] = {
                    "num_bytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            entries.append(entry)
        manifest_splits[split] = {"num_examples": len(elements[split]), "shards": entries}
    return elements, shard_paths, manifest_splits


def _write_metadata(
    directory: str,
    specs: Mapping[str, fmt.ElementSpec],
    manifest_splits: Mapping[str, Any],
    files: list[dict[str, Any]],
    *,
    format_version: int,
    compression: str,
    win_len: int,
    feature_dtype: str,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Writes the tables (format version 3), schema.pbtxt and manifest.json; returns the
    manifest as written and the errors entries."""
    params = {"win_len": win_len, "hop_len": win_len, "features": [FEATURE]}
    if format_version >= 2:
        params["feature_dtype"] = feature_dtype
    manifest = {
        "format": fmt.FORMAT_NAME,
        "format_version": format_version,
        "complete": True,
        "name": NAME,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "compression": compression,
        "elements": {key: spec.to_json() for key, spec in specs.items()},
        "num_examples": len(files),
        "classes": list(CLASSES),
        "num_classes": len(CLASSES),
        "splits": manifest_splits,
        "params": params,
        "versions": {"audiorecords": "0.1.0", "tensorflow": tf.__version__},
    }
    errors = [{"path": "/data/bad.wav", "reason": "not a RIFF file"}]
    if format_version >= fmt.TABLES_VERSION:
        tables = write_tables(directory, files=files, errors=errors)
    else:
        tables = {"files": files, "errors": errors}
    if format_version >= 5:  # one commit: version 1, the tables' counts and digests in it
        commit = {
            "version": 1,
            "dir": "",
            "mode": "record",
            "created_utc": manifest["created_utc"],
            "input_pattern": "/data/*/*.wav",
            "num_files": tables["num_files"],
            "num_errors": tables["num_errors"],
            "num_examples": manifest["num_examples"],
            "tables": tables.pop("tables"),
        }
        tables.update(dataset_version=1, commits=[commit])
    params = manifest.pop("params")
    manifest.update(tables, params=params, versions=manifest.pop("versions"))  # writer's order
    write_schema(directory, specs)
    write_manifest(directory, manifest)
    return manifest, errors


def write_tables(
    directory: str | os.PathLike,
    *,
    files: Sequence[Mapping[str, Any]],
    errors: Sequence[Mapping[str, Any]],
    lines: Mapping[str, bytes] | None = None,
) -> dict[str, Any]:
    """Writes files.jsonl and errors.jsonl (format version 3) of `files` / `errors` (or the
    given raw `lines` of a table) into `directory`; returns the manifest fields that describe
    them: ``num_files``, ``num_errors`` and ``tables`` (sizes and SHA-256 computed here with
    hashlib, not with the writer's `format.table_digest`)."""
    import hashlib

    entries = {"files": files, "errors": errors}
    fields: dict[str, Any] = {"num_files": len(files), "num_errors": len(errors), "tables": {}}
    for key, filename in (("files", fmt.FILES_TABLE), ("errors", fmt.ERRORS_TABLE)):
        data = (lines or {}).get(key)
        if data is None:
            data = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries[key])
            data = data.encode("ascii")
        with open(os.path.join(os.fspath(directory), filename), "wb") as f:
            f.write(data)
        fields["tables"][key] = {
            "num_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    return fields


def set_tables(manifest: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """Puts `write_tables`' fields of the root tables into `manifest`: at its top (format
    versions 3, 4), or into version 1's commit with the top-level counts the sums over the
    commits (version 5)."""
    if manifest["format_version"] < 5:
        manifest.update(fields)
        return
    manifest["commits"][0].update(fields)
    for key in ("num_files", "num_errors"):
        manifest[key] = sum(commit[key] for commit in manifest["commits"])


def write_schema(directory: str | os.PathLike, specs: Mapping[str, fmt.ElementSpec]) -> None:
    """Write `directory`/schema.pbtxt: a tensorflow_metadata Schema of the stored keys."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    kinds = {
        fmt.ENCODING_RAW: schema_pb2.BYTES,
        fmt.ENCODING_BYTES_LIST: schema_pb2.BYTES,
        fmt.ENCODING_INT64_LIST: schema_pb2.INT,
        fmt.ENCODING_FLOAT_LIST: schema_pb2.FLOAT,
    }
    schema = schema_pb2.Schema()
    for key, spec in specs.items():
        if not spec.stored:  # a z_score key is computed by the reader: not in the records
            continue
        feature = schema.feature.add(name=key, type=kinds[spec.encoding])
        shape = spec.shape if spec.encoding != fmt.ENCODING_RAW else ()
        for dim in shape:
            feature.shape.dim.add(size=dim)
        if not shape:
            feature.shape.SetInParent()
    with open(os.path.join(os.fspath(directory), fmt.SCHEMA_FILENAME), "w") as f:
        f.write(text_format.MessageToString(schema))


def write_manifest(directory: str | os.PathLike, manifest: Mapping[str, Any]) -> None:
    """(Re)write `directory`/manifest.json."""
    with open(os.path.join(os.fspath(directory), fmt.MANIFEST_FILENAME), "w") as f:
        json.dump(manifest, f, indent=1)


def flip_byte(path: str | os.PathLike, offset: int) -> None:
    """Flip the lowest bit of byte `offset` of the file at `path`, in place (a bit rot)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def rewrite_record(path: str | os.PathLike, index: int, change) -> tuple[str, int]:
    """Replace record `index` (`open_records` numbering) of `path`'s dataset by
    ``change(data)`` (same length) with valid CRCs, so only its content is wrong; returns (its
    shard's path, the record in the shard)."""
    from replay.records import FRAME_BYTES, masked_crc32c, open_records

    where = open_records(str(path)).locate(index)
    with open(where.shard.path, "r+b") as f:
        f.seek(where.start)
        frame = f.read(where.end - where.start)
        data = change(frame[12:-4])
        assert len(data) == len(frame) - FRAME_BYTES
        f.seek(where.start + 12)
        f.write(data + struct.pack("<I", masked_crc32c(data)))
    return where.shard.path, where.record
