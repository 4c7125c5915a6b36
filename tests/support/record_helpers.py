"""Record-pipeline test helpers: run the CLI in-process, read shards back with plain tf.data.

Reading back deliberately does NOT use the `replay` package: it parses shards with
`tf.data.TFRecordDataset` + `tf.io.parse_example` from the manifest's element specs, so a bug in
the reader cannot hide a bug in the writer.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np

from pipelines.result import RecordResult

# A real 24-bit 64 kHz hydrophone recording (5 s excerpt, bytes unchanged): tests/fixtures/audio/.
TUG_WAV = Path(__file__).resolve().parents[1] / "fixtures" / "audio" / "hydrophone_excerpt_tug.wav"
SAMPLE_DIR = Path(__file__).resolve().parents[2] / "data" / "sample"


def record(input_pattern: str, output_dir: Path, *extra: str) -> RecordResult:
    """Runs the record pipeline in-process (DirectRunner) and returns its `RecordResult`."""
    from pipelines import record as record_pipeline

    argv = ["--input_pattern", input_pattern, "--output_dir", str(output_dir), *extra]
    return record_pipeline.run(argv)


def cli_error(capsys, *argv: str) -> str:
    """Runs the record CLI entry point, which must refuse with exit 2 and one `error:` line."""
    from pipelines import record as record_pipeline

    assert record_pipeline.main(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def load_manifest(output_dir: Path) -> dict:
    """manifest.json, with format version 3's source tables (files.jsonl, errors.jsonl) added
    back as "files" and "errors", as version 2 held them (read with json alone, not replay).
    `raw_manifest` is the file as written."""
    manifest = raw_manifest(output_dir)
    if manifest["format_version"] >= 3:
        for key in ("files", "errors"):
            with open(Path(output_dir) / f"{key}.jsonl", encoding="ascii") as f:
                manifest[key] = [json.loads(line) for line in f]
            assert len(manifest[key]) == manifest[f"num_{key}"], key
    return manifest


def without_times(manifest: dict) -> dict:
    """`manifest` with its times taken out (in place; returned): ``created_utc``, the one field
    that differs between identical runs, and each commit's copy of it (format version 5)."""
    manifest.pop("created_utc")
    for commit in manifest.get("commits", ()):
        commit.pop("created_utc")
    return manifest


def dataset_digests(out: Path, *, skip: str = "fingerprint.pb") -> dict[str, str]:
    """SHA-256 of every file under `out` (each manifest, ``manifests/<version>.json`` too,
    without its times) by relative path, but those whose path holds `skip` (a SavedModel's
    ``fingerprint.pb`` varies run to run)."""
    found = {}
    for path in sorted(Path(out).rglob("*")):
        name = str(path.relative_to(out))
        if not path.is_file() or skip in name:
            continue
        data = path.read_bytes()
        if path.suffix == ".json" and b'"created_utc"' in data:  # a manifest (versions too)
            data = json.dumps(without_times(json.loads(data)), sort_keys=True).encode()
        found[name] = hashlib.sha256(data).hexdigest()
    return found


def raw_manifest(output_dir: Path) -> dict:
    """manifest.json as written."""
    return json.loads((Path(output_dir) / "manifest.json").read_text())


def read_records(output_dir: Path) -> list[dict]:
    """Every stored element, decoded by plain tf.data from the manifest specs, in shard order."""
    return [r for shard in read_records_by_shard(output_dir).values() for r in shard]


def read_records_by_shard(output_dir: Path) -> dict[str, list[dict]]:
    """{shard file name: its elements in stored order}, in the manifest's shard order."""
    import tensorflow as tf

    manifest = raw_manifest(output_dir)
    spec = manifest["elements"]
    parse_spec = {}
    for key, s in spec.items():
        if s["encoding"] == "z_score":  # format version 2: computed from its source, below
            continue
        if s["encoding"] in ("raw", "bytes_list"):
            parse_spec[key] = tf.io.FixedLenFeature([], tf.string)
        elif s["encoding"] == "int64_list":
            parse_spec[key] = tf.io.FixedLenFeature(s["shape"], tf.int64)
        else:
            parse_spec[key] = tf.io.FixedLenFeature(s["shape"], tf.float32)
    compression = "" if manifest["compression"] == "NONE" else manifest["compression"]
    out = {}
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            path = str(Path(output_dir) / shard["filename"])
            ds = tf.data.TFRecordDataset(path, compression_type=compression)
            n, records = 0, out.setdefault(shard["filename"], [])
            for serialized in ds:
                parsed = tf.io.parse_single_example(serialized, parse_spec)
                element = {}
                for key, value in parsed.items():
                    value = value.numpy()
                    if spec[key]["encoding"] == "raw":
                        value = _raw_values(value, spec[key])
                    elif spec[key]["dtype"] == "string":
                        value = value.decode()
                    element[key] = value
                for key, s in spec.items():
                    if s["encoding"] == "z_score":
                        element[key] = z_score(element[s["source"]], s["mean"], s["var"])
                records.append(element)
                n += 1
            assert n == shard["num_examples"], (shard, n)
    return out


def _raw_values(data: bytes, spec: dict) -> np.ndarray:
    """A raw key's little-endian bytes as its decoded dtype and shape (numpy, not replay)."""
    stored = spec.get("stored_dtype", spec["dtype"])
    if stored == "bfloat16":
        import ml_dtypes

        values = np.frombuffer(data, dtype=ml_dtypes.bfloat16)
    else:
        values = np.frombuffer(data, dtype=np.dtype(stored).newbyteorder("<"))
    return values.astype(spec["dtype"]).reshape(spec["shape"])


def z_score(x: np.ndarray, mean: float, var: float) -> np.ndarray:
    """TFT's scale_to_z_score in numpy float32: (x - mean) / sqrt(var), x - mean when 0."""
    numerator = x.astype(np.float32) - np.float32(mean)
    denominator = np.sqrt(np.float32(var))
    return numerator / denominator if denominator != 0 else numerator


def copy_tug(directory: Path) -> Path:
    """Copies the real 24-bit 64 kHz hydrophone recording into `directory` (never modified)."""
    directory.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(TUG_WAV, directory / TUG_WAV.name))
