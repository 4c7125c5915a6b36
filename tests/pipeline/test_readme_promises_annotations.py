"""Promises of docs/annotations.md (time-stamped annotations), each pinned by a real record run
on a generated 20 s file and a CSV table: `--background_seed`, a custom `--background_class`,
and an explicit `--annotation_format` overriding auto detection.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.support.record_helpers import load_manifest, read_records, record

RATE = 8000


def _wav(path: Path, samples: np.ndarray, subtype: str, rate: int = RATE) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), samples, rate, subtype=subtype)
    return str(path)


LONG_SECONDS = 20
EVENTS = [(2.0, 3.0, "tug"), (10.2, 10.8, "whale"), (15.0, 16.5, "tug")]  # seconds, label


def _long_file(directory: Path) -> str:
    noise = np.random.default_rng(2).normal(0, 2000, LONG_SECONDS * RATE).astype(np.int16)
    return _wav(directory / "long.wav", noise, "PCM_16")


def _events_csv(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "path,start_s,end_s,label\n" + "".join(f"long.wav,{a},{b},{c}\n" for a, b, c in EVENTS)
    )
    return path


def _labels_by_the_rule(start_s: float, win_s: float) -> list[str]:
    """The page's rule: every label overlapping the window by >= 0.25 s, or >= 0.5 of it inside."""
    found = set()
    for a, b, label in EVENTS:
        overlap = min(b, start_s + win_s) - max(a, start_s)
        if overlap > 0 and (overlap >= 0.25 or overlap / (b - a) >= 0.5):
            found.add(label)
    return sorted(found)


def _background_run(root: Path, out: str, seed: int) -> list[dict]:
    args = ["--win_len", str(RATE), "--features", "none", "--event_windows", "centered"]
    args += ["--background_per_file", "3", "--background_seed", str(seed)]
    args += ["--annotations", str(root / "tables" / "*.csv")]
    record(str(root / "audio" / "*.wav"), root / out, *args)
    return sorted(read_records(root / out), key=lambda r: r["win_start_idx"])


@pytest.mark.slow
def test_background_seed_fixes_the_background_windows(tmp_path):
    """--background_seed: "a blake2b-seeded generator (the same on every run ...)"."""
    _long_file(tmp_path / "audio")
    _events_csv(tmp_path / "tables" / "events.csv")
    runs = {name: _background_run(tmp_path, name, seed) for name, seed in [("a", 7), ("b", 7)]}
    runs["c"] = _background_run(tmp_path, "c", 8)
    starts = {}
    for name, rows in runs.items():
        background = [r["win_start_idx"] for r in rows if r["num_events"] == 0]
        events = [r["win_start_idx"] for r in rows if r["num_events"] > 0]
        # one window centred on each event, the same whatever the seed
        assert events == [round((a + b) / 2 * RATE) - RATE // 2 for a, b, _ in EVENTS]
        assert len(background) == 3  # --background_per_file 3 ...
        for s in background:  # ... touching no event
            assert all(
                s + RATE <= math.floor(a * RATE) or s >= math.ceil(b * RATE) for a, b, _ in EVENTS
            )
        assert {r["class"] for r in rows if r["num_events"] == 0} == {"background"}
        starts[name] = background
    assert starts["a"] == starts["b"]  # same seed, same windows
    assert starts["c"] != starts["a"]  # another seed, other windows


@pytest.mark.slow
def test_a_custom_background_class_names_windows_without_a_label(tmp_path):
    """The page: "a window with none gets `--background_class` (`background`)": here `silence`."""
    path = _long_file(tmp_path / "audio")
    _events_csv(tmp_path / "tables" / "events.csv")
    out = tmp_path / "out"
    args = ["--win_len", str(RATE), "--features", "none", "--background_class", "silence"]
    record(
        str(tmp_path / "audio" / "*.wav"),
        out,
        *args,
        "--annotations",
        str(tmp_path / "tables" / "*"),
    )
    manifest = load_manifest(out)
    classes = manifest["classes"]
    assert classes == ["silence", "tug", "whale"]  # the event labels and the background class
    rows = sorted(read_records(out), key=lambda r: r["win_start_idx"])
    assert [r["win_start_idx"] for r in rows] == list(range(0, LONG_SECONDS * RATE, RATE))
    for r in rows:
        assert r["filepath"] == path
        names = _labels_by_the_rule(r["win_start_idx"] / RATE, 1.0) or ["silence"]
        assert r["class"] == "+".join(names)
        np.testing.assert_array_equal(r["labels"], [c in names for c in classes])
        assert r["target"] == (classes.index(names[0]) if len(names) == 1 else -1)
    assert sum(r["class"] == "silence" for r in rows) == LONG_SECONDS - 4
    (summary,) = [f["annotation"] for f in manifest["files"]]  # inspect's numbers say the same
    assert summary["windows_without_events"] == {"silence": LONG_SECONDS - 4}


# (format, table file name, its text, whether auto detection reads it the same way).
# docs/annotations.md: "auto: Raven by its header, CSV by `.csv`, else Audacity".
_RAVEN_HEADER = "\t".join(
    ["Selection", "View", "Channel", "Begin Time (s)", "End Time (s)", "Low Freq (Hz)"]
    + ["High Freq (Hz)", "Annotation\n"]
)
TABLES = {
    "csv": ("events.txt", "".join(f"long.wav,{a},{b},{c}\n" for a, b, c in EVENTS), False),
    "audacity": ("long.csv", "".join(f"{a}\t{b}\t{c}\n" for a, b, c in EVENTS), False),
    "raven": (
        "long.csv",
        _RAVEN_HEADER
        + "".join(
            f"{i}\tSpectrogram 1\t1\t{a}\t{b}\t100\t2000\t{c}\n"
            for i, (a, b, c) in enumerate(EVENTS, 1)
        ),
        True,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(TABLES))
def test_explicit_annotation_format_overrides_auto_detection(tmp_path, fmt):
    """--annotation_format: "`raven`, `audacity`, `csv`; auto: Raven by its header, ..."."""
    from pipelines.config import RecordConfig
    from pipelines.plan import plan_record

    name, text, auto_agrees = TABLES[fmt]
    _long_file(tmp_path / "audio")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / name).write_text(text)
    pattern, tables = str(tmp_path / "audio" / "*.wav"), str(tmp_path / "tables" / name)
    out = tmp_path / "out"
    args = ["--win_len", str(RATE), "--features", "none", "--annotations", tables]
    record(pattern, out, *args, "--annotation_format", fmt)
    manifest = load_manifest(out)
    assert manifest["errors"] == [] and manifest["classes"] == ["background", "tug", "whale"]
    assert manifest["params"]["annotation_format"] == fmt
    for r in read_records(out):
        names = _labels_by_the_rule(r["win_start_idx"] / RATE, 1.0) or ["background"]
        assert r["class"] == "+".join(names), r["win_start_idx"]
    # what auto detection makes of the same table (planning reads the tables)
    auto = plan_record(
        RecordConfig(
            input_pattern=pattern,
            output_dir=str(tmp_path / "auto"),
            win_len=RATE,
            features="none",
            annotations=tables,
        )
    )
    if auto_agrees:
        assert auto.classes == tuple(manifest["classes"]) and not auto.annotation_errors
    else:  # read as the other format: every row is a bad row, no event is left
        assert auto.classes == ("background",)
        lines = {int(e["path"].rsplit(":", 1)[1]) for e in auto.annotation_errors}
        assert lines == {1, 2, 3}, auto.annotation_errors
