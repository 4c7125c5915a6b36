"""`inspect` for annotated datasets (``--annotations``): events and windows per class.

Reads only the manifest: each annotated file's ``files[].annotation`` statistics
(`transforms.audio.annotation_stats`, computed at planning), summed over the files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipelines.tools.text_table import text_table
from replay import DatasetInfo
from replay import format as fmt
from transforms.audio.annotation_stats import merge_summaries


def is_annotated(info: DatasetInfo) -> bool:
    """Whether the dataset was recorded with ``--annotations``."""
    return fmt.LABELS_KEY in info.elements and any("annotation" in f for f in info.files)


def class_counts(info: DatasetInfo) -> dict[str, dict[str, int]]:
    """Windows labelled with each class, per split (a multi-label window counts once per label)."""
    splits = list(info.splits) or ["all"]
    counts = {c: dict.fromkeys(splits, 0) for c in info.classes}
    for f in info.files:
        split = f.get("split") if f.get("split") in splits else splits[0]
        for name, n in f.get("annotation", {}).get("windows", {}).items():
            counts.setdefault(name, dict.fromkeys(splits, 0))[split] += int(n)
    return counts


def summary(info: DatasetInfo) -> dict[str, Any]:
    """The files' annotation statistics summed
    (`transforms.audio.annotation_stats.merge_summaries`)."""
    return merge_summaries(f["annotation"] for f in info.files if "annotation" in f)


def sections(info: DatasetInfo) -> list[tuple[str, list[str]]]:
    """The ``Annotations`` section of the summary ([] for a dataset without annotations)."""
    if not is_annotated(info):
        return []
    s = summary(info)
    rows: list[Sequence[Any]] = [
        ("class", "events", "seconds", "min s", "max s", "windows", "w/ events", "w/o", "near")
    ]
    for name in info.classes:
        secs = s.get("event_seconds", {}).get(name)
        rows.append(
            (
                name,
                s.get("events", {}).get(name, 0),
                _num(secs and secs["total"]),
                _num(secs and secs["min"]),
                _num(secs and secs["max"]),
                *(s.get(k, {}).get(name, 0) for k in _WINDOW_KEYS),
            )
        )
    lines = text_table(rows)
    lines += [
        "  windows: labelled with the class (several labels: counted for each); w/ events, w/o:",
        "  of those, overlapping an event or none; near: overlapping an event of the class",
        "  without its label (under both --min_label_overlap and --min_label_fraction)",
    ]
    return [("Annotations (events and windows per class)", lines)]


_WINDOW_KEYS = ("windows", "windows_with_events", "windows_without_events", "near_misses")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def events_by_window(element: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """(start, end, class id) of the events of one decoded element (padding rows left out)."""
    events = element.get("events")
    if events is None:
        return []
    count = int(element.get("num_events", len(events)))
    return [tuple(int(v) for v in row) for row in list(events)[:count]]


def example_events(batch: Mapping[str, Any], i: int) -> tuple[tuple[int, int, int], ...]:
    """The events of row `i` of a decoded batch ((), when the dataset has none)."""
    if "events" not in batch:
        return ()
    element = {"events": batch["events"][i], "num_events": batch["num_events"][i]}
    return tuple(events_by_window(element))


def draw_events(ax: Any, example: Any, classes: Sequence[str]) -> None:
    """Shades each event of an example window over its waveform, named by its class.

    Args:
      ax: the waveform's matplotlib Axes (x in seconds from the window start).
      example: a `pipelines.tools.report_sample.Example` (its `events`, `waveform`, `sample_rate`).
      classes: class names in `target` order (an id past the list is drawn as ``#id``).
    """
    rate = max(example.sample_rate, 1)
    for start, end, class_id in getattr(example, "events", ()):
        lo, hi = max(start, 0) / rate, min(end, len(example.waveform)) / rate
        ax.axvspan(lo, hi, color="#2ca02c", alpha=0.18, linewidth=0)
        name = classes[class_id] if 0 <= class_id < len(classes) else f"#{class_id}"
        ax.text(lo, 1.0, name, transform=ax.get_xaxis_transform(), fontsize=6, va="top")
