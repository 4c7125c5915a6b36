"""Guarantee 3, worker failure: failed work is retried or re-run, and every window is kept once.

What the runners do (apache_beam 2.77, read in apache_beam/runners/):

- The DirectRunner's FnApiRunner (the default local runner, in_memory and multi_processing)
  never retries: `BundleManager._run_bundle` raises ``RuntimeError(result.error)`` on the first
  failed bundle, and the job fails. Shown by `test_runner_retry_behaviour`.
- Beam's legacy BundleBasedDirectRunner retries a failed bundle up to 4 times and discards the
  failed attempt's outputs (`direct/executor.py` `TransformExecutor.call`), as Dataflow does.
  It cannot run the whole record job: a side input made from one tagged output of a
  multi-output ParDo receives *every* output (`AsList(outs.files)` of a DoFn yielding x and
  TaggedOutput("files", {..}) held both), so ``Finalize`` fails. The record job's own
  ReadWindows -> GroupByShard -> WriteShards stages (the part that writes files) run on it
  instead, with a fault injected into one attempt of each, against the reference run's
  transform_fn (what its Analyze stage writes).
- End to end on the FnApiRunner, an injected failure fails the job cleanly (an incomplete
  directory, no manifest) and re-running with ``--overwrite`` gives the exact dataset.

Faults come from test subclasses of the two DoFns (`tests.support.faults`); production code has no
switch for them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that, equal_to

from pipelines import record
from pipelines.plan import plan_record
from pipelines.resume.output_dir import prepare_output_dir
from replay import IncompleteDatasetError, load_info
from runners import threads
from tests.support import faults
from tests.support.record_helpers import read_records
from tests.support.reliability import (
    assert_same_dataset,
    record_args,
    reference_run,
    shard_files,
)
from transforms.spec.types import ShardSpec
from transforms.stages import read_windows
from transforms.stages.task_commits import unpacked_lines

pytestmark = pytest.mark.slow
LEGACY = "BundleBasedDirectRunner"
# Not sys.argv (pytest's). Once pipelines.record is imported, every pipeline's options are also
# parsed as RecordOptions, whose two required flags must then be present.
_NO_ARGS = PipelineOptions(["--input_pattern", "unused", "--output_dir", "unused"])


class _FailFirstAttempt(beam.DoFn):
    """Fails the first time it sees element 3 (state in a file: survives a new DoFn instance)."""

    def __init__(self, flag: str):
        self._flag = flag

    def process(self, x: int):
        if x == 3 and not os.path.exists(self._flag):
            Path(self._flag).touch()
            raise RuntimeError("transient failure")
        yield x


def test_runner_retry_behaviour(tmp_path):
    # Named, not "DirectRunner": Beam's DirectRunner would first try to download Prism, and fall
    # back to the FnApiRunner only when that fails, so the result would depend on the network.
    with pytest.raises(Exception, match="transient failure"):  # FnApiRunner: no retry
        with beam.Pipeline(runner=fn_runner.FnApiRunner(), options=_NO_ARGS) as p:
            _ = p | beam.Create(range(6)) | beam.ParDo(_FailFirstAttempt(str(tmp_path / "a")))
    with beam.Pipeline(
        runner=LEGACY, options=_NO_ARGS
    ) as p:  # legacy runner: retried, each element once
        out = p | beam.Create(range(6)) | beam.ParDo(_FailFirstAttempt(str(tmp_path / "b")))
        assert_that(out, equal_to(list(range(6))))
    assert (tmp_path / "b").exists()  # the failure did happen


def _analysed(batch) -> list[tuple]:
    """What TFT's analysis receives of each row: (class, each feature's float32 bytes' digest)."""
    names = [n for n in batch.schema.names if n != "class"]
    values = [batch.column(n).flatten().to_numpy().reshape(batch.num_rows, -1) for n in names]
    classes = batch.column("class").flatten().to_pylist()
    return [(c.decode(), *(_digest(v[i]) for v in values)) for i, c in enumerate(classes)]


def _digest(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, "<f4").tobytes()).hexdigest()


