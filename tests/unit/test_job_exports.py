"""`pipelines.job` keeps the names its parts had there before they moved to `pipelines.build`,
`pipelines.launch_in_job`, `pipelines.summary` and `pipelines.resume.output_dir`: each is the
same object as in its new home, and importing `pipelines.job` first in a fresh interpreter
works (no import circle between the parts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import build, job, launch_in_job, summary
from pipelines.resume import output_dir

ROOT = Path(__file__).resolve().parents[2]
HOMES = {
    "HELD_PIECE_SEGMENTS": build,
    "StagedPlan": build,
    "build_pipeline": build,
    "held_tasks": build,
    "stage_plan": build,
    "launcher_plan": launch_in_job,
    "written_while_built": launch_in_job,
    "PlannedSeconds": summary,
    "counters": summary,
    "summarize": summary,
    "job_fingerprint": output_dir,
    "resume_in_job": output_dir,
    "start_output_dir": output_dir,
}


def test_every_re_exported_name_is_its_homes_object():
    assert sorted(job.__all__) == sorted([*HOMES, "run_job"])
    for name, home in HOMES.items():
        assert getattr(job, name) is getattr(home, name), name


@pytest.mark.slow  # 4 fresh interpreters, each importing Beam and TensorFlow
def test_each_part_imports_first_in_a_fresh_interpreter():
    for module in ("pipelines.job", "pipelines.build", "pipelines.launch_in_job",
                   "pipelines.summary"):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, (module, done.stderr[-2000:])
