"""Pure split/shard planning: splits pinned as literals in any process, exact ranks, shard ranges
per class, whole files per shard under ``--shard_by file``."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.spec import sharding as shard_plan
from transforms.spec.types import ReadTask, Segment, Sharding

ROOT = Path(__file__).resolve().parents[2]


def test_parse_splits_normalises_and_rejects_bad_specs():
    assert shard_plan.parse_splits("train=80,validation=10,test=10") == (
        ("train", 0.8),
        ("validation", 0.1),
        ("test", 0.1),
    )
    assert shard_plan.parse_splits(None) == ()
    for bad in ("train", "train=0", "a=1,a=2", "all=1", "x/y=1", "t=abc"):
        with pytest.raises(ValueError, match="--splits"):
            shard_plan.parse_splits(bad)


def test_split_of_is_stable_and_relative_to_the_pattern_base():
    sh = Sharding(splits=shard_plan.parse_splits("train=50,test=50"), split_base="/data/")
    moved = Sharding(splits=sh.splits, split_base="gs://bucket/corpus/")
    names = [f"a/{i}.wav" for i in range(200)]
    here = [shard_plan.split_of("/data/" + n, sh) for n in names]
    assert here == [shard_plan.split_of("gs://bucket/corpus/" + n, moved) for n in names]
    assert 60 < here.count("train") < 140  # roughly half
    assert shard_plan.pattern_base("data/**/*.wav") == "data/"
    assert shard_plan.pattern_base("/x/y/file.wav") == "/x/y/"


class _F:
    def __init__(self, index, split="all"):
        self.index, self.split, self.path = index, split, f"f{index}"


def test_segments_keep_the_first_max_elements_and_count_ranks_per_split():
    sh = Sharding(splits=(("a", 0.5), ("b", 0.5)), max_elements=9)
    files = [(_F(0, "a"), 4), (_F(1, "b"), 3), (_F(2, "a"), 5), (_F(3, "b"), 2)]
    segments = shard_plan.plan_segments(files, sh)
    assert [(f.index, kept, rank) for f, kept, rank in segments] == [
        (0, 4, 0),
        (1, 3, 0),
        (2, 2, 4),
        (3, 0, 3),
    ]


def test_tasks_cut_long_files_and_cover_every_row_once_in_order():
    segments = [(_F(0), 10, 0), (_F(1), 0, 10), (_F(2), 3, 10), (_F(3), 7, 13)]
    tasks = shard_plan.plan_tasks(segments, rows_per_task=4)
    assert [t.rows for t in tasks] == [4, 4, 4, 4, 4]
    rows = [
        (s.file.index, r) for t in tasks for s in t.segments for r in range(s.row_start, s.row_stop)
    ]
    assert rows == [(0, r) for r in range(10)] + [(2, r) for r in range(3)] + [
        (3, r) for r in range(7)
    ]
    assert any(s.file.index == 1 for t in tasks for s in t.segments)  # empty file still listed


@pytest.mark.parametrize(
    ("total", "per", "limit", "want"),
    [
        (10, 3, None, 4),
        (9, 3, None, 3),
        (10, 10, None, 1),
        (10, 1, None, 10),
        (10, 3, 6, 2),
        (10, 4, 11, 3),
        (0, 5, None, 1),
    ],
)
def test_shard_counts_under_elements_per_shard(total, per, limit, want):
    sh = Sharding(elements_per_shard=per, max_elements=limit)
    segments = shard_plan.plan_segments([(_F(0), total)], sh)
    rows = shard_plan.split_rows(segments, sh)
    assert shard_plan.split_shard_counts(rows, sh, {"all": 99}) == {"all": want}


def test_class_shards_are_disjoint_ranges():
    sh = Sharding(shard_by="class", classes=("bird", "dog", "rain"))
    seen = {c: set() for c in sh.classes}
    for c in sh.classes:
        for start in range(0, 4000, 10):
            seen[c].add(
                shard_plan.shard_of((7, 0, start), label=c, split_rank=0, num_shards=7, sharding=sh)
            )
    assert set.union(*seen.values()) == set(range(7))
    assert not (seen["bird"] & seen["dog"]) and not (seen["dog"] & seen["rain"])


# --- splits pinned as literals ---------------------------------------------------------------
# Computed once (2026-11-25, the blake2b rule of `shard_plan`) and pinned: a split is stored in
# every dataset, so the same path must land in the same split in every process, on every machine
# and in every later version. The unit hash of each path is in the comment.
TWO_WAY = "train=80,test=20"
THREE_WAY = "train=50,validation=25,test=25"
SPLIT_CASES = [  # (path relative to the pattern base, split of TWO_WAY, split of THREE_WAY)
    ("dog/000_dog.wav", "train", "train"),  # 0.0491
    ("cat/001_cat.wav", "train", "validation"),  # 0.5035
    ("cat/007_cat.wav", "train", "validation"),  # 0.6608
    ("rain/008_rain.wav", "test", "test"),  # 0.8561
    ("dog/009_dog.wav", "train", "train"),  # 0.3783
    ("cat/016_cat.wav", "test", "test"),  # 0.8962
    ("rain/026_rain.wav", "train", "validation"),  # 0.7486
    ("dog/030_dog.wav", "test", "test"),  # 0.9694
    ("cat/034_cat.wav", "train", "test"),  # 0.7612
    ("rain/038_rain.wav", "train", "train"),  # 0.4309
]
BASE = "gs://bucket/corpus/"
BASED_CASES = [  # THREE_WAY with split_base BASE: the base is cut off; other paths hash whole
    (BASE + "dog/000_dog.wav", "train"),
    (BASE + "cat/001_cat.wav", "validation"),
    (BASE + "rain/008_rain.wav", "test"),
    ("/elsewhere/dog/000_dog.wav", "validation"),  # 0.7230: not under the base
    ("/elsewhere/cat/001_cat.wav", "test"),  # 0.8561
    ("/elsewhere/cat/007_cat.wav", "train"),  # 0.2822
]


def _pinned_splits() -> dict[str, list[str]]:
    """{case name: [split of each path]}, computed by `split_of` in this process."""
    two = Sharding(splits=shard_plan.parse_splits(TWO_WAY))
    three = Sharding(splits=shard_plan.parse_splits(THREE_WAY))
    based = Sharding(splits=three.splits, split_base=BASE)
    return {
        "two": [shard_plan.split_of(p, two) for p, _, _ in SPLIT_CASES],
        "three": [shard_plan.split_of(p, three) for p, _, _ in SPLIT_CASES],
        "based": [shard_plan.split_of(p, based) for p, _ in BASED_CASES],
    }


EXPECTED_SPLITS = {
    "two": [two for _, two, _ in SPLIT_CASES],
    "three": [three for _, _, three in SPLIT_CASES],
    "based": [split for _, split in BASED_CASES],
}


def test_split_of_gives_the_pinned_split_of_each_path():
    """Pins the split rule: each literal path goes to its literal split (two- and three-way,
    and with a split_base prefix cut off, or not when the path is outside it)."""
    assert _pinned_splits() == EXPECTED_SPLITS


def test_split_of_is_the_same_in_processes_with_other_hash_seeds():
    """Pins that splits do not depend on the process: two interpreters with different
    PYTHONHASHSEED values (Python's salted str hash differs between them) give the literals."""
    probe = (
        "import json\n"
        "from tests.unit.test_sharding import _pinned_splits\n"
        "print(json.dumps(_pinned_splits()))\n"
    )
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert json.loads(out.stdout) == EXPECTED_SPLITS, f"PYTHONHASHSEED={seed}"


# --- shard_by file ---------------------------------------------------------------------------


def test_shard_by_file_keeps_each_file_in_one_shard_and_spreads_files():
    """Pins ``--shard_by file`` with several shards per split: every window and channel of a
    file goes to one shard, and 24 files use all 4 shards (``hash`` would cut files up)."""
    sh = Sharding(shard_by="file")
    num_shards = 4
    file_shards = {}
    for index in range(24):
        shards = {
            shard_plan.shard_of(
                (index, channel, start),
                label="dog",
                split_rank=rank,
                num_shards=num_shards,
                sharding=sh,
            )
            for rank, (channel, start) in enumerate(
                (c, s) for s in range(0, 40_000, 1000) for c in (0, 1)
            )
        }
        assert len(shards) == 1, (index, shards)
        file_shards[index] = shards.pop()
    assert set(file_shards.values()) == set(range(num_shards))
    hashed = Sharding(shard_by="hash")
    spread = {
        shard_plan.shard_of((0, 0, s), label="dog", split_rank=0, num_shards=4, sharding=hashed)
        for s in range(0, 40_000, 1000)
    }
    assert len(spread) > 1  # the contrast: by hash one file's windows are spread


# --- the plan cut batch by batch (the in-job plan step) --------------------------------------
# The reference: `plan_segments` and `plan_tasks` as they were written for every file at once
# (one pass, a task closed when it holds `rows_per_task` rows); the batch-wise pieces
# (`batch_rows` -> `rows_before` -> `plan_segments(before=...)` -> `cut_segments`) must give
# the same segments and tasks for any cut of the files into batches.


def _reference_segments(files, sharding):
    out, total = [], 0
    split_rows = dict.fromkeys(sharding.split_names, 0)
    limit = sharding.max_elements
    for f, rows in files:
        kept = (int(rows) if rows > 0 else 0) if limit is None else max(0, min(rows, limit - total))
        out.append((f, kept, split_rows[f.split]))
        total += kept
        split_rows[f.split] += kept
    return out


def _reference_tasks(segments, rows_per_task):
    tasks, current, filled = [], [], 0
    for f, rows, split_rank in segments:
        start = 0
        while True:
            take = min(rows - start, rows_per_task - filled)
            current.append(Segment(f, start, start + take, split_rank))
            start, filled = start + take, filled + take
            if filled >= rows_per_task:
                tasks.append(ReadTask(len(tasks), tuple(current)))
                current, filled = [], 0
            if start >= rows:
                break
    if current:
        tasks.append(ReadTask(len(tasks), tuple(current)))
    return tuple(tasks)


@st.composite
def _plans(draw):
    """(files with planned rows, sharding, rows per task, batch sizes)."""
    names = draw(st.sampled_from([(), ("train", "test"), ("a", "b", "c")]))
    splits = tuple((n, 1 / len(names)) for n in names)
    n = draw(st.integers(0, 40))
    rows = draw(st.lists(st.integers(-1, 12) | st.just(0), min_size=n, max_size=n))
    where = [draw(st.sampled_from(names)) if names else "all" for _ in range(n)]
    files = [(_F(i, split), r) for i, (split, r) in enumerate(zip(where, rows, strict=True))]
    limit = draw(st.none() | st.integers(0, 60))
    per = draw(st.integers(1, 20))
    sizes, left = [], n
    while left > 0:
        size = draw(st.integers(1, max(1, left)))
        sizes.append(size)
        left -= size
    return files, Sharding(splits=splits, max_elements=limit), per, sizes


def _batched(files, sizes):
    out, start = [], 0
    for size in sizes:
        out.append(files[start : start + size])
        start += size
    return out


@settings(max_examples=400, deadline=None)
@given(_plans())
def test_the_batch_wise_plan_cuts_the_tasks_the_whole_plan_cuts(plan):
    files, sh, per, sizes = plan
    whole = _reference_segments(files, sh)
    assert shard_plan.plan_segments(files, sh) == whole
    tasks = _reference_tasks(whole, per) if whole else ()
    assert shard_plan.plan_tasks(whole, rows_per_task=per) == tasks
    batches = _batched(files, sizes)
    summaries = [
        shard_plan.batch_rows(((f.split, r) for f, r in b), sh, first_index=b[0][0].index)
        for b in batches
    ]
    starts, end = shard_plan.rows_before(reversed(summaries), sh)  # any order
    assert dict(end.split_rows) == shard_plan.split_rows(whole, sh)
    assert end.total == sum(kept for _, kept, _ in whole)
    segments, pieces = [], []
    for b in batches:
        before = starts[b[0][0].index]
        mine = shard_plan.plan_segments(b, sh, before=before)
        segments += mine
        pieces += shard_plan.cut_segments(mine, rows_per_task=per, first_row=before.total)
    assert segments == whole
    by_task = {}
    for task_id, seg in reversed(pieces):  # grouped in any order, sorted back
        by_task.setdefault(task_id, []).append(seg)
    rebuilt = tuple(
        ReadTask(t, tuple(sorted(segs, key=lambda s: (s.file.index, s.row_start))))
        for t, segs in sorted(by_task.items())
    )
    assert rebuilt == tasks


def test_a_file_without_rows_on_a_task_boundary_opens_the_next_task():
    segments = [(_F(0), 4, 0), (_F(1), 0, 4), (_F(2), 2, 4), (_F(3), 0, 6)]
    tasks = shard_plan.plan_tasks(segments, rows_per_task=2)
    assert [[(s.file.index, s.row_start, s.row_stop) for s in t.segments] for t in tasks] == [
        [(0, 0, 2)],
        [(0, 2, 4)],
        [(1, 0, 0), (2, 0, 2)],
        [(3, 0, 0)],  # after the last full task: a task of its own, as before
    ]
    pieces = list(shard_plan.cut_segments(segments[2:], rows_per_task=2, first_row=4))
    assert [t for t, _ in pieces] == [2, 3]


def test_max_elements_cuts_inside_one_batch_and_keeps_the_ranks_of_the_next():
    sh = Sharding(splits=(("a", 0.5), ("b", 0.5)), max_elements=6)
    first = shard_plan.batch_rows([("a", 3), ("b", 0), ("a", 2)], sh, first_index=0)
    second = shard_plan.batch_rows([("b", 4), ("a", 5), ("b", 1)], sh, first_index=3)
    assert second.head == (("b", 4), ("a", 5))  # the cut is there or before: no later file
    starts, end = shard_plan.rows_before([second, first], sh)
    assert starts[3] == shard_plan.RowsBefore(5, (("a", 5), ("b", 0)))
    assert end == shard_plan.RowsBefore(6, (("a", 5), ("b", 1)))
