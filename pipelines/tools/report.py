"""What a recorded dataset holds, as plain data and text: pure functions of a `DatasetInfo`.

Everything here reads only the manifest (through `replay.load_info`): no shard is opened and
neither TensorFlow nor Beam is imported. `pipelines.inspect` prints `format_summary`;
`pipelines.tools.report_html` puts the same text beside its plots.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipelines.tools import report_annotations
from pipelines.tools.text_table import text_table
from replay import DatasetInfo

MAX_ERRORS_SHOWN = 10  # failed source files listed before "... and N more"
MAX_REASON_CHARS = 160


@dataclasses.dataclass(frozen=True)
class ShardStats:
    """Shard file sizes of one split (or of all splits: split "total").

    Attributes:
      split: split name.
      count: number of shard files.
      num_examples: records in those files.
      min_bytes / median_bytes / max_bytes / total_bytes: file sizes.
    """

    split: str
    count: int
    num_examples: int
    min_bytes: int
    median_bytes: int
    max_bytes: int
    total_bytes: int


@dataclasses.dataclass(frozen=True)
class FileStats:
    """The decoded source files of the manifest.

    Attributes:
      count: decoded files.
      failed: files that failed to decode (manifest ``errors``).
      durations: each file's duration in seconds, in manifest order.
      num_windows: each file's window count, in manifest order.
      names: each file's base name, in manifest order.
      sample_rates / subtypes / channels: distinct values, sorted.
    """

    count: int
    failed: int
    durations: tuple[float, ...]
    num_windows: tuple[int, ...]
    names: tuple[str, ...]
    sample_rates: tuple[int, ...]
    subtypes: tuple[str, ...]
    channels: tuple[int, ...]

    @property
    def total_seconds(self) -> float:
        return float(sum(self.durations))


def human_bytes(num: float) -> str:
    """`num` bytes as a short decimal size: ``812 B``, ``1.5 kB``, ``3.21 GB``."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(num) < 1000 or unit == "TB":
            return f"{num:.0f} {unit}" if unit == "B" else f"{num:.3g} {unit}"
        num /= 1000
    raise AssertionError("unreachable")


def shard_stats(info: DatasetInfo) -> list[ShardStats]:
    """Size statistics of the shards of each split, then a "total" row over all splits."""
    groups = [(split, info.shard_list(split)) for split in info.splits]
    if len(groups) > 1:
        groups.append(("total", info.shard_list()))
    out = []
    for split, shards in groups:
        sizes = [s.num_bytes for s in shards] or [0]
        out.append(
            ShardStats(
                split=split,
                count=len(shards),
                num_examples=sum(s.num_examples for s in shards),
                min_bytes=min(sizes),
                median_bytes=int(statistics.median(sizes)),
                max_bytes=max(sizes),
                total_bytes=sum(sizes),
            )
        )
    return out


def _file_split(entry: Mapping[str, Any], splits: Sequence[str]) -> str:
    split = entry.get("split")
    return split if split in splits else splits[0]


def class_counts(info: DatasetInfo) -> dict[str, dict[str, int]]:
    """Windows per class and split, from the manifest's ``files`` (label, split, num_windows).

    Classes come in `target` order (vocabulary), then any label missing from the vocabulary.
    """
    if report_annotations.is_annotated(info):  # --annotations: windows per label
        return report_annotations.class_counts(info)
    splits = list(info.splits) or ["all"]
    labels = list(info.classes) + sorted(
        {str(f.get("label")) for f in info.files} - set(info.classes)
    )
    counts = {label: dict.fromkeys(splits, 0) for label in labels}
    for f in info.files:
        counts[str(f.get("label"))][_file_split(f, splits)] += int(f.get("num_windows", 0))
    return counts


def file_stats(info: DatasetInfo) -> FileStats:
    """Durations, window counts and formats of the decoded source files."""
    files = list(info.files)
    return FileStats(
        count=len(files),
        failed=info.num_errors,
        durations=tuple(
            f.get("num_frames", 0) / f["sample_rate"] if f.get("sample_rate") else 0.0
            for f in files
        ),
        num_windows=tuple(int(f.get("num_windows", 0)) for f in files),
        names=tuple(str(f.get("path", "?")).rsplit("/", 1)[-1] for f in files),
        sample_rates=tuple(sorted({int(f.get("sample_rate", 0)) for f in files})),
        subtypes=tuple(sorted({str(f.get("subtype", "?")) for f in files})),
        channels=tuple(sorted({int(f.get("num_channels", 0)) for f in files})),
    )


def image_features(info: DatasetInfo) -> list[str]:
    """Keys of float32 [frames, bins] features (e.g. log_mel, log_mel_norm), in manifest order."""
    return [
        key
        for key, spec in info.elements.items()
        if spec.dtype == "float32" and len(spec.shape) == 2 and key != "signal"
    ]


def display_feature(info: DatasetInfo) -> str | None:
    """The feature drawn beside each example waveform: log_mel, else spectrogram, else mfcc."""
    available = set(image_features(info))
    for key in ("log_mel", "spectrogram", "mfcc"):
        if key in available:
            return key
    return next(iter(sorted(available)), None)


