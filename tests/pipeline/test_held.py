"""``--append`` planned in the job (`pipelines.plan.held`, issue 54): the listing joined with the
dataset's tables in the plan step gives the launcher-planned append, byte for byte.

- The plan step (`PlanInJob` with the dataset's `HeldTables`, header batches of 3 files) cuts the
  read tasks, refuses the files and sizes the shards as the launcher plans the new files: new
  files between held ones in listing order, a changed input skipped, a label outside the class
  list, a broken WAV.
- Its refusals (a changed input, nothing new) are the launcher's lines, and the launcher of an
  append planned in the job never reads the dataset's tables (`read_dataset` fails here); with
  ``--resume``, nothing new gives the finished dataset's result.
- Real appends planned in the job and in the launcher onto copies of one dataset write the same
  files (frozen; refreshed: all but the SavedModels' bytes); an append recorded and not
  committed continues in its directory with ``--resume``, and ``--resume`` after the commit
  returns the finished result.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pipelines import append_plan
from pipelines.config import RecordConfig, UsageError
from pipelines.job import run_job
from tests.support.record_helpers import dataset_digests
from tests.support.record_helpers import record as run_record

RATE = 8000
FOLDERS = ("yes", "no", "up", "odd")  # odd: outside --classes
OPTIONS = ("--label_source", "dirname", "--classes", "yes,no,up", "--win_len", "1000")


def _clips(root: Path, names: range, *, seed: int) -> None:
    """Clips of 0.3-2.5 s named ``c<n>.wav`` in the four folders (n // 2 % 4 picks it)."""
    rng = np.random.default_rng(seed)
    for i in names:
        folder = root / FOLDERS[i // 2 % 4]
        folder.mkdir(parents=True, exist_ok=True)
        frames = int(RATE * rng.choice([0.3, 1.0, 2.5]))
        x = rng.integers(-20000, 20000, size=frames, dtype=np.int16)
        sf.write(folder / f"c{i:03d}.wav", x, RATE, "PCM_16")


def _grown(root: Path, *options: str) -> tuple[Path, Path]:
    """A dataset of 16 clips (even numbers), then new clips between them in listing order
    (odd numbers) and a broken WAV: (corpus, dataset)."""
    corpus, out = root / "corpus", root / "ds"
    _clips(corpus, range(0, 32, 2), seed=1)
    run_record(f"{corpus}/*/*.wav", out, *OPTIONS, *options)
    _clips(corpus, range(1, 24, 2), seed=2)
    (corpus / "yes" / "c100.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")
    return corpus, out


def _config(corpus: Path, out: Path, **options) -> RecordConfig:
    return RecordConfig(
        input_pattern=f"{corpus}/*/*.wav", output_dir=str(out), append=True, **options
    )


def _no_held_set(monkeypatch) -> None:
    def refused(path):
        raise AssertionError(f"the launcher read every input {path} holds")

    monkeypatch.setattr(append_plan, "read_dataset", refused)


def _touch(path: Path) -> None:
    stat = path.stat()
    os.utime(path, (stat.st_atime, stat.st_mtime + 60))  # the same bytes, another time


def test_the_plan_step_of_an_append_gives_the_launchers_tasks(tmp_path):
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from pipelines.plan import list_inputs, plan_headers
    from pipelines.plan.in_job import PlanArgs, PlanInJob
    from pipelines.plan.reads import scan_headers
    from transforms.stages import staged

    corpus, out = _grown(tmp_path, "--features", "none", "--splits", "train=0.6,test=0.4")
    _touch(corpus / "no" / "c010.wav")  # held, changed: skipped
    config = _config(corpus, out, append_changed="skip")
    launcher = append_plan.plan_append(config)
    listed = list_inputs(launcher.config, continuation=launcher.continuation)
    headed = tuple(scan_headers(list(listed.inputs)))
    plan = plan_headers(launcher.config, listed, headed, cpu_count=2, single_task=False)
    assert [f.index for f in plan.inputs] == list(range(16, 29))  # after the dataset's 16
    assert len(plan.tasks) >= 2 and len([f for f in plan.inputs if f.error]) == 4

    job = append_plan.plan_append(config, in_job=True)
    assert (job.in_job, job.data_dir, job.config) == (True, launcher.data_dir, launcher.config)
    whole = list_inputs(job.config, continuation=job.continuation)  # every input, held ones too
    assert len(whole.inputs) == 29
    args = PlanArgs(
        config=job.config, listed=whole, cpu_count=2, single_task=False, compute_threads=1
    )
    inputs = staged.stage(str(tmp_path / "stage"), "inputs", whole.inputs)
    try:
        with TestPipeline() as p:
            planned = p | PlanInJob(inputs, args, batch_size=3, held=job.continuation.held)
            assert_that(planned["tasks"], equal_to(list(plan.tasks)), label="tasks")
            refused = [{"path": f.path, "reason": f.error} for f in plan.inputs if f.error]
            assert_that(planned["errors"], equal_to(refused), label="errors")
            sized = planned["planned"] | beam.MapTuple(lambda read, sharding: (read, sharding))
            assert_that(sized, equal_to([(plan.read, plan.sharding)]), label="planned")
    finally:
        staged.release(inputs)


@pytest.mark.slow  # a record run, then appends refused in the launcher and in Beam jobs
def test_an_append_planned_in_the_job_refuses_as_the_launcher_does(tmp_path, monkeypatch):
    corpus, out = _grown(tmp_path, "--features", "none")
    before = sorted(p for p in out.rglob("*"))
    changed = corpus / "up" / "c004.wav"
    _touch(changed)
    lines = {}
    for where in ("launcher", "job"):
        if where == "job":
            _no_held_set(monkeypatch)
        with pytest.raises(UsageError) as refused:
            run_job(_config(corpus, out), plan_in_job=where == "job")
        lines[where] = str(refused.value)
    assert lines["job"] == lines["launcher"]
    assert lines["job"].startswith("--append: 1 input(s) the dataset holds changed"), lines
    assert f"first {changed};" in lines["job"]
    assert sorted(p for p in out.rglob("*")) == before  # nothing left behind

    monkeypatch.undo()
    for path in sorted(corpus.rglob("c0[0-9][13579].wav")) + [corpus / "yes" / "c100.wav"]:
        path.unlink()  # only held inputs left
    with pytest.raises(UsageError) as launcher:
        run_job(_config(corpus, out, append_changed="skip"), plan_in_job=False)
    _no_held_set(monkeypatch)
    with pytest.raises(UsageError) as job:
        run_job(_config(corpus, out, append_changed="skip"), plan_in_job=True)
    assert str(job.value) == str(launcher.value)
    assert str(job.value).endswith("already (version 1): nothing to append"), str(job.value)
    assert sorted(p for p in out.rglob("*")) == before
    # with --resume: the finished dataset, as planned in the launcher
    resumed = run_job(_config(corpus, out, append_changed="skip", resume=True), plan_in_job=True)
    assert (resumed.dataset_version, resumed.num_files) == (1, 12)
    assert sorted(p for p in out.rglob("*")) == before


def _different(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(name for name in set(a) | set(b) if a.get(name) != b.get(name))


@pytest.mark.slow  # 5 record runs
def test_appends_planned_in_the_job_and_in_the_launcher_are_byte_identical(tmp_path, monkeypatch):
    corpus, base = _grown(
        tmp_path, "--features", "log_mel", "--num_mel_bins", "8", "--splits", "train=0.7,test=0.3"
    )
    grown = {}
    for where in ("launcher", "job"):
        out = tmp_path / where
        shutil.copytree(base, out)
        if where == "job":
            _no_held_set(monkeypatch)
        result = run_job(_config(corpus, out), plan_in_job=where == "job")
        assert (result.num_files, result.num_failed, result.dataset_version) == (9, 4, 2)
        grown[where] = dataset_digests(out)
    assert _different(grown["launcher"], grown["job"]) == []
    assert any(name.startswith("appends/v2-") for name in grown["job"])

    monkeypatch.undo()
    _clips(corpus, range(33, 40, 2), seed=3)  # a refresh of both: the union's statistics
    for where in ("launcher", "job"):  # onto one version 2 (the token digests its commit times)
        out = tmp_path / f"refreshed by the {where}"
        shutil.copytree(tmp_path / "launcher", out)
        if where == "job":
            _no_held_set(monkeypatch)
        config = _config(corpus, out, append_transform="refresh")
        assert run_job(config, plan_in_job=where == "job").dataset_version == 3
        grown[where] = dataset_digests(out, skip="transform_fn/")  # graphs: per process
    assert _different(grown["launcher"], grown["job"]) == []
    commit = json.loads((out / "manifest.json").read_text())["commits"][2]
    assert commit["transform"] == "refresh"
    assert (out / commit["dir"] / "transform_fn" / "saved_model.pb").is_file()


@pytest.mark.slow  # 4 record runs
def test_an_append_planned_in_the_job_resumes_in_its_directory_and_once_committed(
    tmp_path, monkeypatch
):
    corpus, base = _grown(tmp_path, "--features", "none")
    reference, out = tmp_path / "reference", tmp_path / "out"
    shutil.copytree(base, reference)
    shutil.copytree(base, out)
    run_job(_config(corpus, reference), plan_in_job=False)  # uninterrupted, in the launcher
    _no_held_set(monkeypatch)
    killed = append_plan.plan_append(_config(corpus, out), in_job=True)
    run_job(killed.config, continuation=killed.continuation)  # recorded, killed uncommitted
    recorded = dataset_digests(out / killed.data_dir)

    resumed = run_job(_config(corpus, out, resume=True), plan_in_job=True)
    assert resumed.dataset_version == 2 and resumed.num_files == 9
    assert dataset_digests(out) == dataset_digests(reference)
    kept = dataset_digests(out / killed.data_dir)
    assert kept == {k: v for k, v in recorded.items() if k in kept}  # the same records, kept

    again = run_job(_config(corpus, out, resume=True), plan_in_job=True)
    assert again.dataset_version == 2 and again.num_files == 21  # the finished dataset's
    assert dataset_digests(out) == dataset_digests(reference)
