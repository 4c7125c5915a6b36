"""transforms.stages.task_coder: a read task is sized without pickling every segment, travels
as pickle, and the read stage's tasks PCollection uses the coder; a task's segments kept as
pickled pieces (`EncodedSegments`) read as the same segments, in order."""

from __future__ import annotations

import pickle
import threading

import apache_beam as beam

from pipelines.config import RecordConfig
from pipelines.plan import one_task, plan_record
from tests.support import wavgen
from transforms.spec.types import ReadTask
from transforms.stages import composites, staged
from transforms.stages.task_coder import (
    EncodedSegments,
    ReadTaskCoder,
    encode_segments,
    estimated_size,
)


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


def _encoded(task: ReadTask, *, sizes: tuple[int, ...]) -> EncodedSegments:
    """`task`'s segments cut into pieces of `sizes`, encoded, handed over out of order."""
    pieces, start = [], 0
    for size in sizes:
        pieces.append(encode_segments(task.segments[start : start + size]))
        start += size
    assert start == len(task.segments)
    return EncodedSegments(reversed(pieces))


def test_encoded_segments_read_as_the_tasks_segments_in_order(tmp_path):
    task = _task(tmp_path)
    segments = _encoded(task, sizes=(5, 1, 6))
    assert len(segments) == 12
    assert tuple(segments) == task.segments
    assert [segments[i] for i in (0, 4, 5, 6, 11, -1, -12)] == [
        task.segments[i] for i in (0, 4, 5, 6, 11, -1, -12)
    ]
    assert segments[3:8] == task.segments[3:8] and isinstance(segments[3:8], tuple)
    for bad in (12, -13):
        try:
            segments[bad]
        except IndexError:
            pass
        else:
            raise AssertionError(f"index {bad} read")
    encoded = ReadTask(task.task_id, segments)
    assert encoded == task and task == encoded and hash(encoded) == hash(task)
    assert encoded.rows == task.rows
    assert encoded != ReadTask(task.task_id, task.segments[:-1])


def test_encoded_segments_after_a_start_are_the_tail_still_in_pieces(tmp_path):
    """`after(start)` (a resumed task going on from a checkpoint): the segments from `start`
    on, in pieces; the pieces after the one holding `start` are kept as they were."""
    task = _task(tmp_path)
    segments = _encoded(task, sizes=(5, 1, 6))
    for start in range(-1, 14):
        tail = segments.after(start)
        assert isinstance(tail, EncodedSegments)
        assert tuple(tail) == task.segments[max(start, 0) :], start
        assert len(tail) == len(task.segments[max(start, 0) :]), start
    assert segments.after(0) is segments
    assert segments.after(3)._data[1:] == segments._data[1:]  # pieces 2 and 3 not re-encoded
    assert ReadTask(task.task_id, segments.after(7)) == ReadTask(task.task_id, task.segments[7:])


def test_encoded_segments_travel_as_their_pieces_and_estimate_like_the_task(tmp_path):
    task = _task(tmp_path)
    encoded = ReadTask(task.task_id, _encoded(task, sizes=(12,)))
    impl = ReadTaskCoder().get_impl()
    back = impl.decode(impl.encode(encoded))
    assert isinstance(back.segments, EncodedSegments) and back == task
    assert estimated_size(encoded) == estimated_size(task)
    assert EncodedSegments(()) == () and len(EncodedSegments(())) == 0


def test_encoded_segments_read_by_two_threads_at_once(tmp_path):
    """The read stage iterates a task's segments in its decode thread while its own thread
    iterates and indexes them: each reader gets every segment, in order."""
    task = _task(tmp_path)
    segments = _encoded(task, sizes=(1, 2, 3, 6))
    got: dict[str, list] = {}

    def iterate(name: str) -> None:
        got[name] = [seg for _ in range(50) for seg in segments]

    def index() -> None:
        got["index"] = [segments[i] for _ in range(50) for i in range(len(segments))]

    threads = [threading.Thread(target=iterate, args=(n,)) for n in ("a", "b")]
    threads.append(threading.Thread(target=index))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got["a"] == got["b"] == got["index"] == list(task.segments) * 50
