"""What a record run produced: `RecordResult`, built once from the manifest the run wrote.

`pipelines.job.run_job` returns it to both callers: the command prints its one line about it
(`pipelines.record.summary_line`), `pipelines.api.record_dataset` returns it as is. Plain data:
importing this module imports neither Beam nor TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class RecordResult:
    """What a record run produced (see also ``manifest.json`` in `output_dir`).

    Attributes:
      output_dir: the dataset directory.
      num_examples: windows written.
      num_files: input files recorded.
      num_failed: input files that failed (refused at planning or failed while read).
      errors: the errors table's entries ({"path", "reason"}): failed files, then with
        ``--annotations`` the bad table rows.
      split_counts: windows per split.
      num_shards: shard files written.
      num_bytes: bytes of the shard files.
      compression: the shards' compression ("NONE", "GZIP" or "ZLIB").
      seconds: the pipeline's wall time.
      audio_seconds_per_second: seconds of audio read per second of `seconds`.
      windows_per_second: windows written per second of `seconds`.
      counters: the job's "record" counters (files_read, files_failed, windows, ...).
      num_bad_rows: ``--annotations`` table rows refused (also in `errors`).
      translated: only the job description was written (``--template_location``): no data
        was processed and every count is 0.
      total_tasks: the run's read tasks.
      reused_tasks: ``--resume``: the read tasks an unfinished run had committed whole, not
        read again.
      reused_windows: ``--resume``: the windows an unfinished run had committed (whole tasks
        and tasks' checkpoints), not read again.
      already_complete: ``--resume`` on a finished dataset: nothing was done (it is described).
      dataset_version: the dataset version the run made (``--append``: the one it added; the
        counts are the appended files').
    """

    output_dir: str
    num_examples: int
    num_files: int
    num_failed: int
    errors: tuple[Mapping[str, str], ...]
    split_counts: Mapping[str, int]
    num_shards: int
    num_bytes: int
    compression: str
    seconds: float
    audio_seconds_per_second: float
    windows_per_second: float
    counters: Mapping[str, int]
    num_bad_rows: int = 0
    translated: bool = False
    total_tasks: int = 0
    reused_tasks: int = 0
    reused_windows: int = 0
    already_complete: bool = False
    dataset_version: int = 1

    @classmethod
    def from_manifest(
        cls,
        manifest: Mapping[str, Any],
        errors: Sequence[Mapping[str, str]],
        *,
        output_dir: str,
        elapsed: float,
        audio_seconds: float,
        counters: Mapping[str, int],
        num_bad_rows: int,
    ) -> RecordResult:
        """The result of a run from its manifest.json and errors table.

        Args:
          manifest: manifest.json as written.
          errors: the errors table's entries.
          output_dir: the dataset directory.
          elapsed: the pipeline's wall time in seconds.
          audio_seconds: seconds of audio in the files read.
          counters: the job's "record" counters.
          num_bad_rows: bad annotation table rows (entries of `errors`, not failed files).
        """
        splits = manifest["splits"]
        seconds = round(elapsed, 2)
        num_examples = manifest["num_examples"]
        return cls(
            output_dir=output_dir,
            num_examples=num_examples,
            num_files=manifest["num_files"],
            num_failed=len(errors) - num_bad_rows,
            errors=tuple(errors),
            split_counts={name: s["num_examples"] for name, s in splits.items()},
            num_shards=sum(len(sp["shards"]) for sp in splits.values()),
            num_bytes=sum(s["num_bytes"] for sp in splits.values() for s in sp["shards"]),
            compression=manifest["compression"],
            seconds=seconds,
            audio_seconds_per_second=round(audio_seconds / elapsed, 1) if elapsed else 0.0,
            windows_per_second=round(num_examples / seconds, 1) if seconds else 0.0,
            counters=dict(counters),
            num_bad_rows=num_bad_rows,
        )

    @classmethod
    def job_description_only(cls, output_dir: str) -> RecordResult:
        """The result of a run that only wrote its job description (``--template_location``)."""
        return cls(
            output_dir=output_dir,
            num_examples=0,
            num_files=0,
            num_failed=0,
            errors=(),
            split_counts={},
            num_shards=0,
            num_bytes=0,
            compression="",
            seconds=0.0,
            audio_seconds_per_second=0.0,
            windows_per_second=0.0,
            counters={},
            translated=True,
        )
