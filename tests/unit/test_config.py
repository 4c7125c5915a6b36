"""Planning step 1, validation: `RecordConfig` is built the same from argv and from keywords,
checks every option once with the one-line messages users see, and derives the manifest params."""

from __future__ import annotations

import dataclasses
import json

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.config import RecordConfig, UsageError, parse_splits
from pipelines.plan import UsageError as PlanUsageError
from pipelines.record import RecordOptions, help_parser

BASE = {"input_pattern": "in/*.wav", "output_dir": "out"}


def _from_argv(*extra: str) -> RecordConfig:
    argv = ["--input_pattern", "in/*.wav", "--output_dir", "out", *extra]
    return RecordConfig.from_namespace(PipelineOptions(argv).view_as(RecordOptions))


def test_usage_error_is_the_one_plan_exports():
    assert PlanUsageError is UsageError and issubclass(UsageError, ValueError)


def test_keywords_build_the_config_the_command_line_builds():
    assert _from_argv() == RecordConfig(**BASE)
    from_keywords = RecordConfig(
        **BASE,
        win_len="16000",  # text is parsed as on the command line
        features=["log_mel", "mfcc"],  # lists are comma-joined
        classes=("rain", "bird"),
        lower_edge_hz=20,  # an int for a float option becomes a float, as argparse makes it
        normalize=False,
        pad=True,
        hop_len=None,  # None is the default
    )
    from_argv = _from_argv(
        *"--win_len 16000 --features log_mel,mfcc --classes rain,bird --lower_edge_hz 20".split(),
        "--no_normalize",
        "--pad",
    )
    assert from_keywords == from_argv
    assert type(from_keywords.lower_edge_hz) is float and from_keywords.classes == "rain,bird"
    assert from_keywords.feature_names == ("log_mel", "mfcc")
    with pytest.raises(dataclasses.FrozenInstanceError):
        from_keywords.win_len = 1  # type: ignore[misc]


