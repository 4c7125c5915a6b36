"""The record job translates into a Dataflow job, offline, with our package staged from setup.py.

Beam's DataflowRunner with ``--template_location`` stages files and writes the job description
instead of submitting it; ``--dataflow_endpoint`` pointing nowhere and ``--no_auth`` keep it off
the network. The job graph (Runner API proto, staged as pipeline.pb) must hold our named stages,
planned in the launcher (the CLI on local files) and planned in the job (the job's plan step
reads the headers: the launcher stages the listing and reads no header but the first).
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from tests.support.record_helpers import SAMPLE_DIR

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("ReadWindows", "Analyze", "WriteTransformFn", "GroupByShard", "WriteShards", "Finalize")


def _argv(root: Path, inputs: str) -> list[str]:
    """A record command line translated for Dataflow offline, into `root`."""
    return [
        "--input_pattern",
        inputs,
        "--output_dir",
        str(root / "out"),
        "--win_len",
        "16000",
        "--runner",
        "DataflowRunner",
        "--project",
        "my-project",
        "--region",
        "europe-west1",
        "--dataflow_endpoint",
        "http://localhost:1",
        "--no_auth",
        "--temp_location",
        str(root / "tmp"),
        "--staging_location",
        str(root / "staging"),
        "--template_location",
        str(root / "job.json"),
    ]


@pytest.fixture(scope="module")
def translated(tmp_path_factory) -> Path:
    from apache_beam.options.pipeline_options import PipelineOptions

    import runners
    from pipelines import record

    root = tmp_path_factory.mktemp("dataflow")
    (root / "staging").mkdir()
    argv = _argv(root, str(SAMPLE_DIR / "*.wav"))
    argv += ["--machine_type", "n2-standard-4", "--max_num_workers", "20"]
    assert runners.translation_only(PipelineOptions(argv))
    assert record.main(argv) == 0  # the real CLI path: translate, do not wait, do not read
    assert not (root / "out" / "manifest.json").exists()
    return root


def _stage_names(root: Path) -> set[str]:
    from apache_beam.portability.api import beam_runner_api_pb2

    proto = beam_runner_api_pb2.Pipeline()
    proto.ParseFromString((root / "staging" / "pipeline.pb").read_bytes())
    return {t.unique_name for t in proto.components.transforms.values()}


def test_job_graph_has_our_named_stages(translated):
    names = _stage_names(translated)
    for stage in STAGES:
        assert stage in names, (stage, sorted(n for n in names if "/" not in n))
    assert "PlanInJob" not in names  # local inputs: planned in the launcher


def test_a_run_planned_in_the_job_translates_without_reading_the_headers(tmp_path):
    """A template of a run planned in the job: its plan step is in the graph, the listing is
    staged for it, and the launcher read one header: a file that is not a WAV after the first
    one is the job's to report, not the launcher's; the output directory has no run's marker
    and no resume record (nothing ran)."""
    import shutil

    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines import job
    from pipelines.config import RecordConfig
    from pipelines.record import RecordOptions
    from transforms.stages.staged import PLAN_DIR

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for wav in sorted(SAMPLE_DIR.glob("*.wav")):
        shutil.copy(wav, inputs / wav.name)
    (inputs / "zz_notes.wav").write_text("not audio\n")  # listed after the first header
    (tmp_path / "staging").mkdir()
    argv = _argv(tmp_path, str(inputs / "*.wav"))
    config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(RecordOptions))
    result = job.run_job(config, beam_argv=argv, plan_in_job=True)
    assert result.num_examples == 0 and result.num_shards == 0  # described, not run
    names = _stage_names(tmp_path)
    for stage in ("PlanInJob", *STAGES):
        assert stage in names, (stage, sorted(n for n in names if "/" not in n))
    out = tmp_path / "out"
    staged = sorted(p.name for p in (out / PLAN_DIR).iterdir())
    assert len(staged) == 1 and staged[0].startswith("inputs-"), staged
    # beside it only what tensorflow-transform writes while the graph is traced
    ours = sorted(
        str(p.relative_to(out))
        for p in out.rglob("*")
        if p.is_file() and not str(p.relative_to(out)).startswith(".tmp/tft/")
    )
    assert ours == [f"{PLAN_DIR}/{staged[0]}"], ours
    assert json.loads((tmp_path / "job.json").read_text())["environment"]["workerPools"]


def test_job_description_stages_our_package_and_worker_settings(translated):
    job = json.loads((translated / "job.json").read_text())
    pool = job["environment"]["workerPools"][0]
    assert "workflow.tar.gz" in {p["name"] for p in pool["packages"]}
    options = {
        d["key"]: d["value"] for d in job["environment"]["sdkPipelineOptions"]["display_data"]
    }
    assert options["setup_file"] == str(ROOT / "setup.py")
    assert "runners.worker_setup" in options["beam_plugins"]
    assert options["machine_type"] == "n2-standard-4" and options["max_num_workers"] == 20


def test_staged_sdist_holds_every_package_the_workers_import(translated):
    with tarfile.open(translated / "staging" / "workflow.tar.gz") as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for module in (
        "setup.py",
        "pipelines/record.py",
        "pipelines/plan/__init__.py",
        "pipelines/plan/in_job.py",
        "transforms/stages/read_windows.py",
        "transforms/audio/features.py",
        "transforms/stages/write_shards.py",
        "transforms/spec/types.py",
        "replay/format.py",
        "runners/worker_setup.py",
        "runners/threads.py",
    ):
        assert module in names, module
    assert not any(n.startswith(("tests/", "fuzz/", "benchmarks/")) for n in names)
