"""What a dataset holds, as plain data and text (`pipelines.tools.report`), on a manifest-only
dataset (two splits, many failed files with long reasons; no shard is read): class counts per
split, shard size statistics, the summary's compression, failed files shown up to a bound,
long reasons truncated. `inspect`'s own output on a recorded dataset: test_inspect.py."""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.tools import report
from replay import load_info


def _manifest(tmp_path: Path, **overrides) -> Path:
    """A manifest-only dataset with two splits and many failed files (no shards needed)."""
    files = [
        {
            "path": f"in/{i}_{label}.wav",
            "index": i,
            "label": label,
            "split": split,
            "num_windows": n,
            "sample_rate": 8000,
            "num_frames": 8000 * n,
            "num_channels": 1,
            "subtype": "PCM_16",
            "full_scale": 32768.0,
        }
        for i, (label, split, n) in enumerate(
            [("cat", "train", 5), ("dog", "train", 3), ("cat", "test", 2)]
        )
    ]
    shards = {"train": [100, 300, 200], "test": [50]}
    manifest = {
        "format": "audiorecords",
        "format_version": 1,
        "complete": True,
        "name": "ds",
        "created_utc": "2030-01-01T00:00:00+00:00",
        "compression": "GZIP",
        "elements": {
            "class": {"dtype": "string", "shape": [], "encoding": "bytes_list"},
            "signal": {"dtype": "int16", "shape": [8000], "encoding": "raw"},
        },
        "num_examples": 10,
        "classes": ["cat", "dog"],
        "num_classes": 2,
        "splits": {
            split: {
                "num_examples": 8 if split == "train" else 2,
                "shards": [
                    {
                        "filename": f"ds-{split}.tfrecord-{i:05d}-of-{len(sizes):05d}.gz",
                        "num_examples": (3, 3, 2)[i] if split == "train" else 2,
                        "num_bytes": size,
                    }
                    for i, size in enumerate(sizes)
                ],
            }
            for split, sizes in shards.items()
        },
        "files": files,
        "errors": [{"path": f"bad/{i}.wav", "reason": "not RIFF " * 40} for i in range(13)],
        "params": {"win_len": 8000},
        "versions": {"python": "3.11"},
    } | overrides
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


def test_summary_of_splits_class_counts_and_failed_files(tmp_path):
    info = load_info(_manifest(tmp_path))
    assert report.class_counts(info) == {
        "cat": {"train": 5, "test": 2},
        "dog": {"train": 3, "test": 0},
    }
    train, test, total = report.shard_stats(info)
    assert (train.count, train.min_bytes, train.median_bytes, train.max_bytes) == (3, 100, 200, 300)
    assert (test.total_bytes, total.split, total.total_bytes, total.count) == (50, "total", 650, 4)
    text = report.format_summary(info)
    assert "compression:  GZIP" in text and "failed: 13" in text
    assert text.count("bad/") == report.MAX_ERRORS_SHOWN and "... and 3 more" in text
    assert max(len(line) for line in text.splitlines()) < 200  # long reasons are truncated
