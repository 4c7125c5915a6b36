"""Annotation tables for the annotation tests: random events on the sample grid of two files
(plus ties at the label rule's thresholds), written as Raven selection tables, Audacity label
tracks and one CSV, and read back with `transforms.audio.annotations`; and the label rule
computed by brute force (`brute_labels`), sharing nothing with
`transforms.audio.annotation_windows`."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

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


def generated_events(seed: int = 7) -> dict[str, list[tuple[int, int, str]]]:
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


def raven_table(events: list[tuple[int, int, str]], *, audio: str | None) -> str:
    header = ["Selection", "View", "Channel", ann.RAVEN_BEGIN, ann.RAVEN_END]
    header += ["Low Freq (Hz)", "High Freq (Hz)", "Species"] + (["Begin File"] if audio else [])
    lines = ["\t".join(header)]
    for i, (a, b, label) in enumerate(events, start=1):
        for view in ("Waveform 1", "Spectrogram 1"):  # Raven repeats a selection per view
            row = [str(i), view, "1", _seconds(a), _seconds(b), "100.0", "2000.0", label]
            lines.append("\t".join(row + ([audio] if audio else [])))
    return "\n".join(lines) + "\n"


def audacity_table(events: list[tuple[int, int, str]]) -> str:
    lines = []
    for a, b, label in events:
        lines += [f"{a / RATE!r}\t{b / RATE!r}\t{label}", "\\\t100.000000\t2000.000000"]
    return "\n".join(lines) + "\n"


def csv_table(events: dict[str, list[tuple[int, int, str]]]) -> str:
    lines = ["path,start_s,end_s,label"]
    for path, evs in events.items():
        lines += [f"{path},{a / RATE!r},{b / RATE!r},{label}" for a, b, label in evs]
    return "\n".join(lines) + "\n"


def read_all_formats(truth) -> dict[str, dict[str, list[ann.Event]]]:
    """The same events as three sets of tables, each read and matched to the input files."""
    tables = {
        "raven": [
            (
                f"tables/{p.split('/')[1].replace('.wav', '')}.Table.1.selections.txt",
                raven_table(e, audio=None),
            )
            for p, e in truth.items()
        ],
        "audacity": [
            (f"labels/{p.split('/')[1].replace('.wav', '.txt')}", audacity_table(e))
            for p, e in truth.items()
        ],
        "csv": [("events.csv", csv_table(truth))],
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


def brute_labels(starts, frames, events, *, min_overlap_s=0.25, min_fraction=0.5):
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
