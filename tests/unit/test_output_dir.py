"""The output directory's start (`pipelines.resume.output_dir`) on real plans of real WAV files:
a new run or ``--overwrite`` empties the directory but its run marker, and the fingerprint is
written before any work; ``--resume`` keeps the committed work (``.tmp/parts``,
``.tmp/commits``, the fingerprint) and deletes the job's other outputs, and refuses in one line
a run without a resume record, a run of another plan and a directory holding files the job
does not write (deleting nothing)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipelines.config import RecordConfig, UsageError
from pipelines.resume import fingerprint as fp
from pipelines.resume.output_dir import prepare_output_dir, start_output_dir
from replay import format as fmt
from tests.support import wavgen

WIN_LEN = 1024
RUN_MARKER = ".audiorecords-run"  # the first file a run writes: "this directory is ours"


@pytest.fixture
def pattern(tmp_path) -> str:
    return wavgen.two_class_corpus(tmp_path / "in", files=4, num_frames=10 * WIN_LEN)


def _plan(pattern: str, out: Path, *, num_shards: int = 2, resume: bool = False):
    """The plan `pipelines.job` starts from (planning's own steps, one core)."""
    from pipelines.plan import scan_inputs, size_tasks

    config = RecordConfig(
        input_pattern=pattern,
        output_dir=str(out),
        win_len=WIN_LEN,
        num_shards=num_shards,
        resume=resume,
    )
    return size_tasks(config, scan_inputs(config), cpu_count=1)


def _tree(directory: Path) -> list[str]:
    """Every file and directory under `directory`, relative, sorted (directories end in /)."""
    return sorted(
        str(p.relative_to(directory)) + ("/" if p.is_dir() else "") for p in directory.rglob("*")
    )


def _shard(plan) -> str:
    return fmt.shard_filename(
        name=plan.name, split="all", index=0, num_shards=2, compression="NONE"
    )


def test_a_new_run_marks_the_directory_and_writes_its_fingerprint(pattern, tmp_path):
    out = tmp_path / "out"
    plan = _plan(pattern, out)
    reused = start_output_dir(plan, resuming=False)
    assert _tree(out) == [".audiorecords-run", ".tmp/", ".tmp/resume.json"]
    made = fp.fingerprint(plan.params, plan.input_stamps, derived=fp.plan_digest(plan))
    stored = fp.read_fingerprint(str(out))
    assert stored is not None and fp.first_difference(stored, made) is None
    assert reused.tasks == plan.tasks and not reused.stale


def test_overwrite_deletes_a_previous_dataset_but_the_run_marker(pattern, tmp_path):
    out = tmp_path / "out"
    plan = _plan(pattern, out)
    (out / "transform_fn" / "variables").mkdir(parents=True)
    (out / "transform_fn" / "variables" / "v.index").write_bytes(b"v")
    (out / ".tmp" / "parts").mkdir(parents=True)
    (out / ".tmp" / "parts" / "p-0").write_bytes(b"p")
    for name in (fmt.MANIFEST_FILENAME, fmt.FILES_TABLE, _shard(plan), RUN_MARKER):
        (out / name).write_bytes(b"old")
    prepare_output_dir(plan)
    assert _tree(out) == [".audiorecords-run", ".tmp/"]
    assert (out / RUN_MARKER).read_text().startswith("an audiorecords run writes here")


def test_resume_keeps_the_committed_work_and_deletes_the_jobs_other_outputs(pattern, tmp_path):
    out = tmp_path / "out"
    plan = _plan(pattern, out)
    start_output_dir(plan, resuming=False)
    (out / ".tmp" / "parts").mkdir()
    (out / ".tmp" / "parts" / "p-0").write_bytes(b"part")
    (out / ".tmp" / "commits").mkdir()
    (out / ".tmp" / "analysis").mkdir()
    (out / ".tmp" / "analysis" / "a").write_bytes(b"a")
    (out / ".tmp" / "manifest.json.tmp-0123abcd").write_bytes(b"m")
    (out / fmt.SCHEMA_FILENAME).write_bytes(b"s")
    (out / _shard(plan)).write_bytes(b"shard")
    reused = start_output_dir(_plan(pattern, out, resume=True), resuming=True)
    assert _tree(out) == [
        ".audiorecords-run",
        ".tmp/",
        ".tmp/commits/",
        ".tmp/parts/",
        ".tmp/parts/p-0",
        ".tmp/resume.json",
    ]
    assert (out / ".tmp" / "parts" / "p-0").read_bytes() == b"part"
    assert reused.tasks == plan.tasks and not reused.stale  # no commit record: nothing reused


def test_resume_refuses_a_run_of_another_plan_naming_the_difference(pattern, tmp_path):
    out = tmp_path / "out"
    start_output_dir(_plan(pattern, out), resuming=False)
    (out / ".tmp" / "parts").mkdir()
    (out / ".tmp" / "parts" / "p-0").write_bytes(b"part")
    before = _tree(out)
    with pytest.raises(UsageError) as e:
        start_output_dir(_plan(pattern, out, num_shards=3, resume=True), resuming=True)
    assert str(e.value) == (
        f"--resume: {out} holds an unfinished run of another plan: option --num_shards changed "
        "(2 -> 3); rerun with its options and inputs, or with --overwrite to start again"
    )
    assert _tree(out) == before


def test_resume_refuses_files_the_job_does_not_write_and_deletes_nothing(pattern, tmp_path):
    out = tmp_path / "out"
    plan = _plan(pattern, out)
    start_output_dir(plan, resuming=False)
    for name in ("notes.txt", "a", "b", "c", _shard(plan)):
        (out / name).write_bytes(b"x")
    before = _tree(out)
    with pytest.raises(UsageError) as e:
        start_output_dir(_plan(pattern, out, resume=True), resuming=True)
    assert str(e.value) == (
        f"--resume: {out} holds files a record run does not write (a, b, c, ...); move them "
        "away, or use --overwrite"
    )
    assert _tree(out) == before


def test_resume_refuses_a_run_without_a_resume_record(pattern, tmp_path):
    out = tmp_path / "out"
    plan = _plan(pattern, out)
    prepare_output_dir(plan)  # a run killed before its fingerprint was written
    with pytest.raises(UsageError) as e:
        start_output_dir(_plan(pattern, out, resume=True), resuming=True)
    assert str(e.value) == (
        f"--resume: {out} holds an unfinished run without a resume record; "
        "use --overwrite to start again"
    )
    assert os.listdir(out / ".tmp") == []
