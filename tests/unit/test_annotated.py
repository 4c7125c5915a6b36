"""Planning with ``--annotations`` (`pipelines.plan.annotated`), pure: the tables' events matched
to a file, its windows and their labels per channel, the background windows dropped, per-file
statistics (near misses included). The recorded runs: tests/pipeline/test_annotations_record.py."""

from __future__ import annotations

import numpy as np

from pipelines.config import AnnotationConfig, RecordConfig
from pipelines.plan import ScannedInputs
from pipelines.plan.annotated import (
    AnnotationPlan,
    annotate,
    file_annotation,
    file_rows,
    match_tables,
    padded,
)
from transforms.audio import annotation_windows as aw
from transforms.audio import annotations as ann
from transforms.audio.annotation_stats import merge_summaries
from transforms.audio.wav import WavInfo
from transforms.audio.windows import WindowConfig
from transforms.spec.types import FileEvents, InputFile, Sharding

RATE = WIN = 8000


def plan_annotations(
    files: list[tuple[str, int, int, int]],
    events: list[ann.Event],
    table_errors: list[ann.RowError],
    *,
    config: AnnotationConfig,
    window: WindowConfig,
    split_channels: bool,
) -> AnnotationPlan:
    """The launcher's plan of (path, frames, rate, channels) 16-bit files: the tables matched
    (`match_tables`, as the listing does), then `annotate` once the headers are known."""
    matched = match_tables([p for p, *_ in files], events, table_errors, config=config)
    inputs = tuple(
        InputFile(
            index=i,
            path=path,
            size_bytes=2 * frames * channels,
            info=WavInfo(rate, channels, frames, "PCM_16", "int16", 32768.0),
            annotation=FileEvents(matched.events[path]) if path in matched.events else None,
        )
        for i, (path, frames, rate, channels) in enumerate(files)
    )
    rule = config.rule
    run = RecordConfig(
        input_pattern="/d/*.wav",
        output_dir="/out",
        features="none",
        win_len=window.win_len,
        hop_len=window.hop_len,
        annotations=config.pattern,
        drop_background=rule.drop_background,
        channel_mode="split" if split_channels else "first",
    )
    listed = ScannedInputs(
        output_dir="/out",
        inputs=inputs,
        classes=matched.classes,
        sharding=Sharding(),
        signal_dtype="int16",
        max_events=1,
        table_errors=matched.errors,
    )
    _, plan = annotate(inputs, config=run, listed=listed)
    return plan


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


def test_the_class_list_is_every_matched_rows_label_whatever_its_file_holds():
    """The class list depends on the tables and the listing only (the launcher of a run planned
    in the job fixes it before any header): a label whose one row lies past its file's end is a
    class; a row on no listed file gives none, and is a bad row."""
    events = [
        ann.Event("x.wav", 0.5, 1.0, "tug", source="t.csv", line=2),
        ann.Event("x.wav", 2.5, 3.5, "seal", source="t.csv", line=3),  # the file is 3 s
        ann.Event("y.wav", 0.0, 1.0, "orca", source="t.csv", line=4),  # not listed
    ]
    config = AnnotationConfig(pattern="t.csv")
    matched = match_tables(["/d/x.wav"], events, [], config=config)
    assert matched.classes == ("background", "seal", "tug")
    assert [(e.line, e.reason) for e in matched.errors] == [
        (4, "audio file 'y.wav' matches no input file")
    ]
    plan = plan_annotations(
        [("/d/x.wav", 3 * RATE, RATE, 1)],
        events,
        [],
        config=config,
        window=WindowConfig(win_len=WIN),
        split_channels=False,
    )
    assert plan.classes == matched.classes
    assert [e["path"] for e in plan.errors] == ["t.csv:3", "t.csv:4"]
    assert plan.files["/d/x.wav"].labels.shape == (3, 3)  # every class a column


def test_a_row_on_a_refused_file_names_the_file_and_its_reason():
    events = (ann.Event("b.wav", 0.0, 1.0, "tug", source="t.csv", line=7),)
    rows = file_rows(
        "/d/b.wav",
        events,
        header=None,
        error="not a RIFF/WAVE file",
        config=AnnotationConfig(pattern="t.csv"),
        window=WindowConfig(win_len=WIN),
        split_channels=False,
        sample_rate=None,
        fixed_classes=None,
        seed_key="b.wav",
    )
    assert (rows.rows, len(rows.starts), rows.most_events) == ([], 0, 0)
    assert rows.errors == (
        ann.RowError("t.csv", 7, "audio file /d/b.wav is refused: not a RIFF/WAVE file"),
    )


def test_events_padded_later_equal_the_annotation_made_with_the_runs_most():
    """A file annotated on its own (its events padded to its own most, as the job's plan step
    does per batch) and padded to the run's `max_events` is the annotation made with it."""
    events = [
        ann.Event("x.wav", 0.2, 0.6, "tug", source="t.csv", line=2),
        ann.Event("x.wav", 1.2, 1.4, "whale", source="t.csv", line=3),
    ]
    config = AnnotationConfig(pattern="t.csv")
    rows = file_rows(
        "/d/x.wav",
        events,
        header=(3 * RATE, RATE, 1),
        error=None,
        config=config,
        window=WindowConfig(win_len=WIN),
        split_channels=False,
        sample_rate=None,
        fixed_classes=None,
        seed_key="x.wav",
    )
    classes = ("background", "tug", "whale")
    own = file_annotation(rows, classes, rows.most_events)
    assert own.events.shape == (3, 1, 3)
    later, direct = padded(own, 4), file_annotation(rows, classes, 4)
    assert later.events.shape == (3, 4, 3)
    np.testing.assert_array_equal(later.events, direct.events)
    np.testing.assert_array_equal(later.num_events, direct.num_events)
    assert padded(own, 1) is own
