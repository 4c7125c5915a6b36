"""The window label rule (`transforms.audio.annotation_windows`) against brute force: every
event lands in exactly the windows the rule says, ties at the thresholds count; background
class and drop, multi-hot labels, padded event arrays, centred and background windows, windows
cut at any starts.

The reference computation is per-sample interval arithmetic: every event and window is a
boolean mask over the samples of the file, and the overlap is the count of samples in both. It
shares nothing with `transforms.audio.annotation_windows` (which works on seconds, with binary
search).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.support.annotation_tables import (
    FILES,
    HOP,
    RATE,
    TIES,
    WIN,
    brute_labels,
    generated_events,
    read_all_formats,
)
from transforms.audio import annotation_windows as aw
from transforms.audio import annotations as ann


@pytest.mark.parametrize("min_overlap_s,min_fraction", [(0.25, 0.5), (0.0, 1.0), (0.6, 0.2)])
def test_every_event_lands_in_exactly_the_windows_the_rule_says(min_overlap_s, min_fraction):
    truth = generated_events()
    rule = aw.LabelRule(min_overlap_s=min_overlap_s, min_fraction=min_fraction)
    matched = read_all_formats(truth)["raven"]
    for path, frames in FILES.items():
        starts = np.arange(0, frames - WIN + 1, HOP)
        got = aw.label_windows(
            starts, win_len=WIN, sample_rate=RATE, events=matched[f"/data/{path}"], rule=rule
        )
        want = brute_labels(
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
    assert [set(x) - {"background"} for x in got.labels] == brute_labels(starts, 40 * RATE, TIES)
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
    truth = generated_events()
    events = read_all_formats(truth)["audacity"]["/data/site1/rec_a.wav"]
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
    truth = generated_events()
    events = read_all_formats(truth)["raven"]["/data/site2/rec_b.wav"]
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
