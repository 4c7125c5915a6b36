"""Read tasks (`pipelines.plan.tasks`): exact ranks per split after ``--max_elements``, long files
cut into segments, and the plan cut batch by batch giving the whole plan's tasks."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.plan import tasks as task_plan
from pipelines.plan.shard_counts import split_rows
from transforms.spec.types import ReadTask, Segment, Sharding


class _F:
    def __init__(self, index, split="all"):
        self.index, self.split, self.path = index, split, f"f{index}"


def test_segments_keep_the_first_max_elements_and_count_ranks_per_split():
    sh = Sharding(splits=(("a", 0.5), ("b", 0.5)), max_elements=9)
    files = [(_F(0, "a"), 4), (_F(1, "b"), 3), (_F(2, "a"), 5), (_F(3, "b"), 2)]
    segments = task_plan.plan_segments(files, sh)
    assert [(f.index, kept, rank) for f, kept, rank in segments] == [
        (0, 4, 0),
        (1, 3, 0),
        (2, 2, 4),
        (3, 0, 3),
    ]


def test_tasks_cut_long_files_and_cover_every_row_once_in_order():
    segments = [(_F(0), 10, 0), (_F(1), 0, 10), (_F(2), 3, 10), (_F(3), 7, 13)]
    tasks = task_plan.plan_tasks(segments, rows_per_task=4)
    assert [t.rows for t in tasks] == [4, 4, 4, 4, 4]
    rows = [
        (s.file.index, r) for t in tasks for s in t.segments for r in range(s.row_start, s.row_stop)
    ]
    assert rows == [(0, r) for r in range(10)] + [(2, r) for r in range(3)] + [
        (3, r) for r in range(7)
    ]
    assert any(s.file.index == 1 for t in tasks for s in t.segments)  # empty file still listed


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
    assert task_plan.plan_segments(files, sh) == whole
    tasks = _reference_tasks(whole, per) if whole else ()
    assert task_plan.plan_tasks(whole, rows_per_task=per) == tasks
    batches = _batched(files, sizes)
    summaries = [
        task_plan.batch_rows(((f.split, r) for f, r in b), sh, first_index=b[0][0].index)
        for b in batches
    ]
    starts, end = task_plan.rows_before(reversed(summaries), sh)  # any order
    assert dict(end.split_rows) == split_rows(whole, sh)
    assert end.total == sum(kept for _, kept, _ in whole)
    segments, pieces = [], []
    for b in batches:
        before = starts[b[0][0].index]
        mine = task_plan.plan_segments(b, sh, before=before)
        segments += mine
        pieces += task_plan.cut_segments(mine, rows_per_task=per, first_row=before.total)
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
    tasks = task_plan.plan_tasks(segments, rows_per_task=2)
    assert [[(s.file.index, s.row_start, s.row_stop) for s in t.segments] for t in tasks] == [
        [(0, 0, 2)],
        [(0, 2, 4)],
        [(1, 0, 0), (2, 0, 2)],
        [(3, 0, 0)],  # after the last full task: a task of its own, as before
    ]
    pieces = list(task_plan.cut_segments(segments[2:], rows_per_task=2, first_row=4))
    assert [t for t, _ in pieces] == [2, 3]


def test_max_elements_cuts_inside_one_batch_and_keeps_the_ranks_of_the_next():
    sh = Sharding(splits=(("a", 0.5), ("b", 0.5)), max_elements=6)
    first = task_plan.batch_rows([("a", 3), ("b", 0), ("a", 2)], sh, first_index=0)
    second = task_plan.batch_rows([("b", 4), ("a", 5), ("b", 1)], sh, first_index=3)
    assert second.head == (("b", 4), ("a", 5))  # the cut is there or before: no later file
    starts, end = task_plan.rows_before([second, first], sh)
    assert starts[3] == task_plan.RowsBefore(5, (("a", 5), ("b", 0)))
    assert end == task_plan.RowsBefore(6, (("a", 5), ("b", 1)))
