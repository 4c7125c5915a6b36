"""transforms.stages.task_coder: a read task is sized without pickling every segment, travels
as pickle, and the read stage's tasks PCollection uses the coder."""

from __future__ import annotations

import pickle

import apache_beam as beam

from pipelines.config import RecordConfig
from pipelines.plan import one_task, plan_record
from tests.support import wavgen
from transforms.planning.types import ReadTask
from transforms.stages import composites, staged
from transforms.stages.task_coder import ReadTaskCoder, estimated_size


def _config(directory, files: int = 12) -> RecordConfig:
    """`files` short real WAV files in two folders, recorded without features."""
    for i in range(files):
        folder = directory / ("cat", "dog")[i % 2]
        folder.mkdir(parents=True, exist_ok=True)
        samples = wavgen.synth(1000 + 100 * i, seed=i)
        wavgen.write_wav(folder / f"clip_{i:03d}.wav", samples, sample_rate=8000, subtype="PCM_16")
    return RecordConfig(
        input_pattern=str(directory / "*" / "*.wav"),
        output_dir=str(directory / "out"),
        label_source="dirname",
        win_len=1000,
        features="none",
    )


def _task(directory, files: int = 12) -> ReadTask:
    """The one read task of `_config`'s files."""
    [task] = one_task(plan_record(_config(directory, files))).tasks
    assert len(task.segments) == files
    return task


class _CountingCoder(ReadTaskCoder):
    encoded = 0

    def encode(self, value: ReadTask) -> bytes:
        type(self).encoded += 1
        return super().encode(value)


def test_round_trip_keeps_the_task(tmp_path):
    task = _task(tmp_path)
    impl = ReadTaskCoder().get_impl()  # what Beam's workers use
    assert impl.decode(impl.encode(task)) == task


def test_size_estimate_is_near_the_pickled_size_without_encoding(tmp_path):
    task = _task(tmp_path)
    impl = _CountingCoder().get_impl()
    size, observables = impl.get_estimated_size_and_observables(task)  # Beam's sampling call
    assert observables == [] and _CountingCoder.encoded == 0
    assert size == estimated_size(task)
    pickled = len(pickle.dumps(task, pickle.HIGHEST_PROTOCOL))
    assert 0.8 * pickled < size < 1.25 * pickled, (size, pickled)


def test_registered_for_read_tasks_and_the_read_stage_types_its_tasks(tmp_path):
    assert composites.ReadTaskCoder is ReadTaskCoder
    plan = one_task(plan_record(_config(tmp_path)))
    tasks = staged.stage(str(tmp_path / "out"), "tasks", plan.tasks)
    p = beam.Pipeline()  # built, not run: the tasks' PCollection and its coder
    _ = p | "ReadWindows" >> composites.ReadWindows(
        tasks,
        plan.read,
        plan.sharding,
        classes=plan.classes,
        output_dir=str(tmp_path / "out"),
        analyzed_splits=plan.analyzed_splits,
    )
    found = []

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node) -> None:
            if node.full_label.endswith("/ListTasks"):
                found.extend(out.element_type for out in node.outputs.values())

    p.visit(Visitor())
    assert found == [ReadTask]
    assert isinstance(beam.coders.registry.get_coder(found[0]), ReadTaskCoder)