def test_manifest_params_are_the_options_by_name_sorted():
    params = RecordConfig(**BASE, win_len=16000).params()
    # Written out by hand: the params every manifest has had (output_dir and overwrite are not
    # part of the dataset; hop_len is the hop used; features the list of names).
    expected = {
        "analyze_splits": None,
        "channel_mode": "first",
        "classes": None,
        "compression": "AUTO",
        "dataset_name": "audiorecords",
        "elements_per_shard": None,
        "feature_dtype": "float32",  # format version 2's --feature_dtype
        "features": ["log_mel"],
        "fft_length": 512,
        "frame_length": 400,
        "frame_step": 160,
        "hop_len": 16000,
        "input_pattern": "in/*.wav",
        "label_source": "filename",
        "lower_edge_hz": 20.0,
        "max_elements": None,
        "max_windows_per_signal": None,
        "normalize": True,
        "num_mel_bins": 64,
        "num_mfccs": 13,
        "num_shards": None,
        "pad": False,
        "sample_rate": None,
        "shard_by": "hash",
        "signal_dtype": "auto",
        "splits": None,
        "strict": False,
        "unknown_class": "error",
        "upper_edge_hz": None,
        "win_len": 16000,
    }
    assert json.dumps(params) == json.dumps(expected)  # same keys, order and values
    annotated = RecordConfig(**BASE, annotations="t/*.txt").params()
    assert list(annotated) == sorted(annotated)
    assert set(annotated) - set(params) == {
        "annotations",
        "annotation_format",
        "annotation_column",
        "min_label_overlap",
        "min_label_fraction",
        "background_class",
        "drop_background",
        "event_windows",
        "background_per_file",
        "background_seed",
    }
    assert annotated["min_label_overlap"] == 0.25 and annotated["event_windows"] == "grid"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"win_len": 0}, "--win_len must be > 0, got 0"),
        ({"win_len": (1 << 28) + 1}, "--win_len 268435457 is over 268435456 (2^28) samples"),
        ({"win_len": 100, "hop_len": 200}, "--hop_len 200 > --win_len 100 would skip samples"),
        ({"hop_len": -1}, "--hop_len must be > 0, got -1"),
        ({"max_windows_per_signal": 0}, "--max_windows_per_signal must be > 0, got 0"),
        ({"channel_mode": "left"}, "--channel_mode must be one of ('first', 'mean', 'split')"),
        ({"signal_dtype": "int8"}, "--signal_dtype must be one of"),
        ({"compression": "BZIP2"}, "--compression must be one of ('AUTO', 'GZIP', 'ZLIB', 'NONE')"),
        ({"sample_rate": 0}, "--sample_rate must be > 0"),
        ({"num_shards": 0}, "--num_shards must be > 0"),
        ({"dataset_name": "../x"}, "--dataset_name '../x' must be a plain file name"),
        ({"elements_per_shard": 0}, "--elements_per_shard must be > 0, got 0"),
        ({"elements_per_shard": 5, "num_shards": 2}, "exclude each other"),
        ({"splits": "train=80,train=20"}, "--splits"),
        ({"shard_by": "size"}, "--shard_by must be one of hash, file, class"),
        ({"features": "log_mel,chroma"}, "--features: unknown feature chroma"),
        ({"label_source": "folder"}, "--label_source must be filename, dirname or csv:PATH"),
        ({"classes": "a,,b"}, "--classes 'a,,b' has an empty class name"),
        ({"unknown_class": "drop"}, "--unknown_class must be one of error, keep"),
        ({"analyze_splits": "train"}, "--analyze_splits needs --splits"),
        ({"splits": "a=50,b=50"}, "--splits has no split named 'train'"),
        ({"annotations": "t/*", "shard_by": "class"}, "--shard_by class: not with --annotations"),
        ({"annotations": "t/*", "annotation_format": "xls"}, "--annotation_format must be one of"),
        ({"annotations": "t/*", "background_per_file": 2}, "needs --event_windows centered"),
        ({"annotations": "t/*", "min_label_fraction": 2.0}, "--min_label_fraction must be in"),
        ({"win_len": "many"}, "argument --win_len: invalid int value: 'many'"),
    ],
)
def test_each_invalid_value_is_one_line_naming_the_option(options, message):
    with pytest.raises(UsageError) as raised:
        RecordConfig(**BASE, **options)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_required_options_are_checked_by_the_config_not_the_parser():
    options = PipelineOptions(["--win_len", "16000"]).view_as(RecordOptions)  # parses fine
    with pytest.raises(UsageError, match="^the following arguments are required: --input_pattern"):
        RecordConfig.from_namespace(options)
    with pytest.raises(TypeError):  # Python: a required keyword, as in any function
        RecordConfig(input_pattern="x")  # type: ignore[call-arg]


def test_every_option_has_one_flag_with_the_configs_default_and_help():
    parser = help_parser()
    text = parser.format_help()
    parsed = vars(parser.parse_args(["--input_pattern", "x", "--output_dir", "y"]))
    for field in dataclasses.fields(RecordConfig):
        flag = "--no_normalize" if field.name == "normalize" else f"--{field.name}"
        assert flag in text, flag
        assert parsed[field.name] == getattr(RecordConfig(**BASE), field.name) or field.name in BASE
    assert "--runner" in text  # the epilog points to Beam's options


def test_parse_splits_normalises_and_rejects_bad_specs():
    assert parse_splits("train=80,validation=10,test=10") == (
        ("train", 0.8),
        ("validation", 0.1),
        ("test", 0.1),
    )
    assert parse_splits(None) == ()
    for bad in ("train", "train=0", "a=1,a=2", "all=1", "x/y=1", "t=abc"):
        with pytest.raises(ValueError, match="--splits"):
            parse_splits(bad)


def test_the_parsers_and_check_constants_that_moved_keep_their_names_here():
    """`pipelines.config` re-exports what moved to `pipelines.option_values` and
    `pipelines.config_checks`: the same objects."""
    from pipelines import config, config_checks, option_values

    moved = {
        "EVENT_WINDOWS": option_values,
        "TRAIN_SPLIT": option_values,
        "AnnotationConfig": option_values,
        "parse_splits": option_values,
        "parse_analyze_splits": option_values,
        "REQUIRED": config_checks,
        "APPEND_TRANSFORMS": config_checks,
        "APPEND_CHANGED": config_checks,
    }
    assert set(moved) <= set(config.__all__)
    for name, home in moved.items():
        assert getattr(config, name) is getattr(home, name), name
