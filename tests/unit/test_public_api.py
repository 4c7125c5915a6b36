"""The public API of `replay` and `pipelines`, pinned as literals: names, kinds, signatures.

A user's code depends on these names, on which arguments are keyword-only and on the defaults;
each is written out here, so removing, renaming or reshaping one fails a test (nothing is
derived from the modules' own lists).
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import pipelines
import replay
from pipelines.config import RecordConfig

EMPTY = inspect.Parameter.empty
POS = inspect.Parameter.POSITIONAL_OR_KEYWORD
POS_ONLY = inspect.Parameter.POSITIONAL_ONLY
KW = inspect.Parameter.KEYWORD_ONLY
VAR_KW = inspect.Parameter.VAR_KEYWORD
AUTOTUNE = -1  # tf.data.AUTOTUNE

REPLAY_NAMES = [
    "CorruptShardError",
    "DatasetInfo",
    "DatasetNotFoundError",
    "GlobalOrder",
    "GlobalOrderCheckpoint",
    "IncompleteDatasetError",
    "MalformedRecordError",
    "ManifestError",
    "MissingShardError",
    "NoOffsetsError",
    "NoRandomAccessError",
    "ReadConfig",
    "Records",
    "ReplayError",
    "ServingTransform",
    "ShardError",
    "ShardInfo",
    "ShardSizeError",
    "Source",
    "UnknownFeatureError",
    "UnknownSplitError",
    "VersionNotFoundError",
    "default_reader_func",
    "load_info",
    "load_transform",
    "open_records",
    "open_source",
    "replay_dataset",
    "verify_dataset",
]

SIGNATURES = {  # name: [(parameter, kind, default)]
    "replay_dataset": [
        ("path", POS, EMPTY),
        ("read_config", KW, None),
        ("split", KW, None),
        ("version", KW, None),
        ("features", KW, None),
        ("reader_func", KW, None),
        ("shuffle_shards", KW, False),
        ("seed", KW, None),
        ("reshuffle_each_iteration", KW, True),
        ("cycle_length", KW, None),
        ("block_length", KW, None),
        ("num_parallel_reads", KW, AUTOTUNE),
        ("shuffle_buffer", KW, 0),
        ("repeat", KW, False),
        ("input_context", KW, None),
        ("service", KW, None),
        ("processing_mode", KW, "distributed_epoch"),
        ("job_name", KW, None),
        ("deterministic", KW, None),
        ("batch_size", KW, None),
        ("drop_remainder", KW, False),
        ("prefetch", KW, AUTOTUNE),
        ("balance", KW, None),
        ("order", KW, None),
    ],
    "default_reader_func": [
        ("datasets", POS, EMPTY),
        ("cycle_length", KW, None),
        ("block_length", KW, 1),
        ("num_parallel_calls", KW, AUTOTUNE),
        ("deterministic", KW, None),
    ],
    "verify_dataset": [("path", POS, EMPTY), ("split", KW, None)],
    "load_info": [("path", POS, EMPTY), ("version", KW, None)],
    "open_records": [("path", POS, EMPTY), ("split", KW, None), ("version", KW, None)],
    "open_source": [
        ("path", POS, EMPTY),
        ("split", KW, None),
        ("features", KW, None),
        ("version", KW, None),
    ],
    "load_transform": [("path", POS, EMPTY), ("version", KW, None)],
}

# Each error's bases up to Exception: a caller may catch the builtin kind as well.
ERROR_BASES = {
    "ReplayError": ["Exception"],
    "DatasetNotFoundError": ["ReplayError", "FileNotFoundError", "OSError", "Exception"],
    "IncompleteDatasetError": ["ReplayError", "Exception"],
    "ManifestError": ["ReplayError", "FormatError", "ValueError", "Exception"],
    "ShardError": ["ReplayError", "Exception"],
    "MissingShardError": [
        "ShardError",
        "ReplayError",
        "FileNotFoundError",
        "OSError",
        "Exception",
    ],
    "ShardSizeError": ["ShardError", "ReplayError", "Exception"],
    "CorruptShardError": ["ShardError", "ReplayError", "Exception"],
    "MalformedRecordError": ["CorruptShardError", "ShardError", "ReplayError", "Exception"],
    "UnknownSplitError": ["ReplayError", "ValueError", "Exception"],
    "NoRandomAccessError": ["ReplayError", "ValueError", "Exception"],
    "UnknownFeatureError": ["ReplayError", "ValueError", "Exception"],
    "VersionNotFoundError": [
        "ManifestError",
        "ReplayError",
        "FormatError",
        "ValueError",
        "Exception",
    ],
}


def _parameters(fn) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_replay_exports_exactly_the_documented_names():
    """Pins `replay.__all__` and that `dir(replay)` lists each name, resolvable (lazily for
    the TensorFlow-backed ones) to a function or class."""
    assert sorted(replay.__all__) == REPLAY_NAMES
    assert set(REPLAY_NAMES) <= set(dir(replay))
    for name in REPLAY_NAMES:
        value = getattr(replay, name)
        assert inspect.isfunction(value) or inspect.isclass(value), name
    with pytest.raises(AttributeError, match="no attribute 'replay_datasets'"):
        _ = replay.replay_datasets


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_replay_functions_take_the_pinned_arguments(name):
    """Pins each public function's parameters: names, order, keyword-only, defaults."""
    fn = getattr(replay, name)
    assert callable(fn)
    assert _parameters(fn) == SIGNATURES[name]


