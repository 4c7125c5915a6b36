"""Planning a record run: validate options, match inputs, decide shards — before any work.

Everything here happens in the launcher, fails fast with one clear line (`UsageError`), and
produces a frozen `RecordPlan` the pipeline is built from.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from apache_beam.io.filesystems import FileSystems

from replay import format as fmt
from transforms import features as feats
from transforms import labels, sharding
from transforms.preprocessing import RecordLayout
from transforms.read import CHANNEL_MODES, SIGNAL_DTYPES, InputFile, ReadConfig
from transforms.shards import COMPRESSIONS, plan_num_shards
from transforms.windows import WindowConfig

RUN_MARKER = ".audiorecords-run"  # written first into the output dir: "this folder is ours"


class UsageError(ValueError):
    """Bad arguments or inputs: the run stops before any work, with this one-line message."""


@dataclasses.dataclass(frozen=True)
class RecordPlan:
    """A validated run: inputs, configs and shard count."""

    output_dir: str
    name: str
    inputs: tuple[InputFile, ...]
    read: ReadConfig
    signal_dtype: str  # "auto" or a fixed dtype
    compression: str
    sharding: sharding.Sharding
    num_shards: Mapping[str, int]  # per split; replaced at run time under --elements_per_shard
    input_bytes: int
    params: Mapping[str, Any]


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)


def match_inputs(pattern: str) -> list[tuple[str, int]]:
    """(path, size) of every file `pattern` matches, sorted by path (local, gs://, s3://...)."""
    try:
        results = FileSystems.match([pattern])
    except Exception as e:  # noqa: BLE001 - Beam raises BeamIOError / ValueError by scheme
        raise UsageError(f"--input_pattern {pattern!r}: cannot list files ({e})") from e
    found = {m.path: m.size_in_bytes for r in results for m in r.metadata_list}
    return sorted(found.items())


def output_dir_state(output_dir: str) -> str:
    """ "missing", "empty", "ours" (a dataset or one of our runs) or "foreign"."""
    if not FileSystems.exists(output_dir):
        return "missing"
    entries = [
        m.path for r in FileSystems.match([output_dir.rstrip("/") + "/*"]) for m in r.metadata_list
    ]
    if not entries:
        return "empty"
    names = {e.rstrip("/").rsplit("/", 1)[-1] for e in entries}
    return "ours" if names & {fmt.MANIFEST_FILENAME, RUN_MARKER} else "foreign"


def plan_record(opts: Any, *, shard_func: Callable[[dict], int] | None = None) -> RecordPlan:
    """Validates `opts` (a RecordOptions view) and matches the inputs.

    Args:
      opts: the parsed options.
      shard_func: optional element -> shard index callable (Python API).

    Raises:
      UsageError: the first problem found, as one line naming the option.
    """
    _check(opts.win_len > 0, f"--win_len must be > 0, got {opts.win_len}")
    hop = opts.win_len if opts.hop_len is None else opts.hop_len
    _check(hop > 0, f"--hop_len must be > 0, got {hop}")
    _check(
        hop <= opts.win_len,
        f"--hop_len {hop} > --win_len {opts.win_len} would skip samples between windows",
    )
    _check(
        opts.max_windows_per_signal is None or opts.max_windows_per_signal > 0,
        f"--max_windows_per_signal must be > 0, got {opts.max_windows_per_signal}",
    )
    _check(opts.channel_mode in CHANNEL_MODES, f"--channel_mode must be one of {CHANNEL_MODES}")
    _check(opts.signal_dtype in SIGNAL_DTYPES, f"--signal_dtype must be one of {SIGNAL_DTYPES}")
    compression = opts.compression.upper()
    _check(compression in COMPRESSIONS, f"--compression must be one of {COMPRESSIONS}")
    _check(opts.sample_rate is None or opts.sample_rate > 0, "--sample_rate must be > 0")
    _check(opts.num_shards is None or opts.num_shards > 0, "--num_shards must be > 0")
    for flag in ("elements_per_shard", "max_elements"):
        value = getattr(opts, flag)
        _check(value is None or value > 0, f"--{flag} must be > 0, got {value}")
    _check(
        opts.elements_per_shard is None or opts.num_shards is None,
        "--elements_per_shard and --num_shards exclude each other",
    )
    try:
        splits = sharding.parse_splits(opts.splits)
        if opts.shard_by not in sharding.SHARD_BY:
            raise ValueError(f"--shard_by must be one of {', '.join(sharding.SHARD_BY)}")
    except ValueError as e:
        raise UsageError(str(e)) from e
    names = tuple(n.strip() for n in opts.features.split(",") if n.strip())
    names = () if names == ("none",) else names
    unknown = [n for n in names if n not in feats.FEATURE_NAMES]
    _check(
        not unknown,
        f"--features: unknown feature {', '.join(unknown)}; "
        f"choose from {', '.join(feats.FEATURE_NAMES)} or none",
    )
    feature_config = feats.FeatureConfig(
        names=names,
        frame_length=opts.frame_length,
        frame_step=opts.frame_step,
        fft_length=opts.fft_length,
        num_mel_bins=opts.num_mel_bins,
        lower_edge_hz=opts.lower_edge_hz,
        upper_edge_hz=opts.upper_edge_hz,
        num_mfccs=opts.num_mfccs,
    )
    try:
        label_kind, csv_path = labels.parse_label_source(opts.label_source)
    except ValueError as e:
        raise UsageError(str(e)) from e

    matched = match_inputs(opts.input_pattern)
    _check(bool(matched), f"--input_pattern {opts.input_pattern!r} matches no file")
    if names:
        rate = opts.sample_rate or _first_sample_rate(matched)
        try:
            feature_config.validate(win_len=opts.win_len, sample_rate=rate)
        except ValueError as e:
            raise UsageError(f"feature parameters: {e}") from e
    shapes = (
        feats.feature_shapes(feature_config, win_len=opts.win_len, sample_rate=rate)
        if names
        else {}
    )
    csv_labels = _read_csv_labels(csv_path) if csv_path else None
    shard_plan = sharding.Sharding(
        shard_by=opts.shard_by,
        splits=splits,
        split_base=sharding.pattern_base(opts.input_pattern),
        elements_per_shard=opts.elements_per_shard,
        max_elements=opts.max_elements,
        channel_split=opts.channel_mode == "split",
        hop_len=hop,
        shard_func=shard_func,
    )
    inputs = tuple(
        _input_file(i, p, s, label_kind, csv_labels, shard_plan) for i, (p, s) in enumerate(matched)
    )
    shard_plan = dataclasses.replace(
        shard_plan, classes=tuple(sorted({f.label for f in inputs if f.label}))
    )

    output_dir = opts.output_dir.rstrip("/") or "/"
    state = output_dir_state(output_dir)
    _check(
        state in ("missing", "empty") or opts.overwrite,
        f"--output_dir {output_dir} exists; pass --overwrite to replace it",
    )
    _check(
        state != "foreign",
        f"--output_dir {output_dir} holds files that are not an audiorecords dataset; "
        "refusing to overwrite it",
    )

    layout = RecordLayout(
        feature_shapes=shapes, normalize=opts.normalize, with_channel=opts.channel_mode == "split"
    )
    window = WindowConfig(
        win_len=opts.win_len, hop_len=hop, pad=opts.pad, max_windows=opts.max_windows_per_signal
    )
    input_bytes = sum(f.size_bytes for f in inputs)
    feature_floats = sum(math.prod(s) for s in shapes.values()) * (2 if opts.normalize else 1)
    growth = 1 + feature_floats * 4 / (2 * opts.win_len)  # stored bytes per input byte
    num_shards = {}
    for split in shard_plan.split_names:
        split_bytes = sum(f.size_bytes for f in inputs if f.split == split)
        count = plan_num_shards(int(split_bytes * growth), num_shards=opts.num_shards)
        if opts.shard_by == "class":
            count = max(count, len(shard_plan.classes))
        num_shards[split] = count
    params = {k: getattr(opts, k) for k in sorted(RECORD_PARAMS)}
    params["hop_len"] = hop
    params["features"] = list(names)
    return RecordPlan(
        output_dir=output_dir,
        name=opts.dataset_name,
        inputs=inputs,
        read=ReadConfig(
            window=window,
            layout=layout,
            features=feature_config,
            channel_mode=opts.channel_mode,
            sample_rate=opts.sample_rate,
            strict=opts.strict,
        ),
        signal_dtype=opts.signal_dtype,
        compression=compression,
        sharding=shard_plan,
        num_shards=num_shards,
        input_bytes=input_bytes,
        params=json.loads(json.dumps(params)),
    )


RECORD_PARAMS = (
    "input_pattern",
    "win_len",
    "hop_len",
    "pad",
    "max_windows_per_signal",
    "label_source",
    "sample_rate",
    "channel_mode",
    "signal_dtype",
    "features",
    "frame_length",
    "frame_step",
    "fft_length",
    "num_mel_bins",
    "lower_edge_hz",
    "upper_edge_hz",
    "num_mfccs",
    "normalize",
    "compression",
    "num_shards",
    "dataset_name",
    "strict",
    "splits",
    "shard_by",
    "elements_per_shard",
    "max_elements",
)


def _input_file(
    index: int,
    path: str,
    size: int,
    kind: str,
    csv_labels: Mapping[str, str] | None,
    shard_plan: sharding.Sharding,
) -> InputFile:
    split = sharding.split_of(path, shard_plan)
    try:
        label = labels.label_for(path, kind=kind, csv_labels=csv_labels)
    except labels.LabelError as e:
        reason = str(e).split(": ", 1)[-1]
        return InputFile(index=index, path=path, size_bytes=size, label_error=reason, split=split)
    return InputFile(index=index, path=path, size_bytes=size, label=label, split=split)


def _read_csv_labels(csv_path: str) -> dict[str, str]:
    try:
        with FileSystems.open(csv_path, compression_type="uncompressed") as fh:
            text = fh.read().decode("utf-8-sig")
        return labels.read_label_csv(text, source=csv_path)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"--label_source csv:{csv_path}: {e}") from e


def _first_sample_rate(matched: list[tuple[str, int]]) -> int:
    """Sample rate of the first readable input (to validate feature parameters up front)."""
    from transforms import wav

    for path, _ in matched[:16]:
        try:
            with FileSystems.open(path, compression_type="uncompressed") as fh:
                return wav.read_info(fh, path=path).sample_rate
        except Exception:  # noqa: BLE001 - bad files are reported by the read stage
            continue
    return 16000
