"""Annotation tables (Raven, Audacity, CSV) and the window label rule, against brute force.

The reference computation is per-sample interval arithmetic: every event and window is a
boolean mask over the samples of the file, and the overlap is the count of samples in both. It
shares nothing with `transforms.audio.annotation_windows` (which works on seconds, with binary
search).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from transforms.audio import annotation_windows as aw
from transforms.audio import annotations as ann

RATE = 8000
WIN, HOP = 8000, 4000  # 1 s windows every 0.5 s
FILES = {"site1/rec_a.wav": 60 * RATE, "site2/rec_b.wav": 45 * RATE + 123}
CLASSES = ("grunt", "tug", "whale")


TIES = [
    (int(9.25 * RATE), 12 * RATE, "tug"),  # exactly 0.25 s inside window [8.5, 9.5)
    (20 * RATE - 1999, 25 * RATE, "grunt"),  # 1999 samples inside [19, 20): below 0.25 s
    (30 * RATE - 1200, 30 * RATE + 1200, "whale"),  # 0.3 s: exactly half inside [29, 30)
]


def _generated_events(seed: int = 7) -> dict[str, list[tuple[int, int, str]]]:
    """Events on the sample grid: random ones plus ties at the thresholds (0.25 s, 0.5)."""
    rng = np.random.default_rng(seed)
    out = {}
    for path, frames in FILES.items():
        events = []
        for _ in range(40):
            length = int(rng.integers(200, 3 * RATE))
            start = int(rng.integers(0, frames - length))
            events.append((start, start + length, str(rng.choice(CLASSES))))
        out[path] = events
    out["site1/rec_a.wav"] += TIES
    return out


def _seconds(sample: int) -> str:
    return repr(sample / RATE)


def _raven(events: list[tuple[int, int, str]], *, audio: str | None) -> str:
    header = ["Selection", "View", "Channel", ann.RAVEN_BEGIN, ann.RAVEN_END]
    header += ["Low Freq (Hz)", "High Freq (Hz)", "Species"] + (["Begin File"] if audio else [])
    lines = ["\t".join(header)]
    for i, (a, b, label) in enumerate(events, start=1):
        for view in ("Waveform 1", "Spectrogram 1"):  # Raven repeats a selection per view
            row = [str(i), view, "1", _seconds(a), _seconds(b), "100.0", "2000.0", label]
            lines.append("\t".join(row + ([audio] if audio else [])))
    return "\n".join(lines) + "\n"


def _audacity(events: list[tuple[int, int, str]]) -> str:
    lines = []
    for a, b, label in events:
        lines += [f"{a / RATE!r}\t{b / RATE!r}\t{label}", "\\\t100.000000\t2000.000000"]
    return "\n".join(lines) + "\n"


def _csv(events: dict[str, list[tuple[int, int, str]]]) -> str:
    lines = ["path,start_s,end_s,label"]
    for path, evs in events.items():
        lines += [f"{path},{a / RATE!r},{b / RATE!r},{label}" for a, b, label in evs]
    return "\n".join(lines) + "\n"


def _read_all_formats(truth) -> dict[str, dict[str, list[ann.Event]]]:
    """The same events as three sets of tables, each read and matched to the input files."""
    tables = {
        "raven": [
            (
                f"tables/{p.split('/')[1].replace('.wav', '')}.Table.1.selections.txt",
                _raven(e, audio=None),
            )
            for p, e in truth.items()
        ],
        "audacity": [
            (f"labels/{p.split('/')[1].replace('.wav', '.txt')}", _audacity(e))
            for p, e in truth.items()
        ],
        "csv": [("events.csv", _csv(truth))],
    }
    out = {}
    for fmt, sources in tables.items():
        events, errors = [], []
        for source, text in sources:
            assert ann.detect_format(source, text) == fmt
            evs, errs = ann.read_table(text, source=source, label_column="Species")
            events += evs
            errors += errs
        matched, unmatched = ann.match_events(events, [f"/data/{p}" for p in FILES])
        assert errors == [] and unmatched == []
        out[fmt] = matched
    return out


def _brute_labels(starts, frames, events, *, min_overlap_s=0.25, min_fraction=0.5):
    """Per window: set of labels by the rule, from sample masks (exact integer arithmetic)."""
    total = int(max(starts, default=0)) + WIN + frames
    labels = []
    masks = []
    for a, b, label in events:
        m = np.zeros(total, bool)
        m[a:b] = True
        masks.append((m, b - a, label))
    for s in starts:
        found = set()
        for m, length, label in masks:
            count = int(np.count_nonzero(m[s : s + WIN]))
            if count == 0:
                continue
            if Fraction(count, RATE) >= Fraction(min_overlap_s).limit_denominator(10**6) or (
                Fraction(count, length) >= Fraction(min_fraction).limit_denominator(10**6)
            ):
                found.add(label)
        labels.append(found)
    return labels


def test_three_formats_read_the_same_events():
    truth = _generated_events()
    by_format = _read_all_formats(truth)
    for fmt, matched in by_format.items():
        for path, expected in truth.items():
            got = [(e.start_s, e.end_s, e.label) for e in matched[f"/data/{path}"]]
            want = [(a / RATE, b / RATE, label) for a, b, label in expected]
            assert got == want, fmt
        channels = {e.channel for evs in matched.values() for e in evs}
        assert channels == ({0} if fmt == "raven" else {None})  # Raven's 1-based Channel 1


@pytest.mark.parametrize("min_overlap_s,min_fraction", [(0.25, 0.5), (0.0, 1.0), (0.6, 0.2)])
def test_every_event_lands_in_exactly_the_windows_the_rule_says(min_overlap_s, min_fraction):
    truth = _generated_events()
    rule = aw.LabelRule(min_overlap_s=min_overlap_s, min_fraction=min_fraction)
    matched = _read_all_formats(truth)["raven"]
    for path, frames in FILES.items():
        starts = np.arange(0, frames - WIN + 1, HOP)
        got = aw.label_windows(
            starts, win_len=WIN, sample_rate=RATE, events=matched[f"/data/{path}"], rule=rule
        )
        want = _brute_labels(
            starts, frames, truth[path], min_overlap_s=min_overlap_s, min_fraction=min_fraction
        )
        assert [set(labels) - {"background"} for labels in got.labels] == want
        assert all(
            labels == ("background",) for labels, w in zip(got.labels, want, strict=True) if not w
        )
        assert got.keep.all()
        # every event overlapping a window at all is listed, offsets relative to the window
        for j, s in enumerate(starts):
            overlapping = sorted(
                (a - s, b - s, lab) for a, b, lab in truth[path] if a < s + WIN and b > s
            )
            assert list(got.events[j]) == overlapping


def test_threshold_ties_count():
    events = [ann.Event("x", a / RATE, b / RATE, label) for a, b, label in TIES]
    starts = np.array([8 * RATE, 8 * RATE + HOP, 19 * RATE, 29 * RATE, 30 * RATE], np.int64)
    got = aw.label_windows(
        starts, win_len=WIN, sample_rate=RATE, events=events, rule=aw.LabelRule()
    )
    assert got.labels == (("background",), ("tug",), ("background",), ("whale",), ("whale",))
    assert [set(x) - {"background"} for x in got.labels] == _brute_labels(starts, 40 * RATE, TIES)
    stricter = aw.LabelRule(min_overlap_s=0.26, min_fraction=0.51)
    got = aw.label_windows(starts, win_len=WIN, sample_rate=RATE, events=events, rule=stricter)
    assert all(labels == ("background",) for labels in got.labels)


def test_background_class_and_drop():
    event = ann.Event("x", 2.0, 2.5, "tug")
    starts = np.arange(0, 5 * RATE, RATE)
    kept = aw.label_windows(
        starts,
        win_len=WIN,
        sample_rate=RATE,
        events=[event],
        rule=aw.LabelRule(background_class="noise"),
    )
    assert kept.labels == (("noise",), ("noise",), ("tug",), ("noise",), ("noise",))
    dropped = aw.label_windows(
        starts,
        win_len=WIN,
        sample_rate=RATE,
        events=[event],
        rule=aw.LabelRule(drop_background=True),
    )
    assert dropped.keep.tolist() == [False, False, True, False, False]


def test_multi_hot_over_sorted_classes():
    matched = {"a": [ann.Event("a", 0, 1, "whale"), ann.Event("a", 0, 1, "tug")]}
    classes = ann.event_classes(matched, background_class="background")
    assert classes == ("background", "tug", "whale")
    hot = aw.multi_hot([("tug", "whale"), ("background",), ("whale",)], classes)
    assert hot.dtype == np.float32
    np.testing.assert_array_equal(hot, [[0, 1, 1], [1, 0, 0], [0, 0, 1]])
    assert ann.event_classes(matched, background_class=None) == ("tug", "whale")


def test_events_array_padded_with_count():
    events = [((-10, 50, "tug"), (5, 9000, "whale")), (), ((1, 2, "x"),)]
    arr, counts = aw.events_array(events, ("tug", "whale"), max_events=2)
    assert arr.shape == (3, 2, 3) and counts.tolist() == [2, 0, 1]
    np.testing.assert_array_equal(arr[0], [[-10, 50, 0], [5, 9000, 1]])
    np.testing.assert_array_equal(arr[1], -1)
    np.testing.assert_array_equal(arr[2], [[1, 2, -1], [-1, -1, -1]])


def test_centered_windows_are_centred():
    truth = _generated_events()
    events = _read_all_formats(truth)["audacity"]["/data/site1/rec_a.wav"]
    frames = FILES["site1/rec_a.wav"]
    starts = aw.centered_starts(events, sample_rate=RATE, win_len=WIN, num_frames=frames)
    for s, (a, b, _) in zip(starts, truth["site1/rec_a.wav"], strict=True):
        if WIN // 2 <= (a + b) / 2 <= frames - WIN // 2:
            assert abs((s + WIN / 2) - (a + b) / 2) <= 1  # centred within one sample
        else:
            assert s in (0, frames - WIN)  # moved inside the file
        assert 0 <= s <= frames - WIN
    edge = [ann.Event("x", 0.0, 0.1, "tug"), ann.Event("x", 59.9, 60.0, "tug")]
    assert aw.centered_starts(edge, sample_rate=RATE, win_len=WIN, num_frames=frames).tolist() == [
        0,
        frames - WIN,
    ]
    assert len(aw.centered_starts(edge, sample_rate=RATE, win_len=WIN, num_frames=WIN - 1)) == 0


def test_background_windows_touch_no_event_and_are_seeded():
    truth = _generated_events()
    events = _read_all_formats(truth)["raven"]["/data/site2/rec_b.wav"]
    frames = FILES["site2/rec_b.wav"]
    kwargs = dict(sample_rate=RATE, win_len=WIN, num_frames=frames, count=25)
    starts = aw.background_starts(events, seed_key="0:/data/site2/rec_b.wav", **kwargs)
    assert len(starts) == 25 and len(set(starts.tolist())) == 25
    assert np.all(np.diff(starts) > 0) and starts.min() >= 0 and starts.max() <= frames - WIN
    busy = np.zeros(frames, bool)
    for a, b, _ in truth["site2/rec_b.wav"]:
        busy[a:b] = True
    assert not any(busy[s : s + WIN].any() for s in starts)
    again = aw.background_starts(events, seed_key="0:/data/site2/rec_b.wav", **kwargs)
    other = aw.background_starts(events, seed_key="1:/data/site2/rec_b.wav", **kwargs)
    np.testing.assert_array_equal(starts, again)
    assert not np.array_equal(starts, other)
    # every free start can be drawn, and no more than there are
    one = [ann.Event("x", 1.0, 2.0, "tug")]
    few = aw.background_starts(
        one, sample_rate=RATE, win_len=WIN, num_frames=3 * RATE, count=10**6, seed_key="s"
    )
    free = [s for s in range(2 * RATE + 1) if not (s < 2 * RATE and s + WIN > RATE)]
    assert few.tolist() == free


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


def test_label_rule_validation():
    for kwargs in ({"min_overlap_s": -1}, {"min_fraction": 0}, {"background_class": " "}):
        with pytest.raises(ValueError):
            aw.LabelRule(**kwargs)
    assert list(itertools.islice(ann.FORMATS, 1)) == ["auto"]


@pytest.mark.parametrize("pad", [False, True])
def test_cut_at_equals_the_grid_framing_and_cuts_any_starts(pad):
    from transforms.audio.windows import WindowConfig, frame_blocks, window_starts

    rng = np.random.default_rng(3)
    for _ in range(30):
        n, win = int(rng.integers(1, 3000)), int(rng.integers(1, 200))
        x = rng.integers(-(2**15), 2**15, (n, 2)).astype(np.int16)
        blocks = np.split(x, np.sort(rng.integers(0, n, 4)))
        cfg = WindowConfig(win_len=win, hop_len=int(rng.integers(1, win + 1)), pad=pad)
        grid = list(frame_blocks(iter(blocks), cfg, max_windows_per_chunk=7))
        cut = list(
            aw.cut_at(iter(blocks), window_starts(n, cfg), win_len=win, max_windows_per_chunk=7)
        )
        assert [s.tolist() for s, _ in grid] == [s.tolist() for s, _ in cut]
        for (_, a), (_, b) in zip(grid, cut, strict=True):
            np.testing.assert_array_equal(a, b)
        starts = np.sort(rng.integers(0, n, 9))  # arbitrary, repeated, overlapping; past the end
        padded = np.concatenate([x, np.zeros((win, 2), np.int16)])
        got = np.concatenate(
            [w for _, w in aw.cut_at(iter(blocks), starts, win_len=win, max_windows_per_chunk=4)]
        )
        np.testing.assert_array_equal(got, np.stack([padded[s : s + win] for s in starts]))
