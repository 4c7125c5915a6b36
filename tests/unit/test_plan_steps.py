"""Planning steps 2 and 3 on real WAV files, without running a pipeline: `scan_inputs` (labels,
headers, output directory), its pure parts, and `size_tasks` (shapes, shard counts, tasks)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pipelines.config import RecordConfig, UsageError
from pipelines.plan import (
    MIN_TASK_ROWS,
    check_inputs,
    check_output_dir,
    label_inputs,
    one_task,
    plan_record,
    scan_inputs,
    size_tasks,
)
from tests.support import wavgen
from transforms.spec import sharding as shard_plan
from transforms.spec.types import Sharding

WIN = 1000


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Three 16-bit files (two classes, 8000 / 5000 / 3000 frames) and a broken one."""
    d = tmp_path_factory.mktemp("in")
    for name, frames in (("a_1_dog", 8000), ("b_2_cat", 5000), ("c_3_dog", 3000)):
        samples = wavgen.synth(frames)
        wavgen.write_wav(d / f"{name}.wav", samples, sample_rate=16000, subtype="PCM_16")
    (d / "d_4_cat.wav").write_bytes(b"RIFF, but no audio")
    return d


def _config(inputs, tmp_path, **options) -> RecordConfig:
    return RecordConfig(
        input_pattern=str(inputs / "*.wav"), output_dir=str(tmp_path / "out"), **options
    )


def test_label_inputs_gives_index_label_split_and_class_errors():
    """Pins each matched file's index, label and split (literals, not `split_of`'s answer) and
    the error of a class outside ``--classes``."""
    matched = [("d/a_x_dog.wav", 10), ("d/b_x_cat.wav", 20), ("d/c_x_owl.wav", 30)]
    config = RecordConfig(input_pattern="d/*.wav", output_dir="o", splits="train=50,test=50")
    sharding = Sharding(splits=config.split_weights, split_base="d/")
    files = label_inputs(
        matched, config, csv_labels=None, fixed_classes=("cat", "dog"), sharding=sharding
    )
    assert [(f.index, f.path, f.size_bytes, f.label) for f in files] == [
        (0, "d/a_x_dog.wav", 10, "dog"),
        (1, "d/b_x_cat.wav", 20, "cat"),
        (2, "d/c_x_owl.wav", 30, "owl"),
    ]
    # Literals (blake2b unit hashes of the paths relative to "d/": 0.242, 0.710, 0.527)
    assert [f.split for f in files] == ["train", "test", "test"]
    assert [f.error is None for f in files] == [True, True, False]  # owl: not in --classes
    keep = dataclasses.replace(config, unknown_class="keep")
    kept = label_inputs(matched, keep, csv_labels=None, fixed_classes=("cat",), sharding=sharding)
    assert all(f.error is None for f in kept)
    annotated = dataclasses.replace(config, annotations="t/*.txt")
    tabled = label_inputs(
        matched, annotated, csv_labels=None, fixed_classes=None, sharding=sharding
    )
    assert [f.label for f in tabled] == ["", "", ""]  # labels come from the tables


@pytest.mark.parametrize(
    ("state", "overwrite", "message"),
    [
        ("missing", False, None),
        ("empty", False, None),
        ("ours", False, "exists; pass --overwrite to replace it"),
        ("ours", True, None),
        ("foreign", True, "not an audiorecords dataset; refusing to overwrite it"),
    ],
)
def test_check_output_dir(state, overwrite, message):
    config = RecordConfig(input_pattern="x", output_dir="o", overwrite=overwrite)
    if message is None:
        check_output_dir(config, "o", state)
    else:
        with pytest.raises(UsageError, match=message):
            check_output_dir(config, "o", state)


def test_scan_inputs_reads_labels_and_headers_and_lists_bad_files(inputs, tmp_path):
    scanned = scan_inputs(_config(inputs, tmp_path))
    assert [f.path.rsplit("/", 1)[-1] for f in scanned.inputs] == [
        "a_1_dog.wav",
        "b_2_cat.wav",
        "c_3_dog.wav",
        "d_4_cat.wav",
    ]
    assert [f.info.num_frames if f.info else None for f in scanned.inputs] == [
        8000,
        5000,
        3000,
        None,
    ]
    assert scanned.inputs[3].error and scanned.classes == ("cat", "dog")
    assert scanned.signal_dtype == "int16" and scanned.output_dir == str(tmp_path / "out")
    with pytest.raises(UsageError, match="^--strict: .*d_4_cat.wav: "):
        check_inputs(_config(inputs, tmp_path, strict=True), scanned.inputs)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not an audiorecords dataset"):
        scan_inputs(_config(inputs, tmp_path, overwrite=True))


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
    monkeypatch.setattr(shard_plan, "TARGET_SHARD_BYTES", 5_000)

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
