"""A plain record run is planned in the job (`pipelines.job_plan`, issue 42): the same bytes as
the launcher's plan, and the launcher's one-line refusals.

- Both paths (`pipelines.job.run_job` with ``plan_in_job`` True / False) write the same files:
  every shard, the schemas, the source tables, the offsets, ``transform_fn/`` and
  ``feature_fn/`` (SavedModels: each path in its own process to the same directory, as their
  graphs name the run's temporary directory and number their functions per process; only
  ``fingerprint.pb`` differs run to run) and the manifest apart from its times. Clips of one
  second with a few bad and non-WAV files, ``--splits`` and ``--classes`` refusing a folder.
- A check that needs the headers (``--strict`` and a bad file, ``--signal_dtype`` that cannot
  hold a file) fails the job's plan step: the command prints the launcher's line, exits 2, and
  leaves no output directory behind.
- The fingerprint of a run planned in the job holds no header-derived part and is marked.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pipelines import fingerprint as fp
from pipelines import record
from tests.support.record_helpers import without_times

ROOT = Path(__file__).resolve().parents[2]
RATE = 16000
RUN = """
import sys
from apache_beam.options.pipeline_options import PipelineOptions
from pipelines import job
from pipelines.config import RecordConfig
from pipelines.record import RecordOptions
argv = sys.argv[2:]
config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(RecordOptions))
result = job.run_job(config, beam_argv=argv, plan_in_job=sys.argv[1] == "job")
print(result.num_examples, result.num_files, result.num_failed)
"""


def _clips(root: Path, n: int) -> Path:
    """`n` one-second 16-bit clips in 4 folders (``odd`` outside ``--classes``), 3 broken WAVs
    and a file that is not a WAV."""
    rng = np.random.default_rng(42)
    for i in range(n):
        folder = root / ("yes", "no", "up", "odd")[i % 4]
        folder.mkdir(parents=True, exist_ok=True)
        x = rng.integers(-20000, 20000, size=RATE, dtype=np.int16)
        sf.write(folder / f"c{i:05d}.wav", x, RATE, "PCM_16")
    for i in range(3):
        (root / "yes" / f"bad{i}.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk" * (i + 1))
    (root / "no" / "notes.wav").write_bytes(b"hello, not audio")
    return root


def _args(clips: Path, out: Path) -> list[str]:
    return [
        "--input_pattern",
        f"{clips}/*/*.wav",
        "--output_dir",
        str(out),
        "--label_source",
        "dirname",
        "--win_len",
        "8000",
        "--features",
        "log_mel",
        "--splits",
        "train=0.8,test=0.2",
        "--classes",
        "yes,no,up",
    ]


def _digests(out: Path) -> dict[str, str]:
    """SHA-256 of every file under `out` (the manifest without its times), but the SavedModels'
    ``fingerprint.pb`` (it varies run to run)."""
    found = {}
    for path in sorted(out.rglob("*")):
        if not path.is_file() or path.name == "fingerprint.pb":
            continue
        data = path.read_bytes()
        if path.name == "manifest.json":
            data = json.dumps(without_times(json.loads(data)), sort_keys=True).encode()
        found[str(path.relative_to(out))] = hashlib.sha256(data).hexdigest()
    return found


def _run(mode: str, argv: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", RUN, mode, *argv],
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # two jobs of 2,000 clips in subprocesses
def test_planned_in_the_job_or_the_launcher_the_outputs_are_byte_identical(tmp_path):
    clips = _clips(tmp_path / "clips", 2000)
    out = tmp_path / "ds"
    digests, counts = {}, {}
    for mode in ("launcher", "job"):
        counts[mode] = _run(mode, _args(clips, out))
        digests[mode] = _digests(out)
        out.rename(tmp_path / f"ds-{mode}")
    assert counts["job"] == counts["launcher"] == "3000 1500 504"  # 500 odd + 4 bad refused
    assert {"manifest.json", "transform_fn/saved_model.pb"} <= set(digests["job"])
    assert any(name.endswith(".tfrecord") or "-of-" in name for name in digests["job"])
    different = sorted(
        name
        for name in set(digests["job"]) | set(digests["launcher"])
        if digests["job"].get(name) != digests["launcher"].get(name)
    )
    assert different == []


def test_a_fail_fast_check_in_the_plan_step_is_the_launchers_one_line(tmp_path, capsys):
    clips = _clips(tmp_path / "clips", 8)
    sf.write(clips / "up" / "deep.wav", np.zeros(RATE, np.int32), RATE, "PCM_24")
    out = tmp_path / "ds"
    cases = {
        "--strict": "error: --strict: ",
        "--signal_dtype=int16": "error: --signal_dtype int16 would round the samples of 1 file(s)",
    }
    for flag, start in cases.items():
        code = record.main([*_args(clips, out), flag])
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == record.EXIT_USAGE, err
        assert len(lines) == 1 and lines[0].startswith(start), err
        assert "while running" not in lines[0] and "Traceback" not in err, err
        assert not out.exists()  # the run made it: removed, as the launcher left nothing


def test_the_fingerprint_of_a_run_planned_in_the_job_has_no_header_part(tmp_path):
    from pipelines.config import RecordConfig
    from pipelines.plan import list_inputs, plan_record

    clips = _clips(tmp_path / "clips", 8)
    config = RecordConfig(
        input_pattern=f"{clips}/*/*.wav",
        output_dir=str(tmp_path / "ds"),
        win_len=8000,
        label_source="dirname",
        classes="yes,no,up",
    )
    listed = list_inputs(config)
    assert all(f.info is None for f in listed.inputs)
    cut = {"cpu_count": 2, "single_task": True}
    made = fp.fingerprint(
        config.params(),
        listed.stamps,
        derived=fp.listing_digest(listed, cut=cut),
        planned_in_job=True,
    )
    assert fp.planned_in_job(made)
    # the header's refusals are not in it: the same digest whatever the headers hold
    plan = plan_record(config)
    assert any(f.error and f.info is None and "bad" in f.path for f in plan.inputs)
    assert made["plan"] == fp.listing_digest(list_inputs(config), cut=cut)
    assert made["plan"] != fp.listing_digest(listed, cut={**cut, "single_task": False})
    launcher = fp.fingerprint(config.params(), listed.stamps, derived=fp.plan_digest(plan))
    assert fp.first_difference(launcher, made) is not None
    assert fp.first_difference(made, made) is None


def test_the_plan_step_refuses_feature_shapes_other_than_the_launchers(tmp_path):
    """TFT's analysis is built with the launcher's feature shapes: a plan step whose headers give
    others (the first file changed in between) fails with one line instead of writing records
    of another layout."""
    import dataclasses

    from pipelines.config import RecordConfig, UsageError
    from pipelines.inputs import scan_headers
    from pipelines.job_plan import PlanArgs, plan_step
    from pipelines.plan import launcher_read_config, list_inputs
    from transforms.planning.types import ReadTask

    clips = _clips(tmp_path / "clips", 8)
    config = RecordConfig(
        input_pattern=f"{clips}/*/*.wav",
        output_dir=str(tmp_path / "ds"),
        win_len=8000,
        features=["log_mel"],
        label_source="dirname",
        classes="yes,no,up",
    )
    listed = list_inputs(config)
    read = launcher_read_config(config, listed)
    args = PlanArgs(
        config=config,
        listed=listed,
        cpu_count=2,
        single_task=True,
        compute_threads=1,
        feature_shapes=dict(read.layout.feature_shapes),
    )
    headed = scan_headers(list(listed.inputs))
    assert any(isinstance(out, ReadTask) for out in plan_step(headed, args))  # the same: planned
    changed = dataclasses.replace(args, feature_shapes={"log_mel": (1, 64)})
    with pytest.raises(UsageError, match="the input files changed after the job started"):
        list(plan_step(headed, changed))


def test_the_job_runs_with_the_garbage_collector_on(tmp_path):
    """The launcher plans with CPython's cyclic collector paused (`runners.internals`); the job
    that follows, in this process with the default runner, runs with it on again."""
    import gc

    collections = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    clips = _clips(tmp_path / "clips", 8)
    gc.callbacks.append(count)
    try:
        assert record.main(_args(clips, tmp_path / "ds")) == 0
    finally:
        gc.callbacks.remove(count)
    assert gc.isenabled() and len(collections) > 10, collections


def test_a_version_1_record_of_a_run_planned_in_the_job_still_resumes(tmp_path):
    """An unfinished run planned in the job whose resume record version 1 wrote (the inputs a
    list of [path, size, time], the listing digested file by file) is resumed: the launcher
    digests the listing as version 1 did to compare, then writes a version-2 record; a changed
    label is still refused, in one line."""
    import dataclasses

    from pipelines import job
    from pipelines.config import RecordConfig, UsageError
    from pipelines.inputs import RUN_MARKER
    from pipelines.plan import list_inputs, one_task, plan_record

    clips = _clips(tmp_path / "clips", 8)
    out = tmp_path / "ds"
    config = RecordConfig(
        input_pattern=f"{clips}/*/*.wav",
        output_dir=str(out),
        win_len=8000,
        label_source="dirname",
        classes="yes,no,up",
        resume=True,
    )
    listed = list_inputs(config)
    plan = one_task(plan_record(config))
    cut = {"cpu_count": os.cpu_count() or 1, "single_task": True}

    def unfinished(listing) -> None:
        (out / ".tmp").mkdir(parents=True, exist_ok=True)
        (out / RUN_MARKER).write_text("ours\n")
        version_1 = {
            "fingerprint_version": 1,
            "package": fp.package_version(),
            "options": fp.json_values(plan.params),
            "inputs": [list(stamp) for stamp in listing.stamps],
            "plan": fp.listing_digest(listing, cut=cut, version=1),
            "planned_in": "job",
        }
        (out / fp.FINGERPRINT_FILE).write_text(json.dumps(version_1, indent=1))

    unfinished(listed)
    job.start_output_dir(plan, resuming=True, listed=listed, single_task=True)
    stored = fp.read_fingerprint(str(out))
    assert stored["fingerprint_version"] == 2 and fp.planned_in_job(stored)
    assert stored["plan"] == fp.listing_digest(listed, cut=cut)
    job.start_output_dir(plan, resuming=True, listed=listed, single_task=True)  # version 2 now
    first, *rest = listed.inputs
    relabelled = dataclasses.replace(
        listed, inputs=(dataclasses.replace(first, label="other"), *rest)
    )
    unfinished(relabelled)
    with pytest.raises(UsageError, match=r"--resume: .* another plan: the plan changed"):
        job.start_output_dir(plan, resuming=True, listed=listed, single_task=True)
