"""The record job with ``--annotations``: generated long files, tables in all three formats.

Records are read back with plain tf.data (`tests.support.record_helpers.read_records`) and every
window's ``labels`` / ``events`` are compared with the per-sample brute force of
`tests.unit.test_annotations`, at the window's own ``win_start_idx``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.support.annotation_tables import audacity_table, brute_labels, raven_table
from tests.support.record_helpers import load_manifest, read_records, record

RATE, WIN, HOP = 8000, 8000, 4000
CLASSES = ("grunt", "tug", "whale")
SECONDS = {"site1/long_a.wav": 40, "site1/long_b.wav": 30, "site2/long_c.wav": 25}


def _events(seed: int) -> dict[str, list[tuple[int, int, str]]]:
    rng = np.random.default_rng(seed)
    out = {}
    for path, seconds in SECONDS.items():
        evs = []
        for _ in range(12):
            length = int(rng.integers(400, 2 * RATE))
            start = int(rng.integers(0, seconds * RATE - length))
            evs.append((start, start + length, str(rng.choice(CLASSES))))
        out[path] = sorted(evs)
    return out


def _corpus(root: Path, truth) -> None:
    """Three long files; file a annotated in Raven, b in Audacity, c in a CSV, each + bad rows."""
    rng = np.random.default_rng(0)
    for path, seconds in SECONDS.items():
        (root / "audio" / path).parent.mkdir(parents=True, exist_ok=True)
        noise = (rng.standard_normal(seconds * RATE) * 2000).astype(np.int16)
        sf.write(root / "audio" / path, noise, RATE, subtype="PCM_16")
    tables = root / "tables"
    tables.mkdir()
    raven = raven_table(truth["site1/long_a.wav"], audio=None)
    raven += "99\tSpectrogram 1\t1\t5.0\t4.0\t10\t20\ttug\n"  # end before start
    (tables / "long_a.Table.1.selections.txt").write_text(raven)
    audacity = audacity_table(truth["site1/long_b.wav"]) + "29.5\t31.0\tgrunt\n"  # past the end
    (tables / "long_b.txt").write_text(audacity)
    rows = [f"{a / RATE!r},{b / RATE!r},{label}" for a, b, label in truth["site2/long_c.wav"]]
    csv = "path,start_s,end_s,label\n" + "".join(f"site2/long_c.wav,{r}\n" for r in rows)
    csv += "site3/missing.wav,1,2,tug\nsite2/long_c.wav,1,x,tug\n"  # unknown file, bad number
    (tables / "events.csv").write_text(csv)


def _by_file(records):
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["filepath"], []).append(r)
    return {p: sorted(rs, key=lambda r: r["win_start_idx"]) for p, rs in out.items()}


@pytest.mark.slow
def test_grid_windows_labelled_by_the_rule_in_all_three_formats(tmp_path):
    truth = _events(1)
    _corpus(tmp_path, truth)
    out = tmp_path / "out"
    record(
        str(tmp_path / "audio" / "**" / "*.wav"),
        out,
        "--win_len", str(WIN), "--hop_len", str(HOP), "--features", "none",
        "--annotations", str(tmp_path / "tables" / "*"), "--annotation_column", "Species",
        "--splits", "train=50,test=50", "--analyze_splits", "train,test",
    )  # fmt: skip
    m = load_manifest(out)
    assert m["classes"] == ["background", *CLASSES] and m["num_classes"] == 4
    assert m["elements"]["labels"] == {"dtype": "float32", "shape": [4], "encoding": "raw"}  # v2
    assert m["elements"]["events"]["shape"][1] == 3
    reasons = {e["path"].rsplit("/", 1)[-1]: e["reason"] for e in m["errors"]}
    assert reasons == {
        "long_a.Table.1.selections.txt:26": "end 4 s is before start 5 s",
        "long_b.txt:25": "ends at 31 s, beyond the file's duration (30 s)",
        "events.csv:14": "audio file 'site3/missing.wav' matches no input file",
        "events.csv:15": "end_s is not a number: 'x'",
    }
    assert [f["num_windows"] for f in m["files"]] == [79, 59, 49]
    by_file = _by_file(read_records(out))
    for path, frames in ((p, s * RATE) for p, s in SECONDS.items()):
        rows = by_file[str(tmp_path / "audio" / path)]
        starts = [r["win_start_idx"] for r in rows]
        assert starts == list(range(0, frames - WIN + 1, HOP))  # every grid window, once
        want = brute_labels(starts, frames, truth[path])
        for r, labels in zip(rows, want, strict=True):
            names = sorted(labels) or ["background"]
            np.testing.assert_array_equal(r["labels"], [c in names for c in m["classes"]])
            assert r["class"] == "+".join(names)
            assert r["target"] == (m["classes"].index(names[0]) if len(names) == 1 else -1)
            s = r["win_start_idx"]
            overlapping = sorted(
                (a - s, b - s, m["classes"].index(lab))
                for a, b, lab in truth[path]
                if a < s + WIN and b > s
            )
            assert r["num_events"] == len(overlapping)
            assert r["events"][: len(overlapping)].tolist() == [list(e) for e in overlapping]
            assert (r["events"][len(overlapping) :] == -1).all()
    splits = {f["path"]: f["split"] for f in m["files"]}
    stored = {s: n["num_examples"] for s, n in m["splits"].items()}
    per_split = {s: sum(f["num_windows"] for f in m["files"] if f["split"] == s) for s in stored}
    assert stored == per_split and len(set(splits.values())) == 2  # files, not windows, split


@pytest.mark.slow
def test_centred_event_windows_and_seeded_background(tmp_path):
    truth = _events(2)
    _corpus(tmp_path, truth)
    args = [
        "--win_len", str(WIN), "--features", "none", "--event_windows", "centered",
        "--background_per_file", "3", "--annotations", str(tmp_path / "tables" / "*"),
        "--annotation_column", "Species", "--min_label_overlap", "0.1",
    ]  # fmt: skip
    record(str(tmp_path / "audio" / "**" / "*.wav"), tmp_path / "out", *args)
    by_file = _by_file(read_records(tmp_path / "out"))
    for path, seconds in SECONDS.items():
        rows = by_file[str(tmp_path / "audio" / path)]
        frames = seconds * RATE
        starts = {r["win_start_idx"] for r in rows}
        for a, b, _ in truth[path]:  # one window centred on every event (± one sample)
            centre = (a + b) / 2
            expected = min(max(round(centre - WIN / 2), 0), frames - WIN)
            assert any(abs(s - expected) <= 1 for s in starts), (path, a, b)
        background = [r for r in rows if r["num_events"] == 0]
        assert len(background) == 3 and all(r["class"] == "background" for r in background)
        busy = np.zeros(frames, bool)
        for a, b, _ in truth[path]:
            busy[a:b] = True
        assert not any(
            busy[r["win_start_idx"] : r["win_start_idx"] + WIN].any() for r in background
        )
        assert len(rows) == len({round((a + b) / 2) for a, b, _ in truth[path]}) + 3


def test_annotation_options_are_checked_up_front(tmp_path, capsys):
    from tests.support.record_helpers import SAMPLE_DIR, cli_error

    base = ["--input_pattern", str(SAMPLE_DIR / "*.wav"), "--output_dir", str(tmp_path / "o")]
    missing = cli_error(capsys, *base, "--annotations", str(tmp_path / "none*.csv"))
    assert missing.endswith("matches no file")
    table = tmp_path / "t.csv"
    table.write_text("a.wav,1,2,tug\n")
    both = ["--annotations", str(table), "--background_per_file", "2", "--drop_background"]
    assert "--background_per_file needs --event_windows centered" in cli_error(capsys, *base, *both)
    assert "not with --annotations" in cli_error(
        capsys, *base, "--annotations", str(table), "--shard_by", "class"
    )
    assert "--min_label_fraction" in cli_error(
        capsys, *base, "--annotations", str(table), "--min_label_fraction", "0"
    )


@pytest.mark.slow
def test_drop_background_records_only_labelled_windows(tmp_path):
    truth = _events(3)
    _corpus(tmp_path, truth)
    out = tmp_path / "out"
    record(
        str(tmp_path / "audio" / "**" / "*.wav"),
        out,
        "--win_len", str(WIN), "--hop_len", str(HOP), "--features", "none", "--drop_background",
        "--annotations", str(tmp_path / "tables" / "*"), "--annotation_column", "Species",
    )  # fmt: skip
    m = load_manifest(out)
    assert m["classes"] == list(CLASSES)  # no background class
    by_file = _by_file(read_records(out))
    for path, seconds in SECONDS.items():
        frames = seconds * RATE
        grid = list(range(0, frames - WIN + 1, HOP))
        labelled = [
            s
            for s, labels in zip(grid, brute_labels(grid, frames, truth[path]), strict=True)
            if labels
        ]
        rows = by_file.get(str(tmp_path / "audio" / path), [])
        assert [r["win_start_idx"] for r in rows] == labelled
        assert all(r["labels"].sum() >= 1 for r in rows)
