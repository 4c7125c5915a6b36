"""The plan's per-file lists reach the job through a staged file, not inside the job (issue 27).

The submitted pipeline (its Runner API proto, what Dataflow receives as pipeline.pb) must not
grow with the number of input files; the staged file is read back only when its SHA-256 is the
one the job carries.
"""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pytest

from pipelines import job
from pipelines.config import RecordConfig
from pipelines.plan import plan_record
from tests.support import wavgen
from transforms.stages import staged


def _clips(root: Path, n: int) -> str:
    """`n` 0.25-s 16-bit clips in 2 class folders; their pattern."""
    for i in range(n):
        folder = root / f"class{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        samples = wavgen.synth(4000, seed=i)
        wavgen.write_wav(folder / f"clip{i:05d}.wav", samples, sample_rate=16000, subtype="PCM_16")
    return str(root / "*" / "*.wav")


def _job_bytes(tmp_path: Path, n: int) -> tuple[int, staged.Staged]:
    """The serialized Runner API proto of the record job over `n` clips, and its staged tasks."""
    config = RecordConfig(
        input_pattern=_clips(tmp_path / f"in{n}", n),
        output_dir=str(tmp_path / f"out{n}"),
        win_len=4000,
        features="log_mel",
        label_source="dirname",
    )
    plan = plan_record(config)
    assert len(plan.inputs) == n
    lists = job.stage_plan(plan, plan.tasks)
    p = beam.Pipeline()
    job.build_pipeline(p, plan, staged=lists)
    return len(p.to_runner_api().SerializeToString()), lists.tasks


def test_the_job_does_not_grow_with_the_number_of_files(tmp_path):
    # 200 files: several read tasks, as 1,000 (a single task is not reshuffled: a smaller job)
    small, small_tasks = _job_bytes(tmp_path, 200)
    large, large_tasks = _job_bytes(tmp_path, 1000)
    assert small_tasks.count > 1 and large_tasks.count > 1
    # the tasks are in the staged file, which grows; the job only names it
    assert Path(large_tasks.path).stat().st_size > 4 * Path(small_tasks.path).stat().st_size
    assert abs(large - small) < 256, (small, large)  # a few counts and names: not ~30 B a file
    staged.release(large_tasks)
    loaded = staged.load(large_tasks)
    assert sum(len(t.segments) for t in loaded) == 1000


def test_a_job_in_the_launchers_process_gets_its_list_until_released(tmp_path):
    items = [{"path": f"/data/{i}.wav", "reason": "bad header"} for i in range(3)]
    ref = staged.stage(str(tmp_path), "errors", items)
    held = staged.load(ref)
    assert held == items and all(a is b for a, b in zip(held, items, strict=True))  # no copy
    Path(ref.path).write_bytes(b"not read while held")
    assert staged.load(ref) is held
    staged.release(ref)  # the job ended: only the checked file from now on
    with pytest.raises(ValueError, match=r"errors-.*\.pickle: the job's staged plan changed"):
        staged.load(ref)


def test_a_staged_list_reads_back_only_as_the_launcher_wrote_it(tmp_path):
    items = [{"path": f"/data/{i}.wav", "reason": "bad header"} for i in range(3)]
    ref = staged.stage(str(tmp_path), "errors", items)
    staged.release(ref)  # as another process sees it: from the file
    assert ref.path.startswith(f"{tmp_path}/{staged.PLAN_DIR}/errors-") and ref.count == 3
    loaded = staged.load(ref)
    assert loaded == items and loaded[0] is not items[0]
    data = Path(ref.path).read_bytes()
    Path(ref.path).write_bytes(data.replace(b"bad header", b"bad heaDer"))  # changed afterwards
    with pytest.raises(ValueError, match=r"errors-.*\.pickle: the job's staged plan changed"):
        staged.load(ref)
    Path(ref.path).unlink()
    with pytest.raises(ValueError, match=r"errors-.*\.pickle: the job's staged plan cannot be"):
        staged.load(ref)


def test_read_tasks_read_back_from_their_columns_as_the_same_objects(tmp_path):
    """Read tasks are staged as columns: they read back equal, a file cut into several segments
    (or tasks) one object, equal headers one object, annotations and resume records kept."""
    import numpy as np

    from transforms.audio import wav
    from transforms.spec.types import FileAnnotation, InputFile, ReadTask, Segment

    info = wav.WavInfo(16000, 1, 48000, "PCM_16", "int16", 2.0**15)
    annotation = FileAnnotation(
        starts=np.arange(2, dtype=np.int64),
        channels=1,
        classes=("a",),
        labels=np.ones((2, 1), np.float32),
        events=np.zeros((2, 1, 3), np.int64),
        num_events=np.ones(2, np.int64),
    )
    files = [
        InputFile(i, f"/d/{i}.wav", 96044, "a", "train", info, None, None, 1.5 + i)
        for i in range(5)
    ]
    files[3] = InputFile(3, "/d/3.wav", 96044, "", "test", info, None, annotation, 0.0)
    long = files[4]
    tasks = [
        ReadTask(0, tuple(Segment(f, 0, 3, i * 3) for i, f in enumerate(files[:4]))),
        ReadTask(1, (Segment(long, 0, 2, 12),), start=0, resumed=({"task": 1, "rows": [2]},)),
        ReadTask(2, (Segment(long, 2, 3, 14),)),
    ]
    ref = staged.stage(str(tmp_path), "tasks", tasks)
    staged.release(ref)  # as another process sees it: from the file
    loaded = staged.load(ref)
    assert loaded == tasks and ref.count == 3
    assert [t.resumed for t in loaded] == [t.resumed for t in tasks]
    assert loaded[1].segments[0].file is loaded[2].segments[0].file
    assert len({id(s.file.info) for t in loaded for s in t.segments}) == 1
    got = loaded[0].segments[3].file.annotation
    assert got.classes == ("a",) and np.array_equal(got.events, annotation.events)
    assert [s.file.modified for s in loaded[0].segments] == [1.5, 2.5, 3.5, 0.0]
    assert staged.load(staged.stage(str(tmp_path), "tasks", [])) == []


