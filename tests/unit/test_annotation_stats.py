"""transforms.audio.annotation_stats: a file's annotation statistics from its events and planned
rows, and their sum over files, on literal events and rows (each count checked by hand)."""

from __future__ import annotations

import json

from transforms.audio.annotation_stats import file_summary, merge_summaries
from transforms.audio.annotations import Event

EVENTS = [
    Event("a.wav", 1.0, 2.5, "whale"),
    Event("a.wav", 4.0, 4.25, "whale"),
    Event("a.wav", 3.0, 3.1, "tug"),
]
# (labels, (start, end, label) of every event touching the row), in (window, channel) order
ROWS = [
    (("whale",), ((0, 8000, "whale"),)),
    (("whale",), ((-4000, 4000, "whale"),)),
    (("background",), ((1000, 1800, "tug"),)),  # touches a tug it is not labelled with
    (("tug", "whale"), ((0, 800, "tug"), (500, 900, "whale"))),
    (("background",), ()),
    (("background",), ()),
]


def test_a_files_summary_counts_events_windows_and_near_misses():
    summary = file_summary(EVENTS, ROWS)
    assert summary == {
        "events": {"tug": 1, "whale": 2},
        "event_seconds": {
            "tug": {"total": 0.1, "min": 0.1, "max": 0.1},
            "whale": {"total": 1.75, "min": 0.25, "max": 1.5},
        },
        "windows": {"background": 3, "tug": 1, "whale": 3},
        "windows_with_events": {"background": 1, "tug": 1, "whale": 3},
        "windows_without_events": {"background": 2},
        "near_misses": {"tug": 1},
    }
    assert all(list(v) == sorted(v) for v in summary.values())  # every map sorted by class
    assert json.loads(json.dumps(summary)) == summary  # JSON-ready as it is


def test_a_file_without_events_or_rows():
    empty = {
        "events": {},
        "event_seconds": {},
        "windows": {},
        "windows_with_events": {},
        "windows_without_events": {},
        "near_misses": {},
    }
    assert file_summary([], []) == empty
    assert file_summary([], [(("background",), ())])["windows_without_events"] == {"background": 1}
    assert merge_summaries([]) == {}


def test_merged_summaries_add_counts_and_totals_and_keep_min_and_max():
    first = file_summary(EVENTS, ROWS)
    second = file_summary(
        [Event("b.wav", 0.0, 3.0, "whale"), Event("b.wav", 1.0, 1.05, "owl")],
        [(("owl", "whale"), ((0, 400, "owl"), (0, 8000, "whale")))],
    )
    merged = merge_summaries([first, second])
    assert merged == {
        "events": {"owl": 1, "tug": 1, "whale": 3},
        "event_seconds": {
            "owl": {"total": 0.05, "min": 0.05, "max": 0.05},
            "tug": {"total": 0.1, "min": 0.1, "max": 0.1},
            "whale": {"total": 4.75, "min": 0.25, "max": 3.0},
        },
        "windows": {"background": 3, "owl": 1, "tug": 1, "whale": 4},
        "windows_with_events": {"background": 1, "owl": 1, "tug": 1, "whale": 4},
        "windows_without_events": {"background": 2},
        "near_misses": {"tug": 1},
    }
    assert merge_summaries([second, first]) == merged  # the files' order does not matter
    assert merge_summaries([first]) == first
    assert first == file_summary(EVENTS, ROWS)  # the inputs are left as they were
