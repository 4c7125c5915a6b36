"""Planning with ``--annotations`` (`pipelines.plan.annotated`), pure: the tables' events matched
to a file, its windows and their labels per channel, the background windows dropped, per-file
statistics (near misses included). The recorded runs: tests/pipeline/test_annotations_record.py."""

from __future__ import annotations

import numpy as np

from pipelines.config import AnnotationConfig
from pipelines.plan.annotated import plan_annotations
from transforms.audio import annotation_windows as aw
from transforms.audio import annotations as ann
from transforms.audio.annotation_stats import merge_summaries
from transforms.audio.windows import WindowConfig

RATE = WIN = 8000


def test_split_channels_and_drop_background_plan():
    """Channel-specific events label only their channel's rows; drop keeps a window any labels."""
    events = [
        ann.Event("st.wav", 1.0, 2.0, "tug", channel=1, source="t.csv", line=2),
        ann.Event("st.wav", 3.0, 4.0, "whale", source="t.csv", line=3),
    ]
    config = AnnotationConfig(pattern="t.csv", rule=aw.LabelRule(drop_background=True))
    plan = plan_annotations(
        [("/d/st.wav", 6 * RATE, RATE, 2)],
        events,
        [],
        config=config,
        window=WindowConfig(win_len=WIN),
        split_channels=True,
    )
    assert plan.classes == ("tug", "whale") and plan.max_events == 1
    fa = plan.files["/d/st.wav"]
    assert fa.starts.tolist() == [RATE, 3 * RATE] and fa.channels == 2
    # rows (window, channel): tug only on channel 1; whale (no channel) on both
    assert fa.classes == ("background", "tug", "whale", "whale")
    np.testing.assert_array_equal(fa.labels, [[0, 0], [1, 0], [0, 1], [0, 1]])
    # (start, end, class id) within the window; the background row has none
    np.testing.assert_array_equal(
        fa.events[:, 0], [[-1, -1, -1], [0, RATE, 0], [0, RATE, 1], [0, RATE, 1]]
    )
    assert fa.num_events.tolist() == [0, 1, 1, 1]
    assert fa.summary == {
        "events": {"tug": 1, "whale": 1},
        "event_seconds": {
            "tug": {"total": 1.0, "min": 1.0, "max": 1.0},
            "whale": {"total": 1.0, "min": 1.0, "max": 1.0},
        },
        "windows": {"background": 1, "tug": 1, "whale": 2},
        "windows_with_events": {"tug": 1, "whale": 2},
        "windows_without_events": {"background": 1},
        "near_misses": {},
    }
    merged = merge_summaries([fa.summary, fa.summary])
    assert merged["windows"] == {"background": 2, "tug": 2, "whale": 4}
    assert merged["event_seconds"]["tug"] == {"total": 2.0, "min": 1.0, "max": 1.0}
    held = fa.rows(2, 4)  # what a read task of rows [2, 4) carries: window 3 * RATE only
    assert (held.row_offset, held.classes) == (2, ("whale", "whale"))


def test_near_misses_counted():
    """An event mostly in one window labels it; the next window touches it: a near miss."""
    events = [ann.Event("x.wav", 0.9, 1.05, "tug", source="t.csv", line=2)]
    plan = plan_annotations(
        [("/d/x.wav", 3 * RATE, RATE, 1)],
        events,
        [],
        config=AnnotationConfig(pattern="t.csv"),
        window=WindowConfig(win_len=WIN),
        split_channels=False,
    )
    summary = plan.files["/d/x.wav"].summary
    assert summary["windows"] == {"background": 2, "tug": 1}
    assert summary["near_misses"] == {"tug": 1}
    assert summary["windows_with_events"] == {"background": 1, "tug": 1}
