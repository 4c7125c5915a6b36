"""Guarantee 8, untrusted datasets: the manifest schema (`replay.manifest`) and the path rule.

Each crafted manifest of issue 15 (path escapes, nulls, absurd shapes, duplicated shards, counts
that disagree, a string format_version) on a real record run's dataset
(tests/fixtures/fuzz_manifest_dataset/) is refused with a `ManifestError` naming the manifest
and the field, by `load_info`, `replay_dataset`, `verify_dataset`, `python -m pipelines.verify`
and `python -m pipelines.inspect` alike; symlinks out of the dataset are refused too.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from fuzz.manifest_target import BASE_DATASET
from pipelines import inspect as inspect_cli
from pipelines import verify as verify_cli
from replay import ManifestError, ReplayError, ShardError, load_info

TRAIN0 = "audiorecords-train.tfrecord-00000-of-00002"
SHARD0 = "splits/train/shards/0/filename"


@pytest.fixture
def dataset(tmp_path) -> Path:
    """A private copy of the real record run's dataset, and a decoy shard just outside it."""
    out = tmp_path / "dataset"
    shutil.copytree(BASE_DATASET, out)
    shutil.copy(out / TRAIN0, tmp_path / "outside.tfrecord")
    return out


def _manifest(dataset: Path) -> dict:
    return json.loads((dataset / "manifest.json").read_text())


def _write(dataset: Path, manifest: dict) -> Path:
    path = dataset / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path


def _shard0(m: dict) -> dict:
    return m["splits"]["train"]["shards"][0]


def _set(path: str, value: object) -> Callable[[dict], None]:
    def edit(m: dict) -> None:
        *parents, last = path.split("/")
        node = m
        for step in parents:
            node = node[int(step)] if step.isdigit() else node[step]
        node[int(last) if last.isdigit() else last] = value

    return edit


def _duplicate_shard(m: dict) -> None:
    split = m["splits"]["train"]
    split["shards"].append(dict(split["shards"][0]))
    split["num_examples"] += split["shards"][0]["num_examples"]
    m["num_examples"] += split["shards"][0]["num_examples"]


def _v2(*edits: Callable[[dict], None]) -> Callable[[dict], None]:
    """The manifest as format version 2 (``log_mel_norm`` computed from ``log_mel``), then
    `edits`."""

    def edit(m: dict) -> None:
        m["format_version"] = 2
        norm = m["elements"]["log_mel_norm"]
        norm.update(encoding="z_score", source="log_mel", mean=0.5, var=2.0)
        for more in edits:
            more(m)

    return edit


