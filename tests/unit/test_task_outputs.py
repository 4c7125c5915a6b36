"""transforms.stages.task_outputs: the read stage's sink, `TaskOutputs`, on real read tasks.

What a task emits but its records' bytes (AUTO samples, files table lines, errors, moments,
parts) is what its commit and checkpoint records list, whatever the checkpoints cut; the
checkpoint rule; a failed file logged, counted and kept. Driven through `ReadTaskFn.process`
on real WAV files (no Beam runner: the DoFn's outputs drained in this process) and directly.
"""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import pytest

from pipelines.config import RecordConfig
from pipelines.plan import one_task, plan_record
from tests.support import wavgen
from transforms.spec.compression import AUTO_SAMPLE_SIZE
from transforms.stages import read_windows
from transforms.stages.moments import features_from_json, total
from transforms.stages.progress import ProgressFile
from transforms.stages.task_commits import (
    ERRORS_TAG,
    FILES_TAG,
    PARTS_TAG,
    SAMPLES_TAG,
    STATS_TAG,
    ReusedRecords,
    unpacked_lines,
)
from transforms.stages.task_outputs import ReadCounters, TaskOutputs


def _plan(directory, files: int = 12):
    """`files` short real WAV files in two class folders, one read task, log-mel features
    (normalised: the task's moments are kept)."""
    for i in range(files):
        folder = directory / "in" / ("cat", "dog")[i % 2]
        folder.mkdir(parents=True, exist_ok=True)
        samples = wavgen.synth(1000 + 100 * i, seed=i)
        wavgen.write_wav(folder / f"clip_{i:03d}.wav", samples, sample_rate=8000, subtype="PCM_16")
    config = RecordConfig(
        input_pattern=str(directory / "in" / "*" / "*.wav"),
        output_dir=str(directory / "out"),
        label_source="dirname",
        win_len=1000,
        features="log_mel",
    )
    return one_task(plan_record(config))


def _drained(plan) -> dict[str, list]:
    """`ReadTaskFn.process` on the plan's one task: its outputs by tag (``rows``: untagged)."""
    fn = read_windows.ReadTaskFn(
        plan.read, plan.sharding, classes=plan.classes, output_dir=plan.output_dir
    )
    fn.setup()
    try:
        (task,) = plan.tasks
        outputs: dict[str, list] = {}
        for out in fn.process(task):
            if isinstance(out, beam.pvalue.TaggedOutput):
                outputs.setdefault(out.tag, []).append(out.value)
            else:
                outputs.setdefault("rows", []).append(out)
    finally:
        fn.teardown()
    return outputs


def _records(plan) -> dict[tuple[int, int], dict]:
    """The task's commit and checkpoint records by (start, stop)."""
    commits = Path(plan.output_dir) / ".tmp" / "commits"
    return {
        (r["start"], r["stop"]): r
        for r in (json.loads(p.read_text()) for p in sorted(commits.iterdir()))
    }


@pytest.mark.parametrize("checkpoint_bytes", [read_windows.CHECKPOINT_BYTES, 1])
def test_the_commit_record_lists_what_the_task_emitted(tmp_path, monkeypatch, checkpoint_bytes):
    """Every file's table line, every sample, every part and the moments of every piece the
    task emitted are those its records list (a checkpoint after every file with 1 byte)."""
    monkeypatch.setattr(read_windows, "CHECKPOINT_BYTES", checkpoint_bytes)
    plan = _plan(tmp_path)
    outputs = _drained(plan)
    records = _records(plan)
    (task,) = plan.tasks
    n = len(task.segments)
    whole = records.pop((0, n))
    lines = b"".join(map(unpacked_lines, outputs[FILES_TAG])).decode().splitlines()
    assert [json.loads(line) for line in lines] == whole["files"] and len(lines) == n
    assert len(outputs[SAMPLES_TAG]) == len(whole["sampled"]) == min(n, AUTO_SAMPLE_SIZE)
    assert [p["rows"] for p in outputs[PARTS_TAG]] == [p["rows"] for p in whole["parts"]]
    assert (
        sum(p["rows"] for p in whole["parts"])
        == whole["windows"]
        == sum(b.num_rows for b in outputs["rows"])
    )
    assert ERRORS_TAG not in outputs and whole["errors"] == []
    # one stats output a checkpoint's piece and one at the commit; the pieces cut the task
    assert len(outputs[STATS_TAG]) == len(records) + 1
    assert [(start, stop) for start, stop in sorted(records)] == [
        (i, i + 1) for i in range(len(records))
    ]
    assert len(records) == (n - 1 if checkpoint_bytes == 1 else 0)
    for (start, stop), piece in records.items():
        assert piece["files"] == whole["files"][start:stop]
    # the pieces' moments add up to the whole task's (exact integers)
    assert total(outputs[STATS_TAG]) == features_from_json(whole["moments"])
    assert features_from_json(whole["moments"])["log_mel"].count > 0


def _outputs(plan, *, checkpoint_bytes: float = 100) -> TaskOutputs:
    (task,) = plan.tasks
    progress = ProgressFile(plan.output_dir)
    return TaskOutputs(
        task,
        output_dir=plan.output_dir,
        moment_shapes={},
        analysis_keys=plan.read.layout.analysis_keys,
        analysis_rows=4,
        analyzed_splits=None,
        checkpoint_bytes=checkpoint_bytes,
        summary=lambda seg, windows: {"path": seg.file.path, "num_windows": windows},
        counters=ReadCounters(),
        progress=progress,
        reuse=ReusedRecords(plan.read.layout, output_dir=plan.output_dir, progress=progress),
    )


def test_a_checkpoint_is_due_past_its_bytes_and_never_at_the_end(tmp_path):
    plan = _plan(tmp_path, files=3)
    outputs = _outputs(plan, checkpoint_bytes=100)
    assert not outputs.checkpoint_due(99, 1)
    assert outputs.checkpoint_due(100, 1)
    assert not outputs.checkpoint_due(10_000, 3)  # the last segment: the commit follows
    assert list(outputs.checkpoint(1, parts=[], written=150))  # its piece's moments
    assert not outputs.checkpoint_due(249, 2) and outputs.checkpoint_due(250, 2)


def test_a_failed_file_is_its_error_output_and_in_the_commit_record(tmp_path, caplog):
    plan = _plan(tmp_path, files=3)
    (task,) = plan.tasks
    outputs = _outputs(plan)
    seg = task.segments[1]
    error = outputs.file_failed(seg, ValueError("no data"))
    assert error.tag == ERRORS_TAG
    assert error.value == {"path": seg.file.path, "reason": "ValueError: no data"}
    assert f"skipping {seg.file.path}: ValueError: no data" in caplog.text
    line = outputs.file_read(0, 2)
    assert json.loads(line) == {"path": task.segments[0].file.path, "num_windows": 2}
    assert [o.tag for o in outputs.commit([])] == [STATS_TAG]
    (record,) = _records(plan).values()
    assert record["errors"] == [error.value] and record["files"] == [json.loads(line)]
