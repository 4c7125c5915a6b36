"""Planning a record run: validate options, match inputs, decide shards — before any work.

Everything here happens in the launcher, fails fast with one clear line (`UsageError`), and
produces a frozen `RecordPlan` the pipeline is built from.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from apache_beam.io.filesystems import FileSystems

from replay import format as fmt
from transforms.audio import features as feats
from transforms.audio import formats, labels, wav
from transforms.audio.dtypes import SIGNAL_DTYPES
from transforms.audio.dtypes import resolve as resolve_signal_dtype
from transforms.audio.windows import WindowConfig
from transforms.record import annotation_job, annotation_plan, read_windows, shard_plan
from transforms.record.file_rows import CHANNEL_MODES, InputFile, ReadConfig, planned_rows
from transforms.record.preprocessing import RecordLayout
from transforms.record.write_shards import COMPRESSIONS, plan_num_shards

RUN_MARKER = ".audiorecords-run"  # written first into the output dir: "this folder is ours"
TASK_BYTES = 32 << 20  # 32 MiB of stored elements per read task, at most ...
TASKS_PER_CORE = 4  # ... and at least 4 tasks per core when there is enough data ...
MIN_TASK_ROWS = 64  # ... but never tasks of fewer than 64 elements
HEADER_THREADS = 16  # parallel header reads at planning (remote stores: latency-bound)


class UsageError(ValueError):
    """Bad arguments or inputs: the run stops before any work, with this one-line message."""


@dataclasses.dataclass(frozen=True)
class RecordPlan:
    """A validated run: inputs, configs and shard count."""

    output_dir: str
    name: str
    inputs: tuple[InputFile, ...]  # every matched file; `error` set on the unusable ones
    read: ReadConfig
    compression: str
    sharding: shard_plan.Sharding  # with the shard count per split
    tasks: tuple[shard_plan.ReadTask, ...]
    input_bytes: int
    params: Mapping[str, Any]
    classes: tuple[str, ...] = ()  # the class list in `target` order (labels.run_classes)
    analyze_splits: tuple[str, ...] = (fmt.ALL_SPLIT,)  # splits TFT's statistics come from
    annotation_errors: tuple[dict, ...] = ()  # --annotations: bad table rows (manifest errors)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)


def match_inputs(pattern: str) -> list[tuple[str, int]]:
    """(path, size) of every file `pattern` matches, sorted by path (local, gs://, s3://...).

    ``{a,b}`` alternatives are expanded (``data/**/*.{wav,flac}``); Beam's glob has none.
    """
    try:
        results = FileSystems.match(formats.expand_braces(pattern))
    except Exception as e:  # noqa: BLE001 - Beam raises BeamIOError / ValueError by scheme
        raise UsageError(f"--input_pattern {pattern!r}: cannot list files ({e})") from e
    found = {m.path: m.size_in_bytes for r in results for m in r.metadata_list}
    return sorted(found.items())


def output_dir_state(output_dir: str) -> str:
    """ "missing", "empty", "ours" (a dataset or one of our runs) or "foreign"."""
    if not FileSystems.exists(output_dir):
        return "missing"
    if "://" not in output_dir and not os.path.isdir(output_dir):
        return "foreign"  # an existing file is never ours (nor replaced)
    if "://" not in output_dir:  # every entry: Beam's local match lists no subdirectories
        entries = os.listdir(output_dir)
    else:
        pattern = output_dir.rstrip("/") + "/*"
        entries = [m.path for r in FileSystems.match([pattern]) for m in r.metadata_list]
    if not entries:
        return "empty"
    names = {e.rstrip("/").rsplit("/", 1)[-1] for e in entries}
    if fmt.MANIFEST_FILENAME in names and not _is_our_manifest(output_dir):
        return "foreign"  # e.g. a web app's manifest.json: not a dataset of ours
    return "ours" if names & {fmt.MANIFEST_FILENAME, RUN_MARKER} else "foreign"


def _is_our_manifest(output_dir: str) -> bool:
    """Whether <output_dir>/manifest.json is an audiorecords manifest (its "format" says so)."""
    try:
        path = f"{output_dir.rstrip('/')}/{fmt.MANIFEST_FILENAME}"
        with FileSystems.open(path, compression_type="uncompressed") as fh:
            return json.loads(fh.read(16 << 20)).get("format") == fmt.FORMAT_NAME
    except Exception:  # noqa: BLE001 - unreadable or not JSON: not ours
        return False


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
    name = opts.dataset_name  # shard names derive from it: it must not leave --output_dir
    problem = fmt.plain_name_problem(name)  # the rule every reader applies to shard names
    _check(
        problem is None,
        f"--dataset_name {name!r} must be a plain file name (no '/', '\\', leading '.' or glob "
        f"characters): it {problem}",
    )
    for flag in ("elements_per_shard", "max_elements"):
        value = getattr(opts, flag)
        _check(value is None or value > 0, f"--{flag} must be > 0, got {value}")
    _check(
        opts.elements_per_shard is None or opts.num_shards is None,
        "--elements_per_shard and --num_shards exclude each other",
    )
    try:
        splits = shard_plan.parse_splits(opts.splits)
        if opts.shard_by not in shard_plan.SHARD_BY:
            raise ValueError(f"--shard_by must be one of {', '.join(shard_plan.SHARD_BY)}")
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
        fixed_classes = labels.parse_classes(opts.classes, read_text=_read_classes_file)
        analyze = read_windows.analyzed_splits(
            opts.analyze_splits, split_names=tuple(n for n, _ in splits) or (fmt.ALL_SPLIT,)
        )
    except ValueError as e:
        raise UsageError(str(e)) from e

    matched = match_inputs(opts.input_pattern)
    _check(bool(matched), f"--input_pattern {opts.input_pattern!r} matches no file")
    csv_labels = _read_csv_labels(csv_path) if csv_path else None
    sharding = shard_plan.Sharding(
        shard_by=opts.shard_by,
        splits=splits,
        split_base=shard_plan.pattern_base(opts.input_pattern),
        elements_per_shard=opts.elements_per_shard,
        max_elements=opts.max_elements,
        shard_func=shard_func,
    )
    labelled = [
        _with_class(_input_file(i, p, s, label_kind, csv_labels, sharding), fixed_classes, opts)
        for i, (p, s) in enumerate(matched)
    ]  # class ids come from every usable label, known here: never from the data
    try:
        annotated = annotation_job.config_from_options(opts)
    except ValueError as e:
        raise UsageError(str(e)) from e
    _check(
        annotated is None or opts.shard_by != "class", "--shard_by class: not with --annotations"
    )
    if annotated is not None:  # labels come from the tables (after the headers), not file names
        labelled = [
            InputFile(index=i, path=p, size_bytes=s, label="", split=f.split)
            for (i, (p, s)), f in zip(enumerate(matched), labelled, strict=True)
        ]
    classes = labels.run_classes((f.label for f in labelled if f.error is None), fixed_classes)
    inputs = scan_headers(labelled)
    infos = [f.info for f in inputs if f.info is not None]
    try:  # from the headers: a dtype that holds every file exactly, or one line saying why not
        headers = [(f.path, f.info) for f in inputs if f.info is not None]
        dtype = resolve_signal_dtype(opts.signal_dtype, headers)
    except ValueError as e:
        raise UsageError(str(e)) from e
    bad = [f for f in inputs if f.error]
    _check(not (opts.strict and bad), f"--strict: {bad[0].path}: {bad[0].error}" if bad else "")
    if names:
        rate = opts.sample_rate or (infos[0].sample_rate if infos else 16000)
        try:
            feature_config.validate(win_len=opts.win_len, sample_rate=rate)
        except ValueError as e:
            raise UsageError(f"feature parameters: {e}") from e
    shapes = (
        feats.feature_shapes(feature_config, win_len=opts.win_len, sample_rate=rate)
        if names
        else {}
    )
    sharding = dataclasses.replace(
        sharding, classes=tuple(sorted({f.label for f in inputs if f.label}))
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
        feature_shapes=shapes,
        normalize=opts.normalize,
        with_channel=opts.channel_mode == "split",
        feature_dtype=opts.feature_dtype,
    )
    window = WindowConfig(
        win_len=opts.win_len, hop_len=hop, pad=opts.pad, max_windows=opts.max_windows_per_signal
    )
    annotation_errors: tuple[dict, ...] = ()
    if annotated is not None:  # every file's windows and labels, from the tables
        try:
            inputs, notes = annotation_job.annotate(
                inputs,
                annotated,
                window=window,
                split_channels=opts.channel_mode == "split",
                sample_rate=opts.sample_rate,
                fixed_classes=fixed_classes,
                split_base=sharding.split_base,
                strict=opts.strict,
            )
        except ValueError as e:
            raise UsageError(str(e)) from e
        classes, annotation_errors = notes.classes, notes.errors
        layout = dataclasses.replace(
            layout, num_label_classes=len(classes), max_events=notes.max_events
        )
    read_config = ReadConfig(
        window=window,
        layout=layout,
        features=feature_config,
        channel_mode=opts.channel_mode,
        sample_rate=opts.sample_rate,
        strict=opts.strict,
        signal_dtype=dtype,
    )
    input_bytes = sum(f.size_bytes for f in inputs)
    feature_floats = sum(math.prod(s) for s in shapes.values()) * (2 if opts.normalize else 1)
    row_bytes = opts.win_len * 4 + feature_floats * 4  # stored bytes per element, about
    growth = 1 + feature_floats * 4 / (2 * opts.win_len)  # stored bytes per input byte
    estimated = {
        split: plan_num_shards(
            int(growth * sum(f.size_bytes for f in inputs if f.split == split)),
            num_shards=opts.num_shards,
        )
        for split in sharding.split_names
    }
    usable = [f for f in inputs if f.error is None]
    segments = shard_plan.plan_segments(
        [
            (f, f.annotation.num_rows if f.annotation else planned_rows(f.info, read_config))
            for f in usable
        ],
        sharding,
    )
    sharding = dataclasses.replace(
        sharding, num_shards=shard_plan.split_shard_counts(segments, sharding, estimated)
    )
    total_rows = sum(kept for _, kept, _ in segments)
    _check(
        not (opts.normalize and names and total_rows)
        or any(kept for f, kept, _ in segments if f.split in analyze),
        f"--analyze_splits {','.join(analyze)}: no window in the analysed split(s) to compute "
        "statistics on; choose other splits, weights or --no_normalize",
    )
    rows_per_task = max(
        MIN_TASK_ROWS,
        min(TASK_BYTES // row_bytes, -(-total_rows // (TASKS_PER_CORE * (os.cpu_count() or 1)))),
    )
    params = {k: getattr(opts, k) for k in sorted(RECORD_PARAMS)}
    params["hop_len"] = hop
    params["features"] = list(names)
    if annotated is not None:  # only then: a run without annotations keeps its manifest bytes
        params = dict(sorted({**params, **annotation_job.option_params(opts)}.items()))
    return RecordPlan(
        output_dir=output_dir,
        name=opts.dataset_name,
        inputs=inputs,
        read=read_config,
        compression=compression,
        sharding=sharding,
        tasks=annotation_plan.segment_tasks(
            shard_plan.plan_tasks(segments, rows_per_task=rows_per_task)
        ),
        input_bytes=input_bytes,
        params=json.loads(json.dumps(params)),
        classes=classes,
        analyze_splits=analyze,
        annotation_errors=annotation_errors,
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
    "feature_dtype",
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
    "classes",
    "unknown_class",
    "analyze_splits",
)


def _input_file(
    index: int,
    path: str,
    size: int,
    kind: str,
    csv_labels: Mapping[str, str] | None,
    sharding: shard_plan.Sharding,
) -> InputFile:
    split = shard_plan.split_of(path, sharding)
    try:
        label = labels.label_for(path, kind=kind, csv_labels=csv_labels)
    except labels.LabelError as e:
        reason = str(e).split(": ", 1)[-1]
        return InputFile(index=index, path=path, size_bytes=size, error=reason, split=split)
    return InputFile(index=index, path=path, size_bytes=size, label=label, split=split)


def _with_class(f: InputFile, classes: tuple[str, ...] | None, opts: Any) -> InputFile:
    """A file whose label is outside --classes (or no class name) becomes an error entry."""
    keep = opts.unknown_class == "keep"
    reason = None if f.error else labels.class_error(f.label, classes, keep_unknown=keep)
    return f if reason is None else dataclasses.replace(f, error=reason)


def _read_classes_file(path: str) -> str:
    try:
        with FileSystems.open(path, compression_type="uncompressed") as fh:
            return fh.read().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--classes @{path}: cannot read the class list ({e})") from e


def _read_csv_labels(csv_path: str) -> dict[str, str]:
    try:
        with FileSystems.open(csv_path, compression_type="uncompressed") as fh:
            text = fh.read().decode("utf-8-sig")
        return labels.read_label_csv(text, source=csv_path)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"--label_source csv:{csv_path}: {e}") from e


def _read_header(f: InputFile) -> InputFile:
    if f.error is not None:
        return f
    try:
        with FileSystems.open(f.path, compression_type="uncompressed") as fh:
            return dataclasses.replace(f, info=wav.read_info(fh, path=f.path))
    except wav.WavDecodeError as e:
        return dataclasses.replace(f, error=e.reason)
    except Exception as e:  # noqa: BLE001 - any unreadable file is reported, never fatal
        return dataclasses.replace(f, error=f"{type(e).__name__}: {e}")


def scan_headers(inputs: list[InputFile]) -> tuple[InputFile, ...]:
    """Reads every file's header in parallel (a few KB each); bad ones get their `error`."""
    with concurrent.futures.ThreadPoolExecutor(HEADER_THREADS) as pool:
        return tuple(pool.map(_read_header, inputs))
