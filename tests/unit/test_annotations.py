"""Annotation tables (`transforms.audio.annotations`): Raven, Audacity and CSV read as the same
events; bad rows reported one by one, good rows kept; columns, aliases, channels, table names.
The window label rule is in test_annotation_windows.py."""

from __future__ import annotations

import numpy as np

from tests.support.annotation_tables import RATE, generated_events, read_all_formats
from transforms.audio import annotations as ann


def test_three_formats_read_the_same_events():
    truth = generated_events()
    by_format = read_all_formats(truth)
    for fmt, matched in by_format.items():
        for path, expected in truth.items():
            got = [(e.start_s, e.end_s, e.label) for e in matched[f"/data/{path}"]]
            want = [(a / RATE, b / RATE, label) for a, b, label in expected]
            assert got == want, fmt
        channels = {e.channel for evs in matched.values() for e in evs}
        assert channels == ({0} if fmt == "raven" else {None})  # Raven's 1-based Channel 1


BAD_RAVEN = (
    "Selection\tView\tChannel\tBegin Time (s)\tEnd Time (s)\tAnnotation\n"
    "1\tSpectrogram 1\t1\t1.0\t2.0\ttug\n"
    "2\tSpectrogram 1\t1\t3.0\t2.5\ttug\n"
    "3\tSpectrogram 1\t1\tabc\t2.5\ttug\n"
    "4\tSpectrogram 1\t1\t1.0\t2.0\t\n"
    "5\tSpectrogram 1\t0\t1.0\t2.0\ttug\n"
    "6\tSpectrogram 1\t1\t1.0\t1.0\ttug\n"
    "7\tSpectrogram 1\t1\t-1.0\t1.0\ttug\n"
    "8\tSpectrogram 1\t1\t1.0\tinf\ttug\n"
)


def test_bad_rows_are_reported_per_row_and_good_rows_kept():
    events, errors = ann.read_raven(BAD_RAVEN, source="t/rec.Table.1.selections.txt")
    assert [(e.line, e.start_s, e.audio, e.by_stem) for e in events] == [(2, 1.0, "rec", True)]
    reasons = {e.line: e.reason for e in errors}
    assert reasons == {
        3: "end 2.5 s is before start 3 s",
        4: "Begin Time (s) is not a number: 'abc'",
        5: "no label",
        6: "channel 0 < 1 (the first channel is 1)",
        7: "zero-length event at 1 s (a point label)",
        8: "start -1 s is negative",
        9: "End Time (s) is not a finite number: 'inf'",
    }
    assert errors[0].to_manifest() == {
        "path": "t/rec.Table.1.selections.txt:3",
        "reason": "end 2.5 s is before start 3 s",
    }
    csv_events, csv_errors = ann.read_csv(
        "a.wav,1,2,tug\nb.wav,x,2,tug\nc.wav,1,2,tug,zz\n,1,2,tug\n", source="e.csv"
    )
    assert [e.audio for e in csv_events] == ["a.wav"]
    assert [(e.line, e.reason) for e in csv_errors] == [
        (2, "start_s is not a number: 'x'"),
        (3, "channel is not an integer: 'zz'"),
        (4, "no audio file path"),
    ]
    aud_events, aud_errors = ann.read_audacity("1\t2\ttug\n3\t1\tx\n5\n", source="l/rec.txt")
    assert [e.label for e in aud_events] == ["tug"]
    assert [e.line for e in aud_errors] == [2, 3]


def test_unknown_ambiguous_and_out_of_file_rows():
    inputs = ["gs://b/site1/x.wav", "gs://b/site2/x.wav", "gs://b/site2/y.wav"]
    events = [
        ann.Event("C:\\data\\site1\\x.wav", 1, 2, "tug", source="t", line=2),
        ann.Event("x.wav", 1, 2, "tug", source="t", line=3),
        ann.Event("z.wav", 1, 2, "tug", source="t", line=4),
        ann.Event("y", 1, 2, "tug", source="t", line=5, by_stem=True),
    ]
    matched, errors = ann.match_events(events, inputs)
    assert {p: [e.line for e in evs] for p, evs in matched.items()} == {
        "gs://b/site1/x.wav": [2],
        "gs://b/site2/y.wav": [5],
    }
    assert [(e.line, e.reason) for e in errors] == [
        (3, "audio file 'x.wav' matches 2 input files (gs://b/site1/x.wav, gs://b/site2/x.wav)"),
        (4, "audio file 'z.wav' matches no input file"),
    ]
    inside = [
        ann.Event("x", 0.5, 1.0, "a", line=2),
        ann.Event("x", 1.5, 2.0, "a", line=3),  # ends exactly at the end: fine
        ann.Event("x", 1.9, 2.1, "a", line=4),
        ann.Event("x", 2.0, 2.5, "a", line=5),
        ann.Event("x", 0.5, 1.0, "a", channel=2, line=6),
    ]
    kept, bad = ann.check_events(inside, num_frames=2 * RATE, sample_rate=RATE, num_channels=2)
    assert [e.line for e in kept] == [2, 3]
    assert [(e.line, e.reason) for e in bad] == [
        (4, "ends at 2.1 s, beyond the file's duration (2 s)"),
        (5, "starts at 2 s, at or after the file's end (2 s)"),
        (6, "channel 2 (0-based) but the file has 2 channel(s)"),
    ]