def _shape(shape: Iterable[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _truncate(text: str, limit: int = MAX_REASON_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _join(values: Iterable[Any], unit: str = "") -> str:
    return ", ".join(f"{v}{unit}" for v in values) or "-"


def _plain(value: Any) -> Any:
    """A `DatasetInfo` value (read-only mappings, tuples) as plain JSON-serialisable data."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def printable(text: str) -> str:
    """`text` safe to print and to write as UTF-8: a lone surrogate (a manifest may hold any
    JSON string; a file name that is not UTF-8 decodes to one) becomes ``\\udcxx``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _wrap(items: Sequence[str], width: int = 96) -> list[str]:
    """`items` joined by two spaces into indented lines of at most `width` characters."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 2 + len(item) <= width:
            lines[-1] += "  " + item
        else:
            lines.append("  " + item)
    return lines or ["  -"]


def commit_rows(info: DatasetInfo) -> list[tuple[Any, ...]]:
    """One row per dataset version (format version 5's commits; one before): version, mode,
    source files, windows, failed files, when, input pattern; a header row first."""
    rows: list[tuple[Any, ...]] = [
        ("version", "mode", "files", "windows", "errors", "created", "input pattern")
    ]
    for commit in info.commits:
        rows.append(
            (
                commit["version"],
                commit["mode"],
                commit["num_files"],
                commit["num_examples"],
                commit["num_errors"],
                commit["created_utc"] or "-",
                commit["input_pattern"] or "-",
            )
        )
    return rows


def summary_sections(info: DatasetInfo) -> list[tuple[str, list[str]]]:
    """The summary as (title, lines) sections; `format_summary` joins them."""
    files = file_stats(info)
    head = [
        f"name:         {info.name} (format_version {info.format_version}, "
        f"dataset version {info.version})",
        f"created:      {info.created_utc or '-'}",
        f"compression:  {info.compression}",
        f"examples:     {info.num_examples()} windows in {len(info.splits)} split(s), "
        f"{info.num_classes} classes, from {files.count} source files ({files.failed} failed)",
    ]
    elements = text_table(
        [("key", "dtype", "shape", "encoding")]
        + [(k, s.dtype, _shape(s.shape), s.encoding) for k, s in info.elements.items()]
    )
    counts = class_counts(info)
    split_names = list(info.splits) or ["all"]
    target = {c: i for i, c in enumerate(info.classes)}
    classes = text_table(
        [("target", "class", *split_names)]
        + [(target.get(c, "-"), c, *per.values()) for c, per in counts.items()]
    )
    listed = sum(sum(per.values()) for per in counts.values())
    if listed != info.num_examples():
        classes.append(
            f"  (counted from manifest files: {listed} windows decoded, "
            f"{info.num_examples()} stored)"
        )
    splits = text_table(
        [("split", "examples", "shards", "min", "median", "max", "total")]
        + [
            (
                st.split,
                st.num_examples,
                st.count,
                human_bytes(st.min_bytes),
                human_bytes(st.median_bytes),
                human_bytes(st.max_bytes),
                human_bytes(st.total_bytes),
            )
            for st in shard_stats(info)
        ]
    )
    params = _wrap([f"{k}={json.dumps(_plain(v))}" for k, v in info.params.items()])
    sources = [
        f"  decoded: {files.count} files, {files.total_seconds:.1f} s of audio, "
        f"{sum(files.num_windows)} windows",
        f"  sample rates: {_join(files.sample_rates, ' Hz')}; subtypes: {_join(files.subtypes)}; "
        f"channels: {_join(files.channels)}",
        f"  failed: {files.failed}",
    ]
    for err in list(info.errors)[:MAX_ERRORS_SHOWN]:
        sources.append(f"    {err.get('path', '?')}: {_truncate(err.get('reason', '?'))}")
    if files.failed > MAX_ERRORS_SHOWN:
        sources.append(
            f"    ... and {files.failed - MAX_ERRORS_SHOWN} more (manifest.json 'errors' lists all)"
        )
    versions = _wrap([f"{k} {v}" for k, v in info.versions.items()])
    history = []
    if len(info.commits) > 1:  # appended to: each version's own share
        history = [(f"Dataset versions ({len(info.commits)})", text_table(commit_rows(info)))]
    return [
        (f"audiorecords dataset {info.path}", head),
        *history,
        (f"Element spec ({len(info.elements)} keys)", elements),
        ("Splits (shard file sizes)", splits),
        ("Classes (windows per split)", classes),
        *report_annotations.sections(info),
        ("Source files", sources),
        ("Parameters", params),
        ("Versions", versions),
    ]


def format_summary(info: DatasetInfo) -> str:
    """The text `python -m pipelines.inspect DIR` prints (tfds-style dataset summary)."""
    blocks = []
    for title, lines in summary_sections(info):
        indented = ["  " + line if not line.startswith("  ") else line for line in lines]
        blocks.append("\n".join([f"{title}:", *indented]))
    return printable("\n\n".join(blocks) + "\n")