def test_input_files_read_back_from_their_columns(tmp_path):
    """The labelled inputs of a run planned in the job are staged as columns, their paths as
    one string: they read back equal, a label still one string, and paths holding the string's
    separator as a list."""
    from transforms.spec.types import InputFile

    files = [
        InputFile(i, f"/d/{c}/{i}.wav", 100 + i, c, "train", None, None, None, 1.5 + i)
        for i, c in enumerate(["a", "b", "a", "a"])
    ]
    files[1] = InputFile(1, "/d/x.wav", 7, None, "all", None, "file has no label", None, 0.0)
    ref = staged.stage(str(tmp_path), "inputs", files)
    staged.release(ref)  # as another process sees it: from the file
    loaded = staged.load(ref)
    assert loaded == files and ref.count == 4
    assert [f.modified for f in loaded] == [f.modified for f in files]
    assert loaded[0].label is loaded[2].label
    odd = [InputFile(0, "a\0b", 1), InputFile(1, "c", 2)]
    assert staged._joined([f.path for f in odd]) == ["a\0b", "c"]
    ref = staged.stage(str(tmp_path), "inputs", odd)
    staged.release(ref)
    assert staged.load(ref) == odd
    assert staged.load(staged.stage(str(tmp_path), "inputs", files[:1])) == files[:1]


def test_a_list_is_referenced_before_it_is_written(tmp_path):
    """`pickled` makes the job's reference (path and SHA-256) and the bytes without writing
    them, so that the job can be built while `write` writes them; the list reads back only
    once written."""
    items = [{"path": f"/data/{i}.wav", "reason": "bad header"} for i in range(3)]
    ref, data = staged.pickled(str(tmp_path), "errors", items)
    assert not Path(ref.path).exists() and ref.count == 3
    assert ref.path.endswith(f"errors-{ref.sha256[:16]}.pickle")
    staged.release(ref)
    with pytest.raises(ValueError, match="cannot be read"):
        staged.load(ref)
    staged.write(ref, data)
    assert staged.load(ref) == items


def test_the_one_task_is_held_in_pickled_pieces_equal_to_the_planned_one(tmp_path):
    """`job.held_tasks`: a task of more than a piece of segments is handed to a job in the
    launcher's process as pickled pieces (`task_coder.EncodedSegments`), equal to the planned
    task, segment by segment; the staged file still holds the planned tasks; a task of fewer
    segments or out of file order stays as planned."""
    from transforms.audio import wav
    from transforms.spec.types import InputFile, ReadTask, Segment
    from transforms.stages.task_coder import EncodedSegments

    info = wav.WavInfo(16000, 1, 48000, "PCM_16", "int16", 2.0**15)
    n = job.HELD_PIECE_SEGMENTS * 2 + 3
    files = [InputFile(i, f"/d/{i}.wav", 96044, "a", "train", info) for i in range(n)]
    segments = tuple(Segment(f, 0, 3, 3 * i) for i, f in enumerate(files))
    tasks = [ReadTask(0, segments)]
    held = job.held_tasks(tasks)
    assert isinstance(held[0].segments, EncodedSegments) and held == tasks
    assert list(held[0].segments) == list(segments) and held[0].segments[n - 1] == segments[-1]
    ref = staged.stage(str(tmp_path), "tasks", tasks, held=held)
    assert staged.load(ref)[0].segments is held[0].segments  # in this process: the pieces
    staged.release(ref)
    from_file = staged.load(ref)  # another process: the planned tasks, from their columns
    assert from_file == tasks and isinstance(from_file[0].segments, tuple)
    few = [ReadTask(1, segments[:5])]
    unordered = [ReadTask(2, segments[::-1])]
    assert job.held_tasks(few)[0] is few[0] and job.held_tasks(unordered)[0] is unordered[0]


def test_planned_seconds_sum_the_files_not_failed_as_the_plan_did():
    """`job.PlannedSeconds`: the seconds of the files with a header and not failed, summed in
    the plan's order (the same float as summed over the plan's files)."""
    from transforms.audio import wav
    from transforms.spec.types import InputFile

    headers = [
        wav.WavInfo(r, 1, n, "PCM_16", "int16", 2.0**15)
        for r, n in [(16000, 16001), (44100, 7), (8000, 12345)]
    ]
    files = [InputFile(i, f"/d/{i}.wav", 100, "a", "train", headers[i % 3]) for i in range(15)]
    files.append(InputFile(15, "/d/bad.wav", 1, "a", "train", None, "not a WAV"))
    seconds = job.PlannedSeconds(files)
    for failed in (set(), {"/d/1.wav", "/d/bad.wav"}, {f.path for f in files}):
        expected = sum(
            f.info.num_frames / f.info.sample_rate
            for f in files
            if f.info is not None and f.path not in failed
        )
        assert seconds.total(failed) == expected
