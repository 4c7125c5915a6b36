"""Real record runs for the `replay` tests, and what their shards store, read without `replay`.

`record_runs` makes real record runs (`pipelines.record_dataset`, DirectRunner) of tiny WAV
files written with the standard library's `wave`, once per ``--feature_dtype``; `stored_records`
reads their shards back with protobuf alone and `decode_raw` decodes a raw key's bytes in numpy,
so tests can check what `replay` decodes against numpy.
"""

from __future__ import annotations

import json
import os
import wave
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from replay import format as fmt
from tests.support.replay_fixtures import FEATURE, SAMPLE_RATE

RECORD_LABELS = ("cat", "dog", "owl", "cat")  # one file each: <i>_<label>.wav
RECORD_FRAMES = 2048  # samples per file: 2 windows of RECORD_OPTIONS["win_len"]
# Options of `record_runs`: log_mel [4, 8] (frames of 256 samples, 8 mel bins), as the
# hand-made datasets' FEATURE_SHAPE.
RECORD_OPTIONS = {
    "win_len": 1024,
    "features": [FEATURE],
    "num_mel_bins": 8,
    "frame_length": 256,
    "frame_step": 256,
    "fft_length": 256,
}


def write_wavs(directory: str | os.PathLike, *, seed: int = 0) -> dict[str, np.ndarray]:
    """Writes small 16-bit mono 16 kHz WAV files with `wave`; returns {path: int16 samples}."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = {}
    for i, label in enumerate(RECORD_LABELS):
        tone = 3000 * np.sin(2 * np.pi * (220 + 110 * i) * np.arange(RECORD_FRAMES) / SAMPLE_RATE)
        noise = rng.normal(0, 800, RECORD_FRAMES)
        samples = np.clip(np.round(tone + noise), -32768, 32767).astype("<i2")
        path = directory / f"{i}_{label}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SAMPLE_RATE)
            w.writeframes(samples.tobytes())
        out[str(path)] = samples
    return out


def record_runs(
    directory: str | os.PathLike, feature_dtypes: Sequence[str] = fmt.FEATURE_DTYPES
) -> dict[str, Any]:
    """Records the WAV files of `write_wavs` with the real record job, once per feature dtype.

    Returns:
      ``{"samples": {path: int16 samples}, "runs": {feature_dtype: dataset directory}}``.
    """
    from pipelines import record_dataset

    directory = Path(directory)
    samples = write_wavs(directory / "wav")
    runs = {}
    for dtype in feature_dtypes:
        out = directory / f"out_{dtype}"
        record_dataset(
            input_pattern=str(directory / "wav" / "*.wav"),
            output_dir=str(out),
            feature_dtype=dtype,
            **RECORD_OPTIONS,
        )
        runs[dtype] = out
    return {"samples": samples, "runs": runs}


def stored_records(directory: str | os.PathLike) -> list[dict[str, Any]]:
    """Every record of a dataset as stored, read with protobuf (not `replay`): {key: value},
    bytes for raw and bytes_list keys, a list of numbers for the other kinds."""
    manifest = json.loads((Path(directory) / fmt.MANIFEST_FILENAME).read_text())
    compression = fmt.tf_compression_type(manifest["compression"])
    out = []
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            path = str(Path(directory) / shard["filename"])
            for serialized in tf.data.TFRecordDataset(path, compression_type=compression):
                example = tf.train.Example.FromString(serialized.numpy())
                record = {}
                for key, feature in example.features.feature.items():
                    kind = feature.WhichOneof("kind")
                    values = list(getattr(feature, kind).value)
                    record[key] = values[0] if kind == "bytes_list" else values
                out.append(record)
    return out


def bfloat16_widen(data: bytes) -> np.ndarray:
    """Little-endian bfloat16 bytes -> float32 values (the high half of the float32 bits)."""
    return (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32)


def decode_raw(data: bytes, spec: Mapping[str, Any]) -> np.ndarray:
    """A raw key's stored bytes as its manifest spec says, decoded in numpy (not by `replay`)."""
    stored = spec.get("stored_dtype", spec["dtype"])
    if stored == "bfloat16":
        values = bfloat16_widen(data)
    else:
        values = np.frombuffer(data, np.dtype(stored).newbyteorder("<"))
    return values.astype(spec["dtype"]).reshape(spec["shape"])
