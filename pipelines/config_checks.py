"""Every check of a `RecordConfig` that needs no input file, in the order users have always
seen them (`validate`; `RecordConfig.__post_init__` runs it).

Each check raises `ValueError` with the one line the user sees (the config raises it as its
`UsageError`); the checks that need the inputs are planning's (`pipelines.plan.checks`).
"""

from __future__ import annotations

from typing import Any

from replay import format as fmt
from replay import storage
from replay.manifest import MAX_VALUES_PER_KEY
from transforms.audio import dtypes, labels
from transforms.audio import features as feats
from transforms.spec.compression import COMPRESSIONS
from transforms.spec.sharding import SHARD_BY
from transforms.spec.types import CHANNEL_MODES

REQUIRED = ("input_pattern", "output_dir")  # the options without a default
APPEND_TRANSFORMS = fmt.APPEND_TRANSFORMS  # --append_transform
APPEND_CHANGED = ("refuse", "skip")  # --append_changed


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def validate(config: Any) -> None:
    """Every check that needs no input file, in the order users have always seen them."""
    _check_required_and_output(config)
    _check_windows(config)
    _check_encoding(config)
    _check_sharding(config)
    _check_features_and_labels(config)


def _check_required_and_output(config: Any) -> None:
    """The required options are set; --output_dir is on a file system TensorFlow writes."""
    missing = [f"--{n}" for n in REQUIRED if getattr(config, n) is None]
    _require(not missing, f"the following arguments are required: {', '.join(missing)}")
    _require(
        not (config.resume and config.overwrite),
        "--resume and --overwrite exclude each other: --resume keeps an unfinished run's "
        "work, --overwrite deletes it",
    )
    _require(
        not (config.append and config.overwrite),
        "--append and --overwrite exclude each other: --append keeps the dataset and adds "
        "to it, --overwrite deletes it",
    )
    _require(
        config.append_transform in APPEND_TRANSFORMS,
        f"--append_transform must be one of {', '.join(APPEND_TRANSFORMS)}",
    )
    _require(
        config.append or config.append_transform == fmt.FROZEN_TRANSFORM,
        "--append_transform is for --append (a record run makes its transform)",
    )
    _require(
        config.append_changed in APPEND_CHANGED,
        f"--append_changed must be one of {', '.join(APPEND_CHANGED)}",
    )
    _require(
        config.append or config.append_changed == "refuse",
        "--append_changed is for --append",
    )
    output_scheme = storage.scheme(config.output_dir or "")
    _require(
        output_scheme in storage.DATASET_SCHEMES,
        f"--output_dir {config.output_dir}: the dataset is written and replayed with "
        f"TensorFlow's file I/O, which has no {output_scheme}:// file system (it has gs:// "
        f"and local or mounted paths): write it there ({output_scheme}:// inputs are fine)",
    )


def _check_windows(config: Any) -> None:
    """--win_len, --hop_len, --max_windows_per_signal."""
    _require(config.win_len > 0, f"--win_len must be > 0, got {config.win_len}")
    _require(
        config.win_len <= MAX_VALUES_PER_KEY,
        f"--win_len {config.win_len} is over {MAX_VALUES_PER_KEY} (2^28) samples, the most "
        "the reader takes in one element",
    )
    hop = config.hop
    _require(hop > 0, f"--hop_len must be > 0, got {hop}")
    _require(
        hop <= config.win_len,
        f"--hop_len {hop} > --win_len {config.win_len} would skip samples between windows",
    )
    _require(
        config.max_windows_per_signal is None or config.max_windows_per_signal > 0,
        f"--max_windows_per_signal must be > 0, got {config.max_windows_per_signal}",
    )


def _check_encoding(config: Any) -> None:
    """--channel_mode, the signal and feature dtypes, --compression, --sample_rate."""
    _require(config.channel_mode in CHANNEL_MODES, f"--channel_mode must be one of {CHANNEL_MODES}")
    _require(
        config.signal_dtype in dtypes.SIGNAL_DTYPES,
        f"--signal_dtype must be one of {dtypes.SIGNAL_DTYPES}",
    )
    _require(
        config.feature_dtype in fmt.FEATURE_DTYPES,
        f"--feature_dtype must be one of {fmt.FEATURE_DTYPES}",
    )
    _require(
        config.compression_name in COMPRESSIONS, f"--compression must be one of {COMPRESSIONS}"
    )
    _require(config.sample_rate is None or config.sample_rate > 0, "--sample_rate must be > 0")


def _check_sharding(config: Any) -> None:
    """--num_shards, --dataset_name (shard names), --elements_per_shard, --max_elements,
    --splits, --shard_by."""
    _require(config.num_shards is None or config.num_shards > 0, "--num_shards must be > 0")
    name = config.dataset_name  # shard names derive from it: it must not leave --output_dir
    problem = fmt.plain_name_problem(name)  # the rule every reader applies to shard names
    _require(
        problem is None,
        f"--dataset_name {name!r} must be a plain file name (no '/', '\\', leading '.' or "
        f"glob characters): it {problem}",
    )
    for flag in ("elements_per_shard", "max_elements"):
        value = getattr(config, flag)
        _require(value is None or value > 0, f"--{flag} must be > 0, got {value}")
    _require(
        config.elements_per_shard is None or config.num_shards is None,
        "--elements_per_shard and --num_shards exclude each other",
    )
    config.split_weights  # noqa: B018 - parses --splits: its ValueError names the option
    _require(
        config.shard_by in SHARD_BY,
        f"--shard_by must be one of {', '.join(SHARD_BY)}",
    )


def _check_features_and_labels(config: Any) -> None:
    """--features, --unknown_class, --label_source, --classes, --analyze_splits and the
    annotation options."""
    unknown = [n for n in config.feature_names if n not in feats.FEATURE_NAMES]
    _require(
        not unknown,
        f"--features: unknown feature {', '.join(unknown)}; "
        f"choose from {', '.join(feats.FEATURE_NAMES)} or none",
    )
    _require(
        config.unknown_class in labels.UNKNOWN_CLASS_MODES,
        f"--unknown_class must be one of {', '.join(labels.UNKNOWN_CLASS_MODES)}",
    )
    # the rules that live with their types, which raise ValueError naming the option
    labels.parse_label_source(config.label_source)
    if config.classes is not None and not config.classes.startswith(labels.CLASSES_FILE_PREFIX):
        labels.parse_classes(config.classes, read_text=str)  # @FILE: read in planning
    config.analyzed_splits  # noqa: B018
    annotated = config.annotation_config
    _require(
        annotated is None or config.shard_by != "class",
        "--shard_by class: not with --annotations",
    )
