"""The record job's read stage hands its rows to the part writer in batches
(`transforms.stages.pending_rows`): the dataset is the one per-file hand-offs make, byte for byte.

Real record jobs on real WAV files (short clips at two rates, mono and stereo, split channels, two
splits, a file whose features float16 cannot hold: a per-file error inside a pack), recorded
three ways: batched as the job runs; a hand-off after every chunk (``WRITE_BATCH_BYTES`` 0),
files cut in chunks of two windows (a segment handed over in several batches, as a long file's
is) and a checkpoint after nearly every segment (so checkpoints fall inside packs); and with a
``shard_func`` giving the default hash sharding's shards, which routes in the read stage's thread
and hands every chunk over on its own (the stage's per-chunk path). Every shard, offsets file,
source table and the manifest (but its time) are the same (not the transform graph, which
names its directory).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pipelines import record_dataset
from tests.support import wavgen
from tests.support.record_helpers import raw_manifest, without_times
from transforms.spec.sharding import shard_of
from transforms.spec.types import Sharding
from transforms.stages import file_rows, read_windows

NUM_SHARDS = 3


def _inputs(directory: Path) -> str:
    for i in range(24):
        folder = directory / ("cat", "dog")[i % 2]
        folder.mkdir(parents=True, exist_ok=True)
        channels = 2 if i % 3 else 1
        samples = wavgen.synth(1200 + 450 * (i % 5), num_channels=channels, seed=i)
        rate = 8000 if i % 7 == 0 else 16000
        wavgen.write_wav(folder / f"f{i:02d}.wav", samples, sample_rate=rate, subtype="PCM_16")
    tone = np.sin(2 * np.pi * 440 * np.arange(3000) / 16000)  # beyond float16: a per-file error
    sf.write(
        str(directory / "cat" / "f99_loud.wav"), (5000 * tone).astype(np.float32), 16000, "FLOAT"
    )
    return str(directory / "*" / "*.wav")


def _record(pattern: str, out: Path, **extra) -> dict:
    result = record_dataset(
        input_pattern=pattern,
        output_dir=str(out),
        label_source="dirname",
        win_len=1000,
        channel_mode="split",
        splits="train=7,test=3",
        num_shards=NUM_SHARDS,
        features="spectrogram,log_mel",
        feature_dtype="float16",
        frame_length=256,
        frame_step=128,
        fft_length=256,
        **extra,
    )
    assert result.num_failed == 1 and result.num_examples > 50
    return _outputs(out)


def _outputs(out: Path) -> dict:
    """Every file the dataset holds, by relative path (the manifest without its time)."""
    files = {}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out).as_posix()
        if path.is_dir() or rel.startswith((".tmp", "transform_fn", "feature_fn")):
            continue
        files[rel] = path.read_bytes()
    files["manifest.json"] = json.dumps(without_times(raw_manifest(out)), sort_keys=True)
    return files


def _hash_sharding(element: dict) -> int:
    """The default (hash) sharding's shard of an element, as a `shard_func`."""
    key = (int(element["index"]), int(element.get("channel", 0)), int(element["win_start_idx"]))
    return shard_of(key, label="", split_rank=0, num_shards=NUM_SHARDS, sharding=Sharding())


@pytest.mark.slow  # two record runs of 100 files compared byte for byte: ~8 s
def test_batched_hand_offs_record_the_dataset_of_per_file_ones(tmp_path, monkeypatch):
    pattern = _inputs(tmp_path / "in")
    batched = _record(pattern, tmp_path / "batched")
    assert sum(".tfrecord-" in k for k in batched) >= 2 * NUM_SHARDS  # shards, their offsets
    assert b"f99_loud" in batched["errors.jsonl"]

    with monkeypatch.context() as m:
        m.setattr(read_windows, "WRITE_BATCH_BYTES", 0)
        m.setattr(read_windows, "CHECKPOINT_BYTES", 1)
        m.setattr(file_rows, "_CHUNK_BYTES", 2 * 1000 * 2)  # 2 windows: files of 2-4 chunks
        per_file = _record(pattern, tmp_path / "per_file")
    assert per_file == batched

    by_chunk = _record(pattern, tmp_path / "by_chunk", shard_func=_hash_sharding)
    assert by_chunk == batched
