"""``--resume`` (issue 30): a record run killed part-way finishes from where it stopped, and the
dataset is byte-identical to an uninterrupted run's.

A run of several read tasks (two in-memory workers: the single-worker in-memory runner reads in
one task, which commits only at its end) is frozen by `tests.support.pause_points` once its
first task committed, and SIGKILLed. A resumed run must then reuse that task (its summary says
so), read the rest, and give the uninterrupted run's shards, schemas, manifest (apart from
``created_utc``), source tables and ``transform_fn/``. Between the kill and the resume, a changed
option or an added, removed or touched input is refused in one line naming it, and leaves the
directory as it was. A finished dataset with ``--resume`` is left untouched. With rounded
stored features (``--feature_dtype float16``) nothing is reused, and the dataset is the same.
A run planned in the job (`pipelines.plan.in_job`), killed after a checkpoint or a committed task,
resumes to the same dataset too.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import apache_beam as beam
import pytest

from pipelines import record
from pipelines.config import UsageError
from tests.support import reliability
from tests.support.forked import Forker
from tests.support.pause_points import ANALYSIS_BATCH_BYTES_ENV, CHECKPOINT_BYTES_ENV
from tests.support.reliability import assert_same_dataset, kill, wait_until_paused
from transforms.spec.layout import RecordLayout
from transforms.stages import read_windows
from transforms.stages.finalize import read_z_score_statistics

pytestmark = pytest.mark.slow

WIN_LEN = reliability.RESUME_WIN_LEN
FILES = reliability.RESUME_FILES
WINDOWS = reliability.RESUME_WINDOWS  # per file: 240 windows, read tasks of 64: 4 tasks
IN_MEMORY = ("--direct_running_mode", "in_memory", "--direct_num_workers", "2")


def _corpus(directory: Path, *, files: int = FILES, windows: int = WINDOWS) -> str:
    return reliability.resume_corpus(directory, files=files, windows=windows)


def _args(pattern: str, out: Path, *extra: str) -> list[str]:
    """Two in-memory workers (four read tasks), then `extra`."""
    return reliability.resume_args(pattern, out, *IN_MEMORY, *extra)


def _tree(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _layout(dataset: Path) -> RecordLayout:
    from replay import load_info

    features = load_info(dataset).elements["log_mel"].shape
    return RecordLayout(feature_shapes={"log_mel": tuple(features)})


def _assert_resumed_to(out: Path, want: Path) -> None:
    """The resumed dataset `out` is the uninterrupted `want`: the same dataset, z-score
    statistics and TFT variables."""
    assert_same_dataset(out, want)
    layout = _layout(want)
    assert read_z_score_statistics(str(out), layout) == read_z_score_statistics(str(want), layout)
    variables = Path("transform_fn") / "variables"
    assert _tree(out / variables) == _tree(want / variables)


def _refused(args: list[str], out: Path, match: str) -> None:
    before = _tree(out)
    with pytest.raises(UsageError, match=match):
        record.run(args)
    assert _tree(out) == before


def _killed_after_the_first_commit(
    forker: Forker,
    pattern: str,
    out: Path,
    tmp_path: Path,
    env=None,
    extra: tuple[str, ...] = (),
    *,
    in_job: bool = False,
) -> None:
    """A run (planned in the job with `in_job`: `PLANNED_IN_JOB`) killed once its first read
    task committed; started by `forker`, in a process group of its own."""
    marker = tmp_path / "paused"
    argv = ["task committed", str(marker), *_args(pattern, out, *extra)]
    command = ["-c", PLANNED_IN_JOB] if in_job else ["-m", "tests.support.pause_points"]
    proc = forker.start([*command, *argv], stdout=tmp_path / "run.log", env=env)
    try:
        wait_until_paused(proc, marker)
    finally:
        kill(proc)
    assert not (out / "manifest.json").exists()
    assert len(list((out / ".tmp" / "commits").glob("*.json"))) == 1


def test_killed_after_a_committed_task_resumes_byte_identical(forker, tmp_path):
    pattern = _corpus(tmp_path / "corpus")  # its own: touched, moved and added to below
    want, out = tmp_path / "uninterrupted", tmp_path / "out"
    record.run(_args(pattern, want))
    _killed_after_the_first_commit(forker, pattern, out, tmp_path)

    # refused, naming the difference, the directory left as it was
    _refused(_args(pattern, out, "--resume", "--hop_len", "512"), out, r"--hop_len changed")
    # the default runner reads in one task: the same options and inputs, another tasks' cut
    _refused(_default_args(pattern, out, "--resume"), out, r"the plan changed")
    first = sorted(Path(pattern).parent.glob("*.wav"))[0]
    stat = first.stat()
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    _refused(_args(pattern, out, "--resume"), out, rf"input changed: .*{first.name}")
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    moved = tmp_path / first.name
    shutil.move(first, moved)
    _refused(_args(pattern, out, "--resume"), out, rf"input removed: .*{first.name}")
    shutil.move(moved, first)
    extra = Path(pattern).parent / "g_b.wav"
    shutil.copy(first, extra)
    _refused(_args(pattern, out, "--resume"), out, r"input added: .*g_b\.wav")
    extra.unlink()
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # --resume never acts as --overwrite: a file the job does not write, or no resume record
    (out / "notes.txt").write_text("mine")
    _refused(_args(pattern, out, "--resume"), out, r"files a record run does not write \(notes")
    (out / "notes.txt").unlink()
    bare = tmp_path / "bare"
    shutil.copytree(out, bare)
    (bare / ".tmp" / "resume.json").unlink()
    _refused(_args(pattern, bare, "--resume"), bare, r"unfinished run without a resume record")

    result = record.run(_args(pattern, out, "--resume"))
    assert (result.reused_tasks, result.total_tasks) == (1, 4), result
    assert 0 < result.reused_windows < FILES * WINDOWS
    assert "(1 of 4 read tasks whole)" in record.summary_line(result)
    assert_same_dataset(out, want)
    # transform_fn/: the same vocabulary and variables; its graph names TFT's temporary
    # directory (under --output_dir), so it is compared by its statistics (also in the manifest)
    graph = ("saved_model.pb", "fingerprint.pb")
    for directory in ("transform_fn", "transformed_metadata", "metadata"):
        got, expected = _tree(out / directory), _tree(want / directory)
        assert {k: v for k, v in got.items() if k not in graph} == {
            k: v for k, v in expected.items() if k not in graph
        }, directory
    layout = _layout(want)
    assert read_z_score_statistics(str(out), layout) == read_z_score_statistics(str(want), layout)
    assert not (out / ".tmp").exists()

    finished = _tree(out)  # a finished dataset with --resume: left untouched, and said so
    again = record.run(_args(pattern, out, "--resume"))
    assert again.already_complete and "left untouched" in record.summary_line(again)
    assert (again.num_examples, again.num_failed, again.num_bad_rows) == (FILES * WINDOWS, 0, 0)
    assert _tree(out) == finished
    # ... but only with its own options, in this format, and ours
    _refused(_args(pattern, out, "--resume", "--hop_len", "512"), out, r"--hop_len changed")
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "format_version": 2}))
    _refused(_args(pattern, out, "--resume"), out, r"finished dataset of format version 2")
    (out / "manifest.json").write_text(json.dumps({"name": "a web app"}))
    _refused(_args(pattern, out, "--resume"), out, r"continues only a run of ours")


@pytest.mark.parametrize("planned", ["in the launcher", "in the job"])
def test_rounded_features_reuse_nothing_and_resume_byte_identical(
    resume_runs, forker, tmp_path, planned
):
    """``--feature_dtype float16`` stores rounded features, from which the AUTO compression
    samples of a reused task could not be rebuilt: a resumed run reuses nothing (every task is
    read again, its committed record deleted) and gives the uninterrupted run's dataset, planned
    in the launcher or in the job (resumed there)."""
    rounded = ("--feature_dtype", "float16")
    pattern, out = resume_runs.pattern, tmp_path / "out"
    want = resume_runs.reference(*IN_MEMORY, *rounded)
    in_job = planned == "in the job"
    _killed_after_the_first_commit(forker, pattern, out, tmp_path, extra=rounded, in_job=in_job)
    result = record.run(_args(pattern, out, "--resume", *rounded))
    assert (result.counters.get("headers_read") == FILES) == in_job, result.counters
    assert (result.reused_tasks, result.reused_windows, result.total_tasks) == (0, 0, 4), result
    assert result.num_examples == FILES * WINDOWS
    assert_same_dataset(out, want)
    assert json.loads((out / "manifest.json").read_text())["params"]["feature_dtype"] == "float16"
    layout = RecordLayout(feature_shapes=_layout(want).feature_shapes, feature_dtype="float16")
    assert read_z_score_statistics(str(out), layout) == read_z_score_statistics(str(want), layout)
    assert not (out / ".tmp").exists()


def _log_batch_rows(batch, path: str):
    with open(path, "a") as fh:
        fh.write(f"{batch.num_rows}\n")
    return batch


def _batch_rows(path: Path) -> list[int]:
    return sorted(int(n) for n in path.read_text().split())


def test_a_reused_tasks_rows_do_not_reach_tft_and_the_statistics_are_the_same(
    forker, tmp_path, monkeypatch
):
    """TFT's analysis is handed only the rows the resumed run reads (the reused task's moments
    come from its commit record); with many small analysis batches (15 rows, files of 10
    windows, tasks of 64), cut otherwise than the uninterrupted run's, the statistics and
    transform_fn/ variables are still the uninterrupted run's, bit for bit."""
    from transforms.stages import composites

    small = 15 * (16 + 4 * 4 * 64)  # 15 rows of log_mel [4, 64] (read_windows.ReadTaskFn)
    monkeypatch.setattr(read_windows, "ANALYSIS_BATCH_BYTES", small)
    log = {"path": ""}
    expand = composites.Analyze.expand

    def logged(self, rows):
        path = log["path"]
        return expand(self, rows | "LogRows" >> beam.Map(_log_batch_rows, path=path))

    monkeypatch.setattr(composites.Analyze, "expand", logged)
    pattern = _corpus(tmp_path / "corpus", files=24, windows=10)
    want, out = tmp_path / "uninterrupted", tmp_path / "out"
    log["path"] = str(tmp_path / "want.rows")
    record.run(_args(pattern, want))
    _killed_after_the_first_commit(
        forker, pattern, out, tmp_path, env={ANALYSIS_BATCH_BYTES_ENV: str(small)}
    )
    log["path"] = str(tmp_path / "resumed.rows")
    result = record.run(_args(pattern, out, "--resume"))
    assert (result.reused_tasks, result.total_tasks) == (1, 4), result
    wanted, resumed = _batch_rows(tmp_path / "want.rows"), _batch_rows(tmp_path / "resumed.rows")
    assert max(wanted) < 60  # several batches per task
    assert result.reused_windows > 0 and sum(wanted) == 240
    assert sum(resumed) == sum(wanted) - result.reused_windows
    _assert_resumed_to(out, want)


