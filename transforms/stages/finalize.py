"""Finalisation: manifest (built by a pure function), schemas, feature_fn/; written last.

`finalize` runs once, after every shard and the transform graph are written (it takes them as
side inputs). It fills in shards no window hashed to (empty files, so names stay ``-of-N``),
writes ``schema.pbtxt``, the raw schema ``metadata/schema.pbtxt`` (where
``tft.TFTransformOutput`` looks for it: the output directory is a standard TFT output) and the
``feature_fn`` SavedModel, the source tables ``files.jsonl`` / ``errors.jsonl`` (format version 3)
and, last, ``manifest.json``, each under a temporary name then renamed: a directory with a
manifest is a complete dataset. The source tables' lines and files are
`transforms.stages.source_tables`'.
"""

from __future__ import annotations

import datetime
import json
import platform
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from replay import format as fmt
from transforms.audio import features as feats
from transforms.audio import features_tf
from transforms.spec.layout import RecordLayout
from transforms.spec.types import ShardSpec
from transforms.stages import atomic
from transforms.stages.moments import to_json as moments_json
from transforms.stages.preprocessing import CLASS_VOCABULARY, element_schema, z_score_scope
from transforms.stages.source_tables import error_lines, file_lines, write_table
from transforms.stages.write_shards import write_shard

SHARD_ENTRY_KEYS = ("filename", "num_examples", "num_bytes", "offsets")  # a manifest shard entry


def library_versions() -> dict[str, str]:
    """Versions of the stack that wrote a dataset (recorded in the manifest)."""
    from importlib import metadata

    import apache_beam
    import tensorflow
    import tensorflow_transform

    try:
        own = metadata.version("audiorecords")
    except metadata.PackageNotFoundError:  # running from a source tree without `pip install`
        own = "dev"
    return {
        "audiorecords": own,
        "apache_beam": apache_beam.__version__,
        "tensorflow": tensorflow.__version__,
        "tensorflow_transform": tensorflow_transform.__version__,
        "python": platform.python_version(),
    }


