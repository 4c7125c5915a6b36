"""Tasks and shards on real WAV files, without running a pipeline: `size_tasks` (feature shapes,
shard counts, read tasks), `one_task`, and the checks that need the files' rate."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pipelines.config import RecordConfig, UsageError
from pipelines.plan import (
    MIN_TASK_ROWS,
    one_task,
    plan_record,
    scan_inputs,
    shard_counts,
    size_tasks,
)
from tests.support import wavgen

WIN = 1000


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Three 16-bit files (two classes, 8000 / 5000 / 3000 frames) and a broken one."""
    return wavgen.plan_corpus(tmp_path_factory.mktemp("in"))


def _config(inputs, tmp_path, **options) -> RecordConfig:
    return RecordConfig(
        input_pattern=str(inputs / "*.wav"), output_dir=str(tmp_path / "out"), **options
    )


def test_size_tasks_counts_windows_shards_and_tasks(inputs, tmp_path):
    config = _config(inputs, tmp_path, win_len=WIN, features="none", num_shards=3)
    scanned = scan_inputs(config)
    plan = size_tasks(config, scanned, cpu_count=1)
    assert plan.sharding.num_shards == {"all": 3}
    assert [t.rows for t in plan.tasks] == [8 + 5 + 3]  # 16 windows < MIN_TASK_ROWS: one task
    assert MIN_TASK_ROWS == 64
    small = dataclasses.replace(config, win_len=100)  # 160 windows: tasks of MIN_TASK_ROWS
    for cpus in (1, 8):
        tasks = size_tasks(small, scanned, cpu_count=cpus).tasks
        assert [t.rows for t in tasks] == [64, 64, 32], cpus
    parallel = size_tasks(small, scanned, cpu_count=8)
    one = one_task(parallel)  # the in-memory DirectRunner
    assert [t.rows for t in one.tasks] == [160] and one.tasks[0].task_id == 0
    # the same segments (files cut where the parallel plan cuts them), in one task
    assert one.tasks[0].segments == tuple(s for t in parallel.tasks for s in t.segments)
    assert len(one.tasks[0].segments) > len(scanned.inputs[:3])
    assert dataclasses.replace(one, tasks=()) == dataclasses.replace(parallel, tasks=())
    assert plan.compression == "AUTO" and plan.params["hop_len"] == WIN
    assert plan.read.layout.feature_shapes == {}
    assert plan == plan_record(config)  # the three steps are the whole of planning


def test_size_tasks_checks_features_at_the_files_rate_and_the_analysed_splits(inputs, tmp_path):
    config = _config(inputs, tmp_path, win_len=256)  # log_mel frames of 400 samples
    with pytest.raises(UsageError, match="^feature parameters: "):
        size_tasks(config, scan_inputs(config), cpu_count=1)
    config = _config(inputs, tmp_path, win_len=WIN, splits="train=1,test=99999")
    scanned = scan_inputs(config)
    # The split hash of each name relative to the pattern's directory (blake2b: the same on every
    # machine) puts all four files in test, so no window is in the analysed split.
    assert {f.split for f in scanned.inputs} == {"test"}
    with pytest.raises(UsageError, match="^--analyze_splits train: no window in the analysed"):
        size_tasks(config, scanned, cpu_count=1)
    plan = size_tasks(dataclasses.replace(config, normalize=False), scanned, cpu_count=1)
    assert plan.sharding.num_shards["train"] >= 1


def test_default_shard_count_is_planned_windows_times_stored_bytes(inputs, tmp_path, monkeypatch):
    """docs/output-layout.md "Shard count": one shard per TARGET_SHARD_BYTES (128 MiB; 5,000 bytes
    here) of planned windows x the bytes each stores, so overlapping windows and --feature_dtype
    count."""
    monkeypatch.setattr(shard_counts, "TARGET_SHARD_BYTES", 5_000)

    def shards(**options) -> int:
        config = _config(inputs, tmp_path, win_len=WIN, **{"features": "none", **options})
        return size_tasks(config, scan_inputs(config), cpu_count=1).sharding.num_shards["all"]

    windows = 8 + 5 + 3  # 8000 / 5000 / 3000 frames, windows of 1000
    overlapping = sum(1 + (frames - WIN) // 250 for frames in (8000, 5000, 3000))  # 29 + 17 + 9
    log_mel_values = (1 + (WIN - 400) // 160) * 64  # frames x mel bins at 16 kHz
    assert shards() == math.ceil(windows * WIN * 2 / 5_000)  # int16 samples: 7
    assert shards(hop_len=250) == math.ceil(overlapping * WIN * 2 / 5_000)  # 22
    assert shards(features="log_mel") == math.ceil(windows * (WIN * 2 + log_mel_values * 4) / 5_000)
    assert shards(features="log_mel", feature_dtype="float16") == math.ceil(
        windows * (WIN * 2 + log_mel_values * 2) / 5_000
    )


def test_size_tasks_refuses_a_feature_the_reader_would_refuse(inputs, tmp_path):
    """The writer never records an element the reader refuses (over 2^28 values in one key):
    a spectrogram of 1,048,552 frames x 257 bins = 269,477,864 values stops at planning."""
    config = _config(inputs, tmp_path, win_len=1 << 24, frame_step=16, features="spectrogram")
    with pytest.raises(UsageError, match=r"^feature parameters: spectrogram would have shape "):
        size_tasks(config, scan_inputs(config), cpu_count=1)
    fits = dataclasses.replace(config, features="log_mel")  # 1,048,552 x 64: within the limit
    assert size_tasks(fits, scan_inputs(fits), cpu_count=1).read.layout.feature_shapes == {
        "log_mel": (1_048_552, 64)
    }
