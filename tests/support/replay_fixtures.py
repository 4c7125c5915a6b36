"""Write small audiorecords datasets exactly per `replay.format`, for the `replay` tests.

Independent of the record pipeline: plain `tf.io.TFRecordWriter` + `tf.train.Example`.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from replay import format as fmt

CLASSES = ("cat", "dog", "owl")
SAMPLE_RATE = 16000
FEATURE_SHAPE = (4, 8)  # log_mel [frames, bins]
NAME = "audiorecords"


def _element_specs(
    *, win_len: int, signal_dtype: str, with_features: bool
) -> dict[str, fmt.ElementSpec]:
    specs = {
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
    if with_features:
        specs["log_mel"] = fmt.ElementSpec("float32", FEATURE_SHAPE, fmt.ENCODING_FLOAT_LIST)
        specs["log_mel" + fmt.NORMALIZED_SUFFIX] = fmt.ElementSpec(
            "float32", FEATURE_SHAPE, fmt.ENCODING_FLOAT_LIST
        )
    return specs


def _signal(rng: np.random.Generator, win_len: int, dtype: str) -> np.ndarray:
    if dtype == "float32":
        return rng.uniform(-1, 1, win_len).astype(np.float32)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, win_len, endpoint=True, dtype=dtype)


def _example(element: Mapping[str, np.ndarray], specs: Mapping[str, fmt.ElementSpec]) -> bytes:
    feature = {}
    for key, spec in specs.items():
        value = element[key]
        if spec.encoding == fmt.ENCODING_RAW:
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
      with_features: also write ``log_mel`` and ``log_mel_norm`` float features.
      seed: random seed of the contents.

    Returns:
      ``{"manifest": dict, "elements": {split: [element]}, "shards": {split: [path]}}``; each
      element is a dict of numpy values (bytes for strings) in shard-then-record order, and
      every element's ``index`` (input file index) is unique within the dataset, so
      ``(index, win_start_idx)`` identifies it.
    """
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    specs = _element_specs(win_len=win_len, signal_dtype=signal_dtype, with_features=with_features)
    splits = list(split_names) if split_names is not None else [fmt.ALL_SPLIT]
    if isinstance(num_examples_per_shard, Mapping):
        counts = {split: list(num_examples_per_shard[split]) for split in splits}
    else:
        counts = {split: list(num_examples_per_shard) for split in splits}

    elements: dict[str, list[dict[str, Any]]] = {}
    shard_paths: dict[str, list[str]] = {}
    manifest_splits: dict[str, Any] = {}
    files: list[dict[str, Any]] = []
    next_index = 0
    for split in splits:
        elements[split], shard_paths[split], entries = [], [], []
        for shard_index, count in enumerate(counts[split]):
            filename = fmt.shard_filename(
                name=NAME,
                split=split,
                index=shard_index,
                num_shards=len(counts[split]),
                compression=compression,
            )
            path = os.path.join(directory, filename)
            with tf.io.TFRecordWriter(path, options=fmt.tf_compression_type(compression)) as w:
                for _ in range(count):
                    target = int(rng.integers(len(CLASSES)))
                    element = {
                        fmt.CLASS_KEY: CLASSES[target].encode(),
                        fmt.TARGET_KEY: np.int64(target),
                        fmt.NUM_CLASSES_KEY: np.int64(len(CLASSES)),
                        fmt.FILEPATH_KEY: f"/data/{CLASSES[target]}/{next_index}.wav".encode(),
                        fmt.INDEX_KEY: np.int64(next_index),
                        fmt.WIN_START_KEY: np.int64(rng.integers(0, 10) * win_len),
                        fmt.SIGNAL_KEY: _signal(rng, win_len, signal_dtype),
                        fmt.SAMPLE_RATE_KEY: np.int32(SAMPLE_RATE),
                        fmt.CHANNEL_KEY: np.int64(0),
                    }
                    if with_features:
                        mel = rng.normal(size=FEATURE_SHAPE).astype(np.float32)
                        element["log_mel"] = mel
                        element["log_mel_norm"] = (mel - mel.mean()) / (mel.std() + 1e-6)
                        element["log_mel_norm"] = element["log_mel_norm"].astype(np.float32)
                    w.write(_example(element, specs))
                    elements[split].append(element)
                    files.append(
                        {
                            "path": element[fmt.FILEPATH_KEY].decode(),
                            "index": next_index,
                            "label": CLASSES[target],
                            "split": split,
                            "num_windows": 1,
                            "sample_rate": SAMPLE_RATE,
                            "num_frames": win_len,
                            "num_channels": 1,
                            "subtype": "PCM_16",
                            "full_scale": 32768.0,
                        }
                    )
                    next_index += 1
            shard_paths[split].append(path)
            entries.append(
                {"filename": filename, "num_examples": count, "num_bytes": os.path.getsize(path)}
            )
        manifest_splits[split] = {"num_examples": sum(counts[split]), "shards": entries}

    manifest = {
        "format": fmt.FORMAT_NAME,
        "format_version": fmt.FORMAT_VERSION,
        "complete": True,
        "name": NAME,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "compression": compression,
        "elements": {key: spec.to_json() for key, spec in specs.items()},
        "num_examples": sum(sum(c) for c in counts.values()),
        "classes": list(CLASSES),
        "num_classes": len(CLASSES),
        "splits": manifest_splits,
        "files": files,
        "errors": [{"path": "/data/bad.wav", "reason": "not a RIFF file"}],
        "params": {"win_len": win_len, "hop_len": win_len, "features": ["log_mel"]},
        "versions": {"audiorecords": "0.1.0", "tensorflow": tf.__version__},
    }
    write_schema(directory, specs)
    write_manifest(directory, manifest)
    return {"manifest": manifest, "elements": elements, "shards": shard_paths}


def write_schema(directory: str | os.PathLike, specs: Mapping[str, fmt.ElementSpec]) -> None:
    """Write `directory`/schema.pbtxt: a tensorflow_metadata Schema of the stored records."""
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
