"""DataflowRunner: Google Cloud Dataflow (Runner v2, Python SDK containers).

What a Dataflow job needs that a local run does not:

- ``--project``, ``--region``, ``--temp_location gs://...`` (``--staging_location`` defaults to
  ``<temp_location>/staging``).
- Our code on the workers: ``--setup_file`` is filled in with the project's setup.py, so Beam
  stages an sdist of ``pipelines``, ``transforms``, ``replay`` and ``runners`` and every worker
  pip-installs it (with its dependencies: TensorFlow, tensorflow-transform, ...) at start-up.
  ``--sdk_container_image`` (an image built from Beam's SDK image plus requirements.txt) skips
  those installs; ``--requirements_file`` is the slow alternative.
- Inputs and outputs the workers can reach (``gs://``): a local path passes the launcher's
  checks and then fails on every worker.
- One numeric thread per SDK process (``--beam_plugins runners.worker_setup``): Dataflow runs
  one Python process per vCPU.

Offline, the job can be translated without submitting it (``--dataflow_endpoint`` pointing
nowhere, ``--no_auth``, ``--template_location FILE``): Beam stages the files and writes the job
description; tests/pipeline/test_dataflow.py does exactly that.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    WorkerOptions,
)

from runners.support import add_plugin, stage_project

REMOTE_SCHEMES = ("gs://",)


def submits_to_service(options: PipelineOptions) -> bool:
    """True when the job goes to the real Dataflow service (not an offline translation)."""
    gcp = options.view_as(GoogleCloudOptions)
    return gcp.dataflow_endpoint == GoogleCloudOptions.DATAFLOW_ENDPOINT


def check(options: PipelineOptions, given: set[str]) -> list[str]:
    """Problems with the Dataflow flags (static: no I/O)."""
    del given
    gcp = options.view_as(GoogleCloudOptions)
    workers = options.view_as(WorkerOptions)
    problems = [
        f"DataflowRunner needs --{flag}"
        for flag in ("project", "region", "temp_location")
        if not getattr(gcp, flag)
    ]
    if submits_to_service(options):
        for flag in ("temp_location", "staging_location"):
            value = getattr(gcp, flag)
            if value and not value.startswith(REMOTE_SCHEMES):
                problems.append(f"--{flag} must be a gs:// path for Dataflow, got {value}")
        for flag in ("input_pattern", "output_dir"):
            value = options.get_all_options(retain_unknown_options=True).get(flag)
            if value and not str(value).startswith(REMOTE_SCHEMES):
                problems.append(
                    f"--{flag} {value} is local: Dataflow workers only see cloud storage (gs://...)"
                )
    for flag in ("num_workers", "max_num_workers", "disk_size_gb"):
        value = getattr(workers, flag)
        if value is not None and value < 1:
            problems.append(f"--{flag} must be >= 1, got {value}")
    return problems


def configure(options: PipelineOptions, *, given: set[str], input_bytes: int) -> None:
    """Stages our packages (setup.py) and the one-thread worker plugin.

    Raises:
      RunnerError: a staged file is missing.
    """
    del given, input_bytes
    image = options.view_as(WorkerOptions).sdk_container_image
    stage_project(options, image_has_it=bool(image))
    add_plugin(options)
    gcp = options.view_as(GoogleCloudOptions)
    if not gcp.staging_location and gcp.temp_location:
        gcp.staging_location = gcp.temp_location.rstrip("/") + "/staging"
