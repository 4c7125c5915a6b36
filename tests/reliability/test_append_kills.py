"""``--append`` killed in every phase (`pipelines.append`): the version it started from stays
intact and readable, and the append finishes with ``--resume`` or starts again without it.

The CLI runs as a process of its own (forked, in a process group of its own, from one that
imported Beam and TensorFlow once: `tests.support.forked`) and gets SIGKILL at a function entry
of each phase (`tests.support.pause_points`: while its record job reads and finalises, once its
records are complete, after its commit point, after the switch of ``manifest.json``). Each
time a reader sees exactly the version before the commit point, or exactly the new one after
it; the same command with ``--resume`` then ends with the dataset an uninterrupted append makes
(byte for byte but the commit times), and so does the command without it. An append planned in
the job (`pipelines.plan.held`) killed while its record job reads or finalises resumes in the
job, in its directory, to the same dataset (its CLI a fresh subprocess: the switch to planning
in the job is an environment variable, and a fork server's environment is fixed).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from pipelines import verify
from replay import load_info, replay_dataset
from tests.support import wavgen
from tests.support.forked import Forker
from tests.support.pause_points import APPEND_PHASES, PHASES, PLAN_IN_JOB_ENV
from tests.support.record_helpers import record as run_record
from tests.support.record_helpers import without_times
from tests.support.reliability import cli, kill, wait_until_paused

pytestmark = pytest.mark.slow

WIN = 2000
OPTIONS = ("--win_len", str(WIN), "--features", "log_mel", "--num_mel_bins", "16")
# phase -> is the new version committed when the run is killed there
KILL_PHASES = {
    "reading": False,
    "finalising": False,
    **{phase: phase != "append recorded" for phase in APPEND_PHASES},
}
assert set(PHASES) >= {"reading", "finalising"}


def _write(folder: Path, seed: int) -> None:
    folder.mkdir(parents=True)
    for i, label in enumerate(("bird", "rain", "bird")):
        samples = wavgen.synth((2 + i) * WIN + 11, seed=seed + i)
        wavgen.write_wav(folder / f"s{seed}f{i}_{label}.wav", samples, sample_rate=8000,
                         subtype="PCM_16")  # fmt: skip


def _files(out: Path) -> dict[str, str]:
    """{path: SHA-256} of every file but the manifests (their commit times differ)."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.suffix != ".json"
    }


def _manifest(path: Path) -> dict:
    return without_times(json.loads(path.read_text()))


def _elements(out: Path, version: int | None = None) -> list[tuple]:
    ds = replay_dataset(out, version=version, features=["filepath", "win_start_idx", "signal"])
    return [
        (e["filepath"], int(e["win_start_idx"]), e["signal"].tobytes())
        for e in ds.as_numpy_iterator()
    ]


def _paused_run(forker: Forker, phase: str, marker: Path, args: list[str], log: Path):
    """``python -m tests.support.pause_points phase marker args``, started; output to `log`."""
    argv = ["-m", "tests.support.pause_points", phase, str(marker), *args]
    return forker.start(argv, stdout=log)


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """A recorded version 1, the new files, and the dataset an uninterrupted append makes."""
    root = tmp_path_factory.mktemp("append_kills")
    _write(root / "corpus" / "day1", seed=1)
    base = root / "base"
    run_record(f"{root}/corpus/*/*.wav", base, *OPTIONS)
    _write(root / "corpus" / "day2", seed=2)
    reference = root / "reference"
    shutil.copytree(base, reference)
    run_record(f"{root}/corpus/*/*.wav", reference, "--append")
    return root, base, reference


@pytest.mark.parametrize("phase", sorted(KILL_PHASES))
def test_an_append_killed_in_a_phase_leaves_a_readable_version_and_resumes(
    bases, forker, phase, capsys
):
    root, base, reference = bases
    out = root / f"killed {phase}"
    shutil.copytree(base, out)
    v1 = _elements(base)
    args = ["--input_pattern", f"{root}/corpus/*/*.wav", "--output_dir", str(out), "--append"]
    marker, log = out.parent / f"{phase}.paused", out.parent / f"{phase}.log"
    proc = _paused_run(forker, phase, marker, args, log)
    try:
        wait_until_paused(proc, marker)
    finally:
        kill(proc)

    info = load_info(out)
    committed = KILL_PHASES[phase]
    assert info.version == (2 if committed else 1)
    assert _elements(out, version=1) == v1  # version 1 is intact and reads as it did
    if committed:  # after the commit point: the new version, whole
        assert sorted(_elements(out)) == sorted(_elements(reference))
    capsys.readouterr()
    assert verify.run([str(out)]) == 0

    from pipelines import record

    resumed = record.run([*args, "--resume"])
    assert resumed.dataset_version == 2
    assert _files(out) == _files(reference)
    assert _manifest(out / "manifest.json") == _manifest(reference / "manifest.json")
    for v in (1, 2):
        assert _manifest(out / "manifests" / f"{v}.json") == _manifest(
            reference / "manifests" / f"{v}.json"
        )


def test_an_append_killed_while_recording_starts_again_without_resume(bases, forker):
    root, base, reference = bases
    out = root / "killed then again"
    shutil.copytree(base, out)
    args = ["--input_pattern", f"{root}/corpus/*/*.wav", "--output_dir", str(out), "--append"]
    marker, log = out.parent / "again.paused", out.parent / "again.log"
    proc = _paused_run(forker, "finalising", marker, args, log)
    try:
        wait_until_paused(proc, marker)
    finally:
        kill(proc)
    from pipelines import record

    assert record.run(args).dataset_version == 2  # the killed try's directory is started again
    assert _files(out) == _files(reference)
    assert _manifest(out / "manifest.json") == _manifest(reference / "manifest.json")


@pytest.mark.parametrize("phase", ["reading", "finalising"])
def test_an_append_planned_in_the_job_killed_while_recording_resumes_in_the_job(bases, phase):
    from pipelines.config import RecordConfig
    from pipelines.job import run_job
    from pipelines.resume import fingerprint as fp

    root, base, reference = bases
    out = root / f"planned in the job, killed {phase}"
    shutil.copytree(base, out)
    pattern = f"{root}/corpus/*/*.wav"
    args = ["--input_pattern", pattern, "--output_dir", str(out), "--append"]
    marker, log = out.parent / f"job {phase}.paused", out.parent / f"job {phase}.log"
    proc = cli(phase, str(marker), *args, log=log, module="tests.support.pause_points",
               env={PLAN_IN_JOB_ENV: "1"})  # fmt: skip
    try:
        wait_until_paused(proc, marker)
    finally:
        kill(proc)
    assert load_info(out).version == 1
    (started,) = (out / "appends").iterdir()  # the killed record job's, planned in the job
    assert fp.planned_in_job(fp.read_fingerprint(str(started)))

    config = RecordConfig(input_pattern=pattern, output_dir=str(out), append=True, resume=True)
    resumed = run_job(config, plan_in_job=True)
    assert resumed.dataset_version == 2
    assert (phase == "finalising") <= (resumed.reused_windows > 0), resumed
    assert _files(out) == _files(reference)
    assert _manifest(out / "manifest.json") == _manifest(reference / "manifest.json")
    assert raw_dirs(out) == raw_dirs(reference) == [f"appends/{started.name}"]


def raw_dirs(out: Path) -> list[str]:
    """The directories of the dataset's commits after the first."""
    return [c["dir"] for c in json.loads((out / "manifest.json").read_text())["commits"][1:]]
