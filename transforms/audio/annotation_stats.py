"""Per-file annotation statistics for the manifest (``files[].annotation``) and `inspect`.

Computed at planning from a file's checked events and its planned rows (window, channel), so
they describe the windows as planned (``--max_elements`` may record fewer).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from transforms.audio.annotations import Event

# a row: (its sorted labels, the (start, end, label) of every event overlapping it)
Row = tuple[tuple[str, ...], tuple[tuple[int, int, str], ...]]


def file_summary(events: Sequence[Event], rows: Iterable[Row]) -> dict[str, Any]:
    """JSON-ready statistics of one file, every map keyed by class name (sorted).

    Returns:
      {"events": {class: count}, "event_seconds": {class: {"total", "min", "max"}},
      "windows": {class: rows labelled with it}, "windows_with_events": {class: those that
      overlap at least one event}, "windows_without_events": {class: those that overlap none
      (background windows clear of every event)}, "near_misses": {class: rows that overlap an
      event of the class without being labelled with it (the rule's thresholds not met)}}.
    """
    durations: dict[str, list[float]] = {}
    for e in events:
        durations.setdefault(e.label, []).append(e.end_s - e.start_s)
    windows: dict[str, int] = {}
    with_events: dict[str, int] = {}
    without: dict[str, int] = {}
    near: dict[str, int] = {}
    for labels, touching in rows:
        for label in labels:
            windows[label] = windows.get(label, 0) + 1
            bucket = with_events if touching else without
            bucket[label] = bucket.get(label, 0) + 1
        for label in {t[2] for t in touching} - set(labels):
            near[label] = near.get(label, 0) + 1
    return {
        "events": _sorted({k: len(v) for k, v in durations.items()}),
        "event_seconds": _sorted(
            {
                k: {"total": round(sum(v), 6), "min": round(min(v), 6), "max": round(max(v), 6)}
                for k, v in durations.items()
            }
        ),
        "windows": _sorted(windows),
        "windows_with_events": _sorted(with_events),
        "windows_without_events": _sorted(without),
        "near_misses": _sorted(near),
    }


def merge_summaries(summaries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sum of per-file summaries (counts and totals added, min/max kept)."""
    out: dict[str, Any] = {}
    for s in summaries:
        for key, per_class in s.items():
            target = out.setdefault(key, {})
            for name, value in per_class.items():
                if isinstance(value, Mapping):
                    prev = target.get(name)
                    target[name] = (
                        dict(value)
                        if prev is None
                        else {
                            "total": prev["total"] + value["total"],
                            "min": min(prev["min"], value["min"]),
                            "max": max(prev["max"], value["max"]),
                        }
                    )
                else:
                    target[name] = target.get(name, 0) + value
    return {k: _sorted(v) for k, v in out.items()}


def _sorted(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: d[k] for k in sorted(d)}