# The default runner (one in-memory worker) reads in a single task; it checkpoints after each
# CHECKPOINT records' bytes: ~40 windows of ~3.3 KB make a segment, so nearly every segment.
CHECKPOINT = 100_000


def _default_args(pattern: str, out: Path, *extra: str) -> list[str]:
    args = ["--input_pattern", pattern, "--output_dir", str(out), "--win_len", str(WIN_LEN)]
    return [*args, "--num_shards", "3", *extra]


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory):
    """A corpus and its uninterrupted dataset on the default runner, small checkpoints."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(read_windows, "CHECKPOINT_BYTES", CHECKPOINT)
        root = tmp_path_factory.mktemp("checkpointed")
        pattern = _corpus(root / "corpus")
        want = root / "uninterrupted"
        result = record.run(_default_args(pattern, want))
        assert result.total_tasks == 1
        yield pattern, want


@pytest.mark.parametrize("phase", ["checkpointed", "writing shards", "finalising"])
def test_the_default_runner_resumes_from_its_checkpoints(
    checkpointed, phase, forker, tmp_path, monkeypatch
):
    """Killed in each phase on the default runner (one read task): reading half done (the
    task's third checkpoint about to be recorded), shards half written, finalize started. The
    resumed run reuses what was committed (the checkpointed pieces; the whole task once it
    committed), reads the rest, and writes the uninterrupted run's dataset."""
    pattern, want = checkpointed
    monkeypatch.setattr(read_windows, "CHECKPOINT_BYTES", CHECKPOINT)
    out, marker = tmp_path / "out", tmp_path / "paused"
    argv = ["-m", "tests.support.pause_points", phase, str(marker), *_default_args(pattern, out)]
    env = {CHECKPOINT_BYTES_ENV: str(CHECKPOINT)}
    proc = forker.start(argv, stdout=tmp_path / "run.log", env=env)
    try:
        wait_until_paused(proc, marker)
    finally:
        kill(proc)
    assert not (out / "manifest.json").exists()
    records = sorted(p.name for p in (out / ".tmp" / "commits").glob("*.json"))
    if phase == "checkpointed":  # two pieces of task 0, the second from where the first stopped
        assert len(records) == 2 and all(r.startswith("000000-") for r in records), records
        starts = [int(r.split("-")[1]) for r in records]
        stops = [int(r.split("-")[2].split(".")[0]) for r in records]
        assert starts == [0, *stops[:-1]], records
    result = record.run(_default_args(pattern, out, "--resume"))
    assert result.total_tasks == 1
    if phase == "checkpointed":
        assert result.reused_tasks == 0 and 0 < result.reused_windows < FILES * WINDOWS, result
    else:  # the task committed: nothing is read again
        assert (result.reused_tasks, result.reused_windows) == (1, FILES * WINDOWS), result
    assert f"resumed: {result.reused_windows} windows reused" in record.summary_line(result)
    _assert_resumed_to(out, want)
    assert not (out / ".tmp").exists()


# a run planned in the job (`run_job(plan_in_job=True)`), paused like `tests.support.pause_points`
PLANNED_IN_JOB = """
import os, sys
from apache_beam.options.pipeline_options import PipelineOptions
from tests.support import pause_points
from transforms.stages import read_windows
from runners.internals import exit_now, load_one_keras
phase, marker, *argv = sys.argv[1:]
if os.environ.get(pause_points.CHECKPOINT_BYTES_ENV):
    read_windows.CHECKPOINT_BYTES = int(os.environ[pause_points.CHECKPOINT_BYTES_ENV])
load_one_keras()
pause_points.install(phase, marker)
from pipelines import job
from pipelines.config import RecordConfig
from pipelines.record import RecordOptions
config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(RecordOptions))
job.run_job(config, beam_argv=argv, plan_in_job=True)
exit_now(0)
"""


@pytest.mark.parametrize("runner", ["one task", "two workers"])
def test_a_run_planned_in_the_job_resumes_byte_identical(
    checkpointed, resume_runs, runner, forker, tmp_path
):
    """A run planned in the job, killed once its read task checkpointed twice (the default
    runner: one task, whose segments the plan step grouped) or once its first task committed
    (two workers, four tasks), resumes in the job (the launcher compares the fingerprint made
    from the listing; the job reads the headers and each task its own commit records) to the
    uninterrupted run's dataset, reusing what was committed."""
    if runner == "one task":
        pattern, want = checkpointed
        args, phase, env = _default_args, "checkpointed", {CHECKPOINT_BYTES_ENV: str(CHECKPOINT)}
    else:
        pattern, want = resume_runs.pattern, resume_runs.reference(*IN_MEMORY)
        args, phase, env = _args, "task committed", {}
    out, marker = tmp_path / "out", tmp_path / "paused"
    argv = ["-c", PLANNED_IN_JOB, phase, str(marker), *args(pattern, out)]
    proc = forker.start(argv, stdout=tmp_path / "run.log", env=env)
    try:
        wait_until_paused(proc, marker)
    finally:
        kill(proc)
    assert not (out / "manifest.json").exists()
    assert json.loads((out / ".tmp" / "resume.json").read_text())["planned_in"] == "job"
    records = sorted(p.name for p in (out / ".tmp" / "commits").glob("*.json"))
    assert len(records) == (2 if runner == "one task" else 1), records
    result = record.run(args(pattern, out, "--resume"))
    assert 0 < result.reused_windows < FILES * WINDOWS, result
    assert result.counters.get("headers_read") == FILES, result.counters  # read in the job
    if runner == "two workers":
        assert (result.reused_tasks, result.total_tasks) == (1, 4), result
    _assert_resumed_to(out, want)
    assert not (out / ".tmp").exists()
