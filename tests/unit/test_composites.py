"""transforms.stages.composites: importing the record job's stages changes nothing process-wide;
building a pipeline from them registers their coders (`register_coders`).

Each check runs in a new interpreter: Beam's coder registry is one per process, and another test
of this process may have built a pipeline already.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CODERS = """
import pyarrow as pa
from apache_beam.coders import registry
from transforms.spec.types import ReadTask

def coders():
    return tuple(type(registry.get_coder(t)).__name__ for t in (pa.RecordBatch, ReadTask))
"""

_PLAN = """
import apache_beam as beam
from pipelines import job
from pipelines.config import RecordConfig
from pipelines.plan import plan_record
from tests.support import wavgen

root = sys.argv[1]
for i in range(4):
    os.makedirs(os.path.join(root, f"class{i % 2}"), exist_ok=True)
    wavgen.write_wav(
        os.path.join(root, f"class{i % 2}", f"clip{i}.wav"),
        wavgen.synth(4000, seed=i),
        sample_rate=16000,
        subtype="PCM_16",
    )
config = RecordConfig(
    input_pattern=os.path.join(root, "*", "*.wav"),
    output_dir=os.path.join(root, "out"),
    win_len=4000,
    features="log_mel",
    label_source="dirname",
)
plan = plan_record(config)
"""


def _run(code: str, *args: str) -> str:
    script = "import os, sys\n" + _CODERS + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_importing_the_stages_and_the_job_registers_no_coder():
    before, after = _run(
        """
        before = coders()
        import pipelines.job, pipelines.record, transforms.stages.composites  # noqa: F401
        print(",".join(before), ",".join(coders()))
        """
    )
    assert after == before
    assert "RecordBatchCoder" not in after and "ReadTaskCoder" not in after


def test_building_the_record_job_registers_its_coders(tmp_path):
    [built] = _run(
        _PLAN
        + """
        p = beam.Pipeline()  # built, not run
        job.build_pipeline(p, plan, staged=job.stage_plan(plan, plan.tasks))
        print(",".join(coders()))
        """.replace("\n        ", "\n"),
        str(tmp_path),
    )
    assert built == "RecordBatchCoder,ReadTaskCoder"


def test_the_read_stage_alone_registers_them_too(tmp_path):
    [built] = _run(
        _PLAN
        + """
        from transforms.stages import composites
        lists = job.stage_plan(plan, plan.tasks)
        p = beam.Pipeline()
        _ = p | composites.ReadWindows(
            lists.tasks,
            plan.read,
            plan.sharding,
            classes=plan.classes,
            output_dir=plan.output_dir,
            analyzed_splits=plan.analyzed_splits,
        )
        print(",".join(coders()))
        """.replace("\n        ", "\n"),
        str(tmp_path),
    )
    assert built == "RecordBatchCoder,ReadTaskCoder"


def test_registering_twice_is_registering_once():
    [once, twice] = _run(
        """
        from transforms.stages import composites
        composites.register_coders()
        once = coders()
        composites.register_coders()
        print(",".join(once), ",".join(coders()))
        """
    )
    assert once == twice == "RecordBatchCoder,ReadTaskCoder"