# Names that moved to a module of their own when a module was split, still importable from the
# module users import them from: (the old module, the name, the module that holds it now).
KEPT_ALIASES = [
    ("replay", "default_reader_func", "replay.default_reader"),
    ("replay", "DatasetInfo", "replay.dataset_info"),
    ("replay", "ShardInfo", "replay.dataset_info"),
    ("replay.info", "DatasetInfo", "replay.dataset_info"),
    ("replay.info", "ShardInfo", "replay.dataset_info"),
    ("replay.info", "parse_manifest", "replay.dataset_info"),
    ("replay.reader", "default_reader_func", "replay.default_reader"),
    ("replay.manifest", "MAX_COMMITS", "replay.manifest_commits"),
    ("replay.manifest", "MAX_DEFLATE_RATIO", "replay.manifest_splits"),
    ("replay.manifest", "MAX_SHARDS_PER_SPLIT", "replay.manifest_splits"),
    ("replay.manifest", "MAX_SPLITS", "replay.manifest_splits"),
    ("replay.manifest", "shard_name_problem", "replay.manifest_splits"),
    ("replay.records", "FRAME_BYTES", "replay.frames"),
    ("replay.records", "masked_crc32c", "replay.frames"),
    ("replay.records", "merge_ranges", "replay.frames"),
    ("replay.source", "Decoder", "replay.example_decoder"),
    ("replay.source", "Element", "replay.example_decoder"),
    ("replay.source", "ExampleError", "replay.example_wire"),
    ("replay.source", "decode_example", "replay.example_decoder"),
    ("replay.source", "z_score", "replay.example_decoder"),
]


@pytest.mark.parametrize(("old", "name", "home"), KEPT_ALIASES)
def test_a_moved_name_is_the_same_object_at_its_old_path(old, name, home):
    """Each name a split moved stays importable from its old module as the very same object
    (``from old import name`` keeps working), and the module holding it now defines it."""
    import importlib

    value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(home), name)
    if inspect.isfunction(value) or inspect.isclass(value):
        assert value.__module__ == home


@pytest.mark.parametrize("home", ["replay.format_commits", "replay.format_elements"])
def test_every_name_of_the_format_is_importable_from_replay_format(home):
    """`replay.format` is the one contract record and replay import (``fmt.<name>``): every
    public name of the modules split from it is the same object there."""
    import importlib

    from replay import format as fmt

    module = importlib.import_module(home)
    names = [n for n in vars(module) if not n.startswith("_") and n != "annotations"]
    names = [n for n in names if not inspect.ismodule(getattr(module, n))]
    defined = [n for n in names if getattr(getattr(module, n), "__module__", home) == home]
    assert len(defined) >= 10
    for name in defined:
        assert getattr(fmt, name) is getattr(module, name), name


@pytest.mark.parametrize("name", sorted(ERROR_BASES))
def test_replay_errors_have_the_pinned_bases(name):
    """Pins the exception hierarchy: every error is a `ReplayError` and the builtin kinds a
    caller may catch instead (FileNotFoundError, ValueError)."""
    cls = getattr(replay, name)
    bases = [c.__name__ for c in cls.__mro__]
    assert bases[0] == name
    assert bases[1 : bases.index("Exception") + 1] == ERROR_BASES[name]


def test_dataset_info_and_shard_info_fields_and_members():
    """Pins the fields of `DatasetInfo` / `ShardInfo` (frozen records) and the members of
    `DatasetInfo` users call (method or property; `files` / `errors` are properties since
    format version 3 moved them to tables read on first access)."""
    assert [f.name for f in dataclasses.fields(replay.ShardInfo)] == [
        "split",
        "filename",
        "path",
        "num_examples",
        "num_bytes",
        "offsets_path",
        "offsets_sha256",
        "commit",  # the dataset version whose commit wrote it (format version 5)
    ]
    assert [f.name for f in dataclasses.fields(replay.DatasetInfo)] == [
        "path",
        "name",
        "format_version",
        "version",  # the dataset version (format version 5; 1 before)
        "created_utc",
        "compression",
        "elements",
        "classes",
        "splits",
        "shards",
        "commits",  # one per dataset version (format version 5; one implicit before)
        "params",
        "versions",
        "manifest",
        "sources",  # behind files / errors (format version 3: tables read on first use)
    ]
    for cls in (replay.ShardInfo, replay.DatasetInfo):
        assert cls.__dataclass_params__.frozen, cls
    members = {
        "num_examples": "method",
        "shard_list": "method",
        "select_splits": "method",
        "select_features": "method",
        "tensor_specs": "method",
        "schema": "method",
        "check_shards": "method",
        "check_tables": "method",
        "check_versions": "method",
        "files": "property",
        "errors": "property",
        "num_files": "property",
        "num_errors": "property",
        "num_classes": "property",
        "element_spec": "property",
        "compression_type": "property",
    }
    for name, kind in members.items():
        member = inspect.getattr_static(replay.DatasetInfo, name)
        got = "property" if isinstance(member, property) else "method"
        assert got == kind and (kind == "property" or inspect.isfunction(member)), name
    split_arg = ("split", POS, None)
    for name in ("num_examples", "shard_list", "select_splits", "check_shards"):
        assert _parameters(getattr(replay.DatasetInfo, name))[1:] == [split_arg], name