def test_raven_columns_begin_file_offset_and_default_label_column():
    text = (
        "Selection\tView\tChannel\tBegin Time (s)\tEnd Time (s)\tLow Freq (Hz)\t"
        "High Freq (Hz)\tCall\tBegin File\tFile Offset (s)\n"
        "1\tSpectrogram 1\t2\t100.0\t101.5\t10\t20\tgrunt\trec_b.wav\t40.0\n"
    )
    events, errors = ann.read_raven(text, source="multi.txt")
    assert errors == []
    (e,) = events
    assert (e.audio, e.start_s, e.end_s, e.label, e.channel, e.by_stem) == (
        "rec_b.wav",
        40.0,
        41.5,
        "grunt",
        1,
        False,
    )
    no_label = "Selection\tBegin Time (s)\tEnd Time (s)\n1\t1\t2\n"
    events, errors = ann.read_raven(no_label, source="t.txt")
    assert events == [] and errors[0].line is None and "--annotation_column" in errors[0].reason
    _, errors = ann.read_raven("a\tb\n1\t2\n", source="t.txt")
    assert errors[0].reason == "not a Raven selection table: no 'Begin Time (s)' column"


def test_csv_header_aliases_and_channels():
    text = "label,onset,offset,file,channel\ntug,1.0,2.0,a.wav,1\n"
    (event,), errors = ann.read_csv(text, source="x.csv")
    assert errors == [] and (event.audio, event.label, event.channel) == ("a.wav", "tug", 1)


def test_table_stem_names():
    names = ["a/rec.Table.1.selections.txt", "rec.selections.txt", "rec.txt", "b\\rec.csv"]
    assert {ann.table_stem(n) for n in names} == {"rec"}


def _match_by_every_suffix(events, paths):
    """The rule as `match_events` states it, the plain way: a dict of every trailing part of
    every path, each event's longest trailing part looked up first."""
    by_suffix: dict[str, list[str]] = {}
    for path in paths:
        parts = [p for p in path.replace("\\", "/").split("/") if p]
        for i in range(len(parts)):
            by_suffix.setdefault("/".join(parts[i:]), []).append(path)
    found = {}
    for event in events:
        parts = [p for p in event.audio.replace("\\", "/").split("/") if p]
        keys = ("/".join(parts[i:]) for i in range(len(parts)))
        found[event.line] = next((by_suffix[k] for k in keys if k in by_suffix), [])
    return found


def test_trailing_part_matching_is_the_longest_suffix_rule_on_random_trees():
    """Random trees of few names (many shared file names and folders, Windows separators in the
    tables): every event matches the paths the longest trailing part rule gives, or is the
    same error (no file, or that many)."""
    rng = np.random.default_rng(11)
    names = ["a", "b", "c", "x.wav", "y.wav"]
    for _ in range(40):
        paths = sorted(
            {
                "gs://bk/"
                + "/".join(rng.choice(names[:3], rng.integers(0, 4)).tolist())
                + "/"
                + str(rng.choice(names[3:]))
                for _ in range(rng.integers(1, 12))
            }
        )
        events = []
        for line in range(2, 30):
            depth = int(rng.integers(1, 5))
            parts = [*rng.choice(names[:3], depth - 1).tolist(), str(rng.choice(names[3:]))]
            sep = "\\" if rng.random() < 0.3 else "/"
            events.append(ann.Event(sep.join(parts), 0, 1, "t", source="t", line=line))
        want = _match_by_every_suffix(events, paths)
        matched, errors = ann.match_events(events, paths)
        got = {e.line: [p] for p, evs in matched.items() for e in evs}
        for error in errors:
            count = error.reason.rsplit("matches ", 1)[1]
            got[error.line] = [] if count == "no input file" else want[error.line]
            assert count == "no input file" or count.startswith(f"{len(want[error.line])} ")
        assert got == want
