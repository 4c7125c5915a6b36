"""`inspect` of annotated datasets (`pipelines.tools.report_annotations`), on a manifest-only
dataset whose files carry their annotation statistics (no shard is read): windows per class and
split, the statistics summed over the files, the ``Annotations`` section, a dataset without
annotations left alone; and the events of decoded elements without their padding rows. The
recorded hydrophone example's `inspect`: test_annotations_replay.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pipelines.tools import report_annotations as ra
from replay import load_info
from transforms.audio.annotation_stats import file_summary
from transforms.audio.annotations import Event

CLASSES = ["background", "tug", "whale"]
ANNOTATIONS = [
    file_summary(
        [Event("a.wav", 1.0, 2.5, "whale"), Event("a.wav", 3.0, 3.1, "tug")],
        [
            (("whale",), ((0, 800, "whale"),)),
            (("background",), ((10, 20, "tug"),)),
            (("background",), ()),
        ],
    ),
    file_summary(
        [Event("b.wav", 0.0, 4.0, "whale")],
        [(("whale",), ((0, 8000, "whale"),)), (("whale",), ((-8000, 4000, "whale"),))],
    ),
]


def _dataset(directory: Path, *, annotated: bool = True) -> Path:
    files = [
        {
            "path": f"in/{name}",
            "index": i,
            "label": "whale",
            "split": split,
            "num_windows": 3 - i,
            "sample_rate": 8000,
            "num_frames": 8000 * 3,
            "num_channels": 1,
            "subtype": "PCM_16",
            "full_scale": 32768.0,
        }
        | ({"annotation": ANNOTATIONS[i]} if annotated else {})
        for i, (name, split) in enumerate([("a.wav", "train"), ("b.wav", "test")])
    ]
    elements = {
        "class": {"dtype": "string", "shape": [], "encoding": "bytes_list"},
        "signal": {"dtype": "int16", "shape": [8000], "encoding": "raw"},
    }
    if annotated:
        elements |= {
            "labels": {"dtype": "float32", "shape": [3], "encoding": "raw"},
            "events": {"dtype": "int64", "shape": [2, 3], "encoding": "raw"},
            "num_events": {"dtype": "int64", "shape": [], "encoding": "int64_list"},
        }
    manifest = {
        "format": "audiorecords",
        "format_version": 1,
        "complete": True,
        "name": "ds",
        "created_utc": "2030-01-01T00:00:00+00:00",
        "compression": "NONE",
        "elements": elements,
        "num_examples": 5,
        "classes": CLASSES,
        "num_classes": 3,
        "splits": {
            split: {
                "num_examples": n,
                "shards": [
                    {
                        "filename": f"ds-{split}.tfrecord-00000-of-00001",
                        "num_examples": n,
                        "num_bytes": 20_000 * n,  # what n windows of 8000 int16 samples take
                    }
                ],
            }
            for split, n in (("train", 3), ("test", 2))
        },
        "files": files,
        "errors": [],
        "params": {"win_len": 8000},
        "versions": {"python": "3.11"},
    }
    directory.mkdir()
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def test_windows_per_class_and_split_and_the_summed_statistics(tmp_path):
    info = load_info(_dataset(tmp_path / "ds"))
    assert ra.is_annotated(info)
    assert ra.class_counts(info) == {
        "background": {"train": 2, "test": 0},
        "tug": {"train": 0, "test": 0},
        "whale": {"train": 1, "test": 2},
    }
    summary = ra.summary(info)
    assert summary["events"] == {"tug": 1, "whale": 2}
    assert summary["event_seconds"]["whale"] == {"total": 5.5, "min": 1.5, "max": 4.0}
    assert summary["near_misses"] == {"tug": 1}
    ((title, lines),) = ra.sections(info)
    assert title == "Annotations (events and windows per class)"
    rows = [line.split() for line in lines[: 1 + len(CLASSES)]]
    assert rows == [
        [
            "class",
            "events",
            "seconds",
            "min",
            "s",
            "max",
            "s",
            "windows",
            "w/",
            "events",
            "w/o",
            "near",
        ],  # fmt: skip
        ["background", "0", "-", "-", "-", "2", "1", "1", "0"],
        ["tug", "1", "0.1", "0.1", "0.1", "0", "0", "0", "1"],
        ["whale", "2", "5.5", "1.5", "4", "3", "3", "0", "0"],
    ]


def test_a_dataset_without_annotations_has_no_section(tmp_path):
    info = load_info(_dataset(tmp_path / "ds", annotated=False))
    assert not ra.is_annotated(info) and ra.sections(info) == []


def test_the_events_of_decoded_elements_without_padding_rows():
    events = np.array([[[-10, 50, 1], [5, 900, 2]], [[-1, -1, -1], [-1, -1, -1]]], np.int64)
    batch = {"events": events, "num_events": np.array([2, 0], np.int64)}
    assert ra.example_events(batch, 0) == ((-10, 50, 1), (5, 900, 2))
    assert ra.example_events(batch, 1) == ()
    assert ra.example_events({"signal": events}, 0) == ()  # a dataset without events
    one = {"events": events[0], "num_events": np.int64(1)}
    assert ra.events_by_window(one) == [(-10, 50, 1)]
    assert ra.events_by_window({"events": events[0]}) == [(-10, 50, 1), (5, 900, 2)]
    assert ra.events_by_window({}) == []