def test_read_config_fields_are_replay_dataset_keywords():
    """Pins `ReadConfig`: a frozen, keyword-only record whose fields are `replay_dataset`
    keywords of the same defaults (its docstring documents them)."""
    fields = [
        ("reader_func", KW, None),
        ("seed", KW, None),
        ("reshuffle_each_iteration", KW, True),
        ("cycle_length", KW, None),
        ("block_length", KW, None),
        ("num_parallel_reads", KW, AUTOTUNE),
        ("deterministic", KW, None),
        ("prefetch", KW, AUTOTUNE),
        ("input_context", KW, None),
        ("service", KW, None),
        ("processing_mode", KW, "distributed_epoch"),
        ("job_name", KW, None),
    ]
    assert _parameters(replay.ReadConfig) == fields
    assert replay.ReadConfig.__dataclass_params__.frozen
    assert set(fields) <= set(SIGNATURES["replay_dataset"])
    for name, _, _ in fields:
        assert f"  {name}: " in replay.ReadConfig.__doc__, name


def test_serving_transform_is_built_by_keyword_only():
    """Pins `ServingTransform`'s constructor: four keyword-only arguments, no defaults."""
    assert _parameters(replay.ServingTransform) == [
        ("feature_fn", KW, EMPTY),
        ("transform_fn", KW, EMPTY),
        ("feature_names", KW, EMPTY),
        ("full_scale", KW, EMPTY),
    ]


def test_global_order_checkpoint_is_built_by_keyword_and_restores_a_model():
    """Pins `GlobalOrderCheckpoint` (a Keras callback): the directory, then two keyword-only
    arguments without defaults; `restore(model)` returns the position to read from and sets
    `initial_epoch`."""
    cls = replay.GlobalOrderCheckpoint
    assert _parameters(cls) == [
        ("directory", POS, EMPTY),
        ("save_every_steps", KW, EMPTY),
        ("global_batch_size", KW, EMPTY),
    ]
    assert _parameters(cls.restore) == [("self", POS, EMPTY), ("model", POS, EMPTY)]
    checkpoint = cls("ckpt", save_every_steps=10, global_batch_size=4)
    assert (checkpoint.initial_epoch, checkpoint.steps) == (0, 0)


def test_pipelines_exports_record_dataset_and_its_result():
    """Pins `pipelines.__all__`, `record_dataset`'s signature (a `RecordConfig`, or record
    options as keywords) and the fields of the `RecordResult` it returns."""
    assert pipelines.__all__ == ["RecordConfig", "RecordResult", "record_dataset"]
    assert pipelines.RecordConfig is RecordConfig
    assert _parameters(pipelines.record_dataset) == [
        ("config", POS_ONLY, None),
        ("input_pattern", KW, None),
        ("output_dir", KW, None),
        ("shard_func", KW, None),
        ("beam_args", KW, ()),
        ("options", VAR_KW, EMPTY),
    ]
    assert [f.name for f in dataclasses.fields(pipelines.RecordResult)] == [
        "output_dir",
        "num_examples",
        "num_files",
        "num_failed",
        "errors",
        "split_counts",
        "num_shards",
        "num_bytes",
        "compression",
        "seconds",
        "audio_seconds_per_second",
        "windows_per_second",
        "counters",
        "num_bad_rows",
        "translated",
        "total_tasks",
        "reused_tasks",
        "reused_windows",
        "already_complete",
        "dataset_version",
    ]


def test_record_dataset_takes_a_record_config_or_keywords_not_both(tmp_path):
    """One rule: a `RecordConfig`, or keywords that make one; each refusal is a TypeError
    before any work (nothing is written)."""
    made = RecordConfig(input_pattern="x/*.wav", output_dir=str(tmp_path / "o"), win_len=4000)
    with pytest.raises(TypeError, match=r"a RecordConfig and option keywords \(win_len\)"):
        pipelines.record_dataset(made, win_len=8000)
    with pytest.raises(TypeError, match=r"option keywords \(output_dir\)"):
        pipelines.record_dataset(made, output_dir="elsewhere")
    with pytest.raises(TypeError, match="config must be a RecordConfig, not dict"):
        pipelines.record_dataset({"input_pattern": "x/*.wav"})
    with pytest.raises(TypeError, match="needs output_dir"):
        pipelines.record_dataset(input_pattern="x/*.wav")
    with pytest.raises(TypeError, match="unknown option 'win_length'"):
        pipelines.record_dataset(input_pattern="x", output_dir="y", win_length=4000)
    assert not (tmp_path / "o").exists()