def build_manifest(
    *,
    name: str,
    compression: str,
    elements: Mapping[str, fmt.ElementSpec],
    classes: Sequence[str],
    shards: Sequence[Mapping[str, Any]],
    num_files: int,
    num_errors: int,
    table_digests: Mapping[str, Mapping[str, Any]],
    params: Mapping[str, Any],
    versions: Mapping[str, str],
    created_utc: str,
    split_names: Sequence[str] = (),
    analyzed_splits: Sequence[str] = (),
    moments: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest.json content (see replay/format.py), deterministic apart from created_utc:
    dataset version 1, one commit.

    Splits appear in `split_names` order (the order of ``--splits``), then any others sorted.
    `analyzed_splits` are the splits TFT's statistics were computed on. The source tables hold
    `num_files` and `num_errors` entries; `table_digests` are their files' sizes and SHA-256
    (`format.table_digest`). `moments` ({feature: Moments} of the analysed rows) are stored
    in the commit, so that an append can recompute the statistics of the union.
    """
    splits: dict[str, dict[str, Any]] = {
        name: {"num_examples": 0, "shards": []} for name in split_names
    }
    for shard in sorted(shards, key=lambda s: (s["split"], s["shard"])):
        split = splits.setdefault(shard["split"], {"num_examples": 0, "shards": []})
        split["num_examples"] += shard["num_examples"]
        split["shards"].append({k: shard[k] for k in SHARD_ENTRY_KEYS})
    num_examples = sum(s["num_examples"] for s in splits.values())
    commit = {
        "version": 1,
        "dir": "",
        "mode": fmt.RECORD_MODE,
        "created_utc": created_utc,
        "input_pattern": str(params.get("input_pattern", "")),
        "num_files": num_files,
        "num_errors": num_errors,
        "num_examples": num_examples,
        "tables": {key: dict(table_digests[key]) for key in fmt.TABLE_FILENAMES},
        "moments": moments_json(moments or {}),
    }
    return {
        "format": fmt.FORMAT_NAME,
        "format_version": fmt.FORMAT_VERSION,
        "complete": True,
        "name": name,
        "created_utc": created_utc,
        "compression": compression,
        "elements": {k: spec.to_json() for k, spec in elements.items()},
        "num_examples": num_examples,
        "classes": list(classes),
        "num_classes": len(classes),
        "splits": splits,
        "analyzed_splits": list(analyzed_splits),
        "num_files": num_files,
        "num_errors": num_errors,
        "dataset_version": 1,
        "commits": [commit],
        "params": dict(params),
        "versions": dict(versions),
    }


def z_score_statistics(
    loaded: Any, layout: RecordLayout, *, where: str
) -> dict[str, tuple[float, float]]:
    """{feature: (mean, var)}: the statistics TFT's analysis put into the loaded transform_fn/.

    After the analysis, each ``scale_to_z_score`` reads its mean and variance as constants the
    transform function captures; the capture placeholders are named after their consumers in
    the feature's name scope (``z_score_<feature>/sub`` takes the mean, ``.../Sqrt`` the
    variance). Reading them back from the graph gives exactly the float32 values the graph uses,
    so the reader's z-score is bit for bit the graph's (tests compare with TFT's transform).

    Raises:
      RuntimeError: a statistic is not found (a TFT whose graph this does not know).
    """
    function = loaded.transform_fn
    captured = {}
    for fn in getattr(function, "concrete_functions", None) or [function]:
        names = [t.name.split(":")[0] for t in fn.graph.inputs[-len(fn.captured_inputs) :]]
        captured.update(zip(names, fn.captured_inputs, strict=True))
    statistics = {}
    for feature in layout.feature_shapes:
        scope = z_score_scope(feature)
        values = []
        for placeholder in (f"{scope}_sub_y", f"{scope}_sqrt_x"):
            tensor = captured.get(placeholder)
            if tensor is None or tensor.dtype.name != "float32" or tensor.shape.rank != 0:
                raise RuntimeError(
                    f"{where}: no float32 statistic {placeholder!r} in the transform graph "
                    f"(captures: {sorted(captured)})"
                )
            values.append(float(tensor.numpy()))  # a float32 value: exact as a Python float
        statistics[feature] = (values[0], values[1])
    return statistics


def read_z_score_statistics(
    output_dir: str, layout: RecordLayout
) -> dict[str, tuple[float, float]]:
    """{feature: (mean, var)} from ``transform_fn/`` (`z_score_statistics`), read once, when
    the manifest is built."""
    import tensorflow as tf

    loaded = tf.saved_model.load(f"{output_dir}/{fmt.TRANSFORM_FN_DIR}")
    return z_score_statistics(loaded, layout, where=output_dir)


def read_vocabulary(output_dir: str) -> list[str]:
    """The class vocabulary TFT wrote, in `target` order ([] when there is none)."""
    import tensorflow as tf

    path = f"{output_dir}/{fmt.TRANSFORM_FN_DIR}/assets/{CLASS_VOCABULARY}"
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path, "rb") as fh:
        return [line.decode("utf-8") for line in fh.read().splitlines()]


def export_feature_fn(
    output_dir: str, *, config: feats.FeatureConfig, win_len: int, sample_rate: int
) -> None:
    """Saves the serving graph raw waveform [None, win_len] -> raw features (feature_fn/)."""
    import tensorflow as tf

    module = features_tf.tf_feature_module(config, win_len=win_len, sample_rate=sample_rate)
    tf.saved_model.save(module, f"{output_dir}/{fmt.FEATURE_FN_DIR}")


def finalize(
    _,
    *,
    spec: ShardSpec,
    layout: RecordLayout,
    feature_config: feats.FeatureConfig,
    win_len: int,
    params: Mapping[str, Any],
    shards: Sequence[Mapping[str, Any]],
    files: Iterable[bytes],
    errors: Iterable[Mapping[str, Any]],
    compression: str,
    signal_dtype: str,
    num_shards: Mapping[str, int],
    classes: Sequence[str],
    analyzed_splits: Sequence[str],
    transform_written: Any = None,
    moments: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Writes the empty shards, the schemas, feature_fn/ and, last, manifest.json.

    `files`: the read stage's per-segment summaries (`file_lines`); `errors`: {"path",
    "reason"} of the files that failed, in planning or reading, and bad annotation rows.
    `moments`: {feature: Moments} of the analysed rows, stored in the manifest.

    Raises:
      RuntimeError: TFT's class vocabulary differs from the planned `classes` (a bug: the
        manifest would contradict the stored ``target`` ids).
    """
    import tensorflow as tf

    del transform_written  # only orders this step after WriteTransformFn
    errors = list(errors)
    lines = {"errors": error_lines(errors)}
    lines["files"], rates = file_lines(files, failed={e["path"] for e in errors})
    shards = _with_empty_shards(shards, spec=spec, num_shards=num_shards, compression=compression)
    out = spec.output_dir.rstrip("/")
    statistics = read_z_score_statistics(out, layout) if layout.normalize else None
    elements = layout.element_specs(
        signal_dtype=signal_dtype, win_len=win_len, statistics=statistics
    )
    if feature_config.names and len(rates) == 1:
        export_feature_fn(out, config=feature_config, win_len=win_len, sample_rate=rates[0])
    with tf.io.gfile.GFile(f"{out}/{fmt.SCHEMA_FILENAME}", "w") as fh:
        fh.write(_text_proto(element_schema(elements)))
    write_raw_metadata(out, layout=layout, elements=elements)
    vocabulary = read_vocabulary(out)
    if classes and vocabulary != list(classes):
        raise RuntimeError(f"{out}: TFT class vocabulary {vocabulary} != planned {list(classes)}")
    digests = {  # the tables before the manifest, which names them
        key: write_table(out, filename, lines[key]) for key, filename in fmt.TABLE_FILENAMES.items()
    }
    manifest = build_manifest(
        name=spec.name,
        compression=compression,
        elements=elements,
        classes=classes,
        shards=shards,
        num_files=len(lines["files"]),
        num_errors=len(lines["errors"]),
        table_digests=digests,
        params=params,
        versions=library_versions(),
        created_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        split_names=list(num_shards),
        analyzed_splits=analyzed_splits,
        moments=moments,
    )
    text = json.dumps(manifest, indent=1, sort_keys=False)
    _write_atomically(out, fmt.MANIFEST_FILENAME, text.encode("utf-8"))
    return {k: manifest[k] for k in ("num_examples", "compression", "num_classes")}


def _with_empty_shards(
    shards: Iterable[Mapping[str, Any]],
    *,
    spec: ShardSpec,
    num_shards: Mapping[str, int],
    compression: str,
) -> list[Mapping[str, Any]]:
    """`shards` (the write stage's), then an empty shard written for each shard of `num_shards`
    no row went to, split by split."""
    shards = list(shards)
    for split, count in sorted(num_shards.items()):
        present = {s["shard"] for s in shards if s["split"] == split}
        for shard in range(count):
            if shard not in present:
                shards.append(
                    write_shard(
                        spec=spec,
                        split=split,
                        shard=shard,
                        num_shards=count,
                        ranges=[],
                        num_records=0,
                        compression=compression,
                    )
                )
    return shards


def _write_atomically(out: str, filename: str, data: bytes) -> None:
    """`out`/`filename` := `data`, written under ``.tmp/`` and renamed into place."""
    atomic.write_bytes_atomically(f"{out}/{filename}", data, tmp=f"{out}/.tmp/{filename}")


def write_raw_metadata(
    output_dir: str, *, layout: RecordLayout, elements: Mapping[str, fmt.ElementSpec]
) -> None:
    """Writes ``metadata/schema.pbtxt``: the schema of the raw keys TFT transforms.

    Those are the transform graph's inputs, ``class`` and the raw features (the other stored keys
    pass TFT by untransformed; the transform graph refuses them as inputs), as the graph takes
    them: ``TFTransformOutput.raw_feature_spec()`` is what ``transform_raw_features`` takes, which
    `replay_dataset` gives (``features=["class", "log_mel"]``). The shards store the features as
    raw bytes, so parse them with replay, not with ``raw_feature_spec()``.
    """
    import tensorflow as tf

    raw_keys = set(layout.tensor_representations())
    raw = {key: spec for key, spec in elements.items() if key in raw_keys}
    # The graph takes float32 tensors; the shards store them as raw bytes (format version 2), so
    # the raw schema describes the graph's inputs, as replay decodes them.
    raw = {
        key: fmt.ElementSpec(spec.dtype, spec.shape, fmt.ENCODING_FLOAT_LIST)
        if spec.dtype == "float32"
        else spec
        for key, spec in raw.items()
    }
    tf.io.gfile.makedirs(f"{output_dir}/{fmt.RAW_METADATA_DIR}")
    with tf.io.gfile.GFile(f"{output_dir}/{fmt.RAW_METADATA_DIR}/{fmt.SCHEMA_FILENAME}", "w") as fh:
        fh.write(_text_proto(element_schema(raw)))


def _text_proto(message) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(message)
