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
from transforms.record import staged


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