CRAFTED = {  # issue 15's manifests, and their kin: edit -> the field the error must name
    "parent_escape": (_set(SHARD0, "../outside.tfrecord"), "filename"),
    "absolute_path": (_set(SHARD0, "/etc/passwd"), "filename"),
    "subdirectory": (_set(SHARD0, f"sub/{TRAIN0}"), "filename"),
    "dot_slash": (_set(SHARD0, f"./{TRAIN0}"), "filename"),
    "glob": (_set(SHARD0, TRAIN0.replace("00000-", "0000?-")), "filename"),
    "newline": (_set(SHARD0, TRAIN0 + "\n"), "filename"),
    "other_split": (
        _set(SHARD0, TRAIN0.replace("train", "test")),
        "filename",
    ),
    "url": (_set(SHARD0, "gs://bucket/x"), "filename"),
    "listed_twice": (_duplicate_shard, f"shards[0].filename: {TRAIN0!r} is listed 2 times"),
    "elements_null": (_set("elements", None), "elements"),
    "splits_null": (_set("splits", None), "splits"),
    "shape_2_40": (_set("elements/signal/shape", [2**40]), "elements.signal.shape[0]"),
    "shape_negative": (_set("elements/signal/shape", [-5]), "elements.signal.shape[0]"),
    "shape_string": (_set("elements/signal/shape", "4000"), "elements.signal.shape"),
    "shape_too_big_for_shards": (_set("elements/signal/shape", [100_000]), "num_bytes"),
    "dtype_unknown": (_set("elements/log_mel/dtype", "complex64"), "elements.log_mel.dtype"),
    "encoding_unknown": (_set("elements/log_mel/encoding", "npy"), "elements.log_mel.encoding"),
    "no_signal": (lambda m: m["elements"].pop("signal"), "elements.signal"),
    "total_disagrees": (_set("num_examples", 13), "num_examples"),
    "split_disagrees": (_set("splits/test/num_examples", 9), "splits.test.num_examples"),
    "count_is_float": (_set("splits/train/shards/0/num_examples", 1.0), "num_examples"),
    "count_is_bool": (_set("splits/train/shards/0/num_bytes", True), "num_bytes"),
    "version_string": (_set("format_version", "1"), "format_version: expected an integer"),
    "version_newer": (_set("format_version", 6), "format_version: 6 is newer"),
    "z_score_in_v1": (
        lambda m: _v2(_set("format_version", 1))(m),
        "elements.log_mel_norm: encoding z_score needs format_version 2",
    ),
    "z_score_mean_not_float32": (
        _v2(_set("elements/log_mel_norm/mean", 0.1)),
        "elements.log_mel_norm.mean: 0.1 is not a float32 value",
    ),
    "z_score_mean_string": (_v2(_set("elements/log_mel_norm/mean", "0.5")), "log_mel_norm.mean"),
    "z_score_mean_huge": (_v2(_set("elements/log_mel_norm/mean", 10**400)), "log_mel_norm.mean"),
    "z_score_var_negative": (_v2(_set("elements/log_mel_norm/var", -1.0)), "log_mel_norm.var"),
    "z_score_no_var": (_v2(lambda m: m["elements"]["log_mel_norm"].pop("var")), "norm.var"),
    "z_score_source_unknown": (
        _v2(_set("elements/log_mel_norm/source", "mfcc")),
        "elements.log_mel_norm.source",
    ),
    "z_score_source_is_signal": (
        _v2(_set("elements/log_mel_norm/source", "signal")),
        "elements.log_mel_norm.source",
    ),
    "z_score_shape_unlike_source": (
        _v2(_set("elements/log_mel_norm/shape", [3, 5])),  # log_mel is [4, 8]
        "elements.log_mel_norm.source: 'log_mel' is not a stored float32 key of shape [3, 5]",
    ),
    "z_score_source_shape_unlike": (
        _v2(_set("elements/log_mel/shape", [2, 16])),  # the same 32 values, another shape
        "elements.log_mel_norm.source: 'log_mel' is not a stored float32 key of shape [4, 8]",
    ),
    "stored_dtype_unknown": (
        _v2(_set("elements/log_mel/stored_dtype", "int8")),
        "elements.log_mel.stored_dtype",
    ),
    "stored_dtype_on_a_list": (
        _v2(_set("elements/log_mel/stored_dtype", "float16")),
        "stored_dtype float16: only for raw float32 keys",
    ),
    "compression_unknown": (_set("compression", "ZSTD"), "compression"),
    "classes_not_strings": (_set("classes", ["rain", 7]), "classes[1]"),
    "classes_not_list": (_set("classes", "rain"), "classes"),
    "num_classes_disagrees": (_set("num_classes", 4), "num_classes"),
    "file_index_string": (_set("files/0/index", "0"), "files[0].index"),
    "full_scale_zero": (_set("files/0/full_scale", 0), "files[0].full_scale"),
    "features_not_strings": (_set("params/features", [1]), "params.features[0]"),
    "name_with_slash": (_set("name", "../audiorecords"), "name"),
    "deep_nesting": (_set("params/x", json.loads("[" * 40 + "]" * 40)), "nested deeper"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_manifest_is_refused_naming_the_field(dataset, case):
    edit, field = CRAFTED[case]
    manifest = _manifest(dataset)
    edit(manifest)
    path = _write(dataset, manifest)
    with pytest.raises(ManifestError) as e:
        load_info(dataset)
    message = str(e.value)
    assert message.startswith(f"{path}: "), message
    assert field in message and "\n" not in message, message


@pytest.mark.parametrize("case", ["parent_escape", "absolute_path", "shape_2_40", "splits_null"])
def test_every_tool_refuses_a_crafted_manifest(dataset, case, capsys):
    import replay

    CRAFTED[case][0](manifest := _manifest(dataset))
    path = _write(dataset, manifest)
    with pytest.raises(ManifestError, match=f"^{path}: "):
        replay.replay_dataset(dataset)
    with pytest.raises(ManifestError, match=f"^{path}: "):
        replay.verify_dataset(dataset)
    with pytest.raises(ManifestError, match=f"^{path}: "):
        replay.load_transform(dataset)
    assert verify_cli.run([str(dataset)]) == 1
    assert capsys.readouterr().out.startswith(f"FAILED {path}: ")
    assert inspect_cli.run([str(dataset)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}: ")


def test_huge_integer_and_deep_json_are_manifest_errors(dataset):
    path = dataset / "manifest.json"
    for text in ('{"format": "audiorecords", "x": ' + "9" * 5000 + "}", "[" * 100_000):
        path.write_text(text)
        with pytest.raises(ManifestError, match=f"^{path}: "):
            load_info(dataset)


def test_the_real_manifest_and_unknown_keys_load(dataset):
    """Forward compatibility: keys this reader does not use are tolerated anywhere."""
    import replay

    manifest = _manifest(dataset)
    manifest["analyzed_splits"] = ["train"]
    manifest["files"][0]["lossy"] = True
    _shard0(manifest)["sha256"] = "0" * 64
    manifest["elements"]["signal"]["unit"] = "counts"
    manifest["splits"]["test"]["note"] = {"nested": [1, 2]}
    _write(dataset, manifest)
    info = load_info(dataset)
    assert info.num_examples() == 12 and info.manifest["analyzed_splits"] == ("train",)
    assert sum(1 for _ in replay.replay_dataset(dataset)) == 12


def test_symlinked_shard_leading_outside_is_refused(dataset, capsys):
    import replay

    (dataset / TRAIN0).unlink()
    os.symlink(dataset.parent / "outside.tfrecord", dataset / TRAIN0)
    for call in (replay.replay_dataset, replay.verify_dataset):
        with pytest.raises(ShardError, match="leads outside the dataset directory"):
            call(dataset)
    assert verify_cli.run([str(dataset)]) == 1
    assert "leads outside the dataset directory" in capsys.readouterr().out


def test_symlinked_or_special_manifest_is_refused(dataset, tmp_path):
    outside = tmp_path / "elsewhere.json"
    shutil.move(dataset / "manifest.json", outside)
    os.symlink(outside, dataset / "manifest.json")
    with pytest.raises(ManifestError, match="leads outside the dataset directory"):
        load_info(dataset)
    (dataset / "manifest.json").unlink()
    os.mkfifo(dataset / "manifest.json")  # reading it would block forever
    with pytest.raises(ManifestError, match="not a regular file"):
        load_info(dataset)


def test_serving_graphs_must_be_inside_the_dataset(dataset, tmp_path):
    import replay

    for name in ("feature_fn", "transform_fn"):
        (tmp_path / name).mkdir()
        os.symlink(tmp_path / name, dataset / name)
    with pytest.raises(ReplayError, match="feature_fn: leads outside the dataset directory"):
        replay.load_transform(dataset)


@pytest.mark.parametrize("name", ["a*b", "x?", "[ab]", "{a,b}", "../x", ".hidden", "tab\tx"])
def test_record_refuses_a_dataset_name_readers_would_refuse(name):
    """One rule (`format.plain_name_problem`) for --dataset_name and the shard names readers
    accept: the record job never writes a dataset the reader would refuse."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines import record
    from pipelines.plan import UsageError, plan_record

    argv = ["--input_pattern", "x/*.wav", "--output_dir", "unused", "--dataset_name", name]
    with pytest.raises(UsageError, match="--dataset_name .* must be a plain file name"):
        plan_record(PipelineOptions(argv).view_as(record.RecordOptions))


DISAGREE = [
    ("signal", [1023], "reshape"),
    ("signal", [512], "key signal: the records do not hold int16 [512] as the manifest says"),
    ("log_mel", [2, 8], ""),
]


@pytest.mark.parametrize(("key", "shape", "reason"), DISAGREE)
def test_valid_manifest_whose_records_disagree_fails_reading_and_verify(
    dataset, key, shape, reason, capsys
):
    """A shape the schema cannot refuse without reading a record (1024 samples stored): reading
    fails with TensorFlow's error, and `pipelines.verify` names the key (found by the manifest
    fuzzer: verify decoded only the first key, so 1024 samples passed as 2 x [512])."""
    import tensorflow as tf

    import replay

    manifest = _manifest(dataset)
    manifest["elements"][key]["shape"] = shape
    _write(dataset, manifest)
    with pytest.raises(tf.errors.InvalidArgumentError):
        sum(1 for _ in replay.replay_dataset(dataset))
    assert verify_cli.run([str(dataset)]) == 1
    out = capsys.readouterr().out
    assert out.count("BAD ") == 4 and reason in out and len(out.splitlines()) == 5, out
