"""The record job's result: its counters read from the runner and the summary of the run.

`summarize` builds the `RecordResult` from the written manifest and errors table (the launcher's
work here does not grow with the files), cleans the run's temporary files and logs the
counters (`counters`); `PlannedSeconds` keeps the seconds of audio of a plan's files without
the files.
"""

from __future__ import annotations

import array
import hashlib
import json
import logging
from collections.abc import Collection, Sequence

import apache_beam as beam

from pipelines.plan import (
    RecordPlan,
)
from pipelines.plan.reads import RUN_MARKER
from pipelines.result import RecordResult
from pipelines.resume.reuse import bad_table_rows
from replay import format as fmt
from transforms.spec.types import InputFile


class PlannedSeconds:
    """The seconds of audio of a plan's files with a header, kept without the files (whose
    summary of the run needs only those not failed): each one's path digest and seconds, in the
    plan's order."""

    def __init__(self, inputs: Sequence[InputFile]) -> None:
        self._digests, self._seconds = array.array("Q"), array.array("d")
        for f in inputs:
            if f.info is not None and f.info.sample_rate:
                self._digests.append(_path_digest(f.path))
                self._seconds.append(f.info.num_frames / f.info.sample_rate)

    def total(self, failed: Collection[str]) -> float:
        """The seconds of the files not in `failed` (paths), summed in the plan's order."""
        if not failed:
            return sum(self._seconds)
        gone = {_path_digest(path) for path in failed}
        return sum(s for d, s in zip(self._digests, self._seconds, strict=True) if d not in gone)


def _path_digest(path: str) -> int:
    return int.from_bytes(hashlib.blake2b(path.encode("utf-8"), digest_size=8).digest(), "big")


def counters(result: beam.runners.runner.PipelineResult) -> dict[str, int]:
    """The job's "record" counters (files_read, files_failed, windows, bytes_written, ...)."""
    try:
        query = result.metrics().query(beam.metrics.MetricsFilter().with_namespace("record"))
    except (NotImplementedError, AttributeError):  # some runners do not report metrics
        return {}
    totals: dict[str, int] = {}
    for counter in query["counters"]:
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + int(value or 0)
    return totals


def summarize(
    plan: RecordPlan,
    elapsed: float,
    *,
    counters: dict[str, int],
    audio_seconds: float | None = None,
    planned_seconds: PlannedSeconds | None = None,
    tables: Sequence[str] | None = None,
) -> RecordResult:
    """Reads the written manifest and errors table, cleans temporary files, logs the counters.

    The files table is not read: its count is the manifest's ``num_files``, and the seconds of
    audio come from the plan's headers (or `audio_seconds`, planned in the job: the plan step's
    counter, which also counts the files that fail while read; or `planned_seconds`, the plan's
    headers kept without its inputs), so the launcher's work here does not grow with the number
    of files. `tables`: the annotation tables of a run planned in the job, whose entries of the
    errors table are bad rows, not failed files (planned in the launcher: the plan's bad rows).
    """
    import tensorflow as tf

    with tf.io.gfile.GFile(f"{plan.output_dir}/{fmt.MANIFEST_FILENAME}") as fh:
        m = json.load(fh)
    with tf.io.gfile.GFile(f"{plan.output_dir}/{fmt.ERRORS_TABLE}", "rb") as fh:
        errors = [json.loads(line) for line in fh.read().splitlines()]
    for leftover in (".tmp", RUN_MARKER):
        path = f"{plan.output_dir}/{leftover}"
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        elif tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    failed = {e["path"] for e in errors}
    seconds = audio_seconds
    if seconds is None and planned_seconds is not None:
        seconds = planned_seconds.total(failed)
    if seconds is None:
        seconds = sum(  # of the files read: planned, and not failed while read
            f.info.num_frames / f.info.sample_rate
            for f in plan.inputs
            if f.info is not None and f.info.sample_rate and f.path not in failed
        )
    logging.getLogger("audiorecords").info("record counters: %s", counters)
    return RecordResult.from_manifest(
        m,
        errors,
        output_dir=plan.output_dir,
        elapsed=elapsed,
        audio_seconds=seconds,
        counters=counters,
        # --annotations: bad table rows, also in errors
        num_bad_rows=(
            len(plan.annotation_errors) if tables is None else bad_table_rows(errors, tables)
        ),
    )