def test_read_and_write_stages_retried_write_the_reference_bytes(tmp_path, tmp_path_factory):
    """The record job's ReadWindows and WriteShards stages on a retrying runner, each failing
    once mid-work (after a file's first windows are out; after a shard's first record is in its
    temporary file): every window, file and shard comes out exactly once, and the shards are
    byte-identical to the uninterrupted reference run's."""
    pattern, labels, reference = reference_run(tmp_path_factory.getbasetemp())
    out = tmp_path / "out"
    plan = plan_record(
        PipelineOptions(record_args(pattern, labels, out)).view_as(record.RecordOptions)
    )
    prepare_output_dir(plan)
    shutil.copytree(reference / "transform_fn", out / "transform_fn")  # what Analyze writes
    info = load_info(reference)
    manifest = {**info.manifest, "files": info.files}
    features = list(plan.read.layout.feature_shapes)
    windows = [(r["class"], *(_digest(r[k]) for k in features)) for r in read_records(reference)]
    assert len(windows) == sum(f["num_windows"] for f in manifest["files"])
    paths = [f["path"] for f in manifest["files"]]
    written = [(s["filename"], s["num_examples"]) for s in manifest["splits"]["all"]["shards"]]
    spec = ShardSpec(output_dir=str(out), name=plan.name)
    write = faults.FaultyWriteShardFn(spec, fault_dir=str(tmp_path))
    # One BLAS thread, as the record job's runner sets: float32 features depend on it.
    with threads.single_threaded(), beam.Pipeline(runner=LEGACY, options=_NO_ARGS) as p:
        outs = (
            p
            | beam.Create(plan.tasks)
            | beam.ParDo(
                faults.FaultyReadTaskFn(
                    plan.read,
                    plan.sharding,
                    classes=plan.classes,
                    output_dir=str(out),
                    fault_dir=str(tmp_path),
                )
            ).with_outputs(
                read_windows.FILES_TAG,
                read_windows.ERRORS_TAG,
                read_windows.PARTS_TAG,
                read_windows.SAMPLES_TAG,
                read_windows.STATS_TAG,
                main="rows",
            )
        )
        assert_that(outs.rows | beam.FlatMap(_analysed), equal_to(windows), label="windows")
        files = outs[read_windows.FILES_TAG] | beam.FlatMap(
            lambda item: [json.loads(line)["path"] for line in unpacked_lines(item).splitlines()]
        )
        assert_that(files, equal_to(paths), label="files")
        infos = (
            outs[read_windows.PARTS_TAG]
            | beam.Map(lambda part: ((part["split"], part["shard"]), part))
            | beam.GroupByKey()
            | beam.ParDo(write, "NONE", dict(plan.sharding.num_shards), [])
            | beam.Map(lambda info: (info["filename"], info["num_examples"]))
        )
        assert_that(infos, equal_to(written), label="shards")
    assert (tmp_path / "read").read_text() in paths  # the read failed once ...
    assert (tmp_path / "write").read_text().startswith("all-")  # ... and so did a shard write
    # whose partial file was deleted as it failed (transforms.stages.atomic), then written whole
    assert not list((out / ".tmp").glob("*.tfrecord-*"))
    assert shard_files(out) == shard_files(reference)


def test_injected_failure_fails_the_job_and_a_rerun_is_exact(tmp_path, tmp_path_factory):
    """FnApiRunner: no retry, so the job fails (no manifest); --overwrite re-runs it exactly."""
    pattern, labels, reference = reference_run(tmp_path_factory.getbasetemp())
    out = tmp_path / "out"
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "read").touch()  # only the shard write fails (once)
    with (
        faults.injected(str(tmp_path / "faults")),
        pytest.raises(Exception, match="injected fault: write"),
    ):
        record.run(record_args(pattern, labels, out))
    with pytest.raises(IncompleteDatasetError, match="incomplete"):
        load_info(out)
    # The failed shard's partial file was deleted as it failed (transforms.stages.atomic), and
    # the shard never got its final name.
    shard = int((tmp_path / "faults" / "write").read_text().rsplit("-", 1)[1])
    assert not list((out / ".tmp").glob("*.tfrecord-*"))
    assert not list(out.glob(f"*.tfrecord-{shard:05d}-of-*"))
    record.run(record_args(pattern, labels, out, "--overwrite"))
    assert_same_dataset(out, reference)
