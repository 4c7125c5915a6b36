"""What a read task emits besides its records' bytes, collected in one object: `TaskOutputs`.

`transforms.stages.read_windows` reads a task as decode -> encode / write -> sink; this is the
sink. For each chunk of rows read it takes the first row of the task's first segments as an AUTO
compression sample, and the analysed splits' rows into RecordBatches for tensorflow-transform's
analysis (`read_outputs.Batcher`); for each segment, its files table line or its error; for each
hand-off of rows to the part files (`pending_rows.BatchedPartWriter`), the analysed rows'
moments, the counters and the progress line, and the files table lines of the segments read
since the last (compressed together: `task_commits.packed_lines`). It keeps the task's books for
``--resume`` (`resume.TaskRecords`: files, errors, sampled rows, counts and moments, and where
the last checkpoint cut them) and writes them into the checkpoint and commit records; the
records of a task an earlier run did are emitted here too (`task_commits.ReusedRecords`).

No Beam runner here: the outputs are yielded, tagged as the read stage's (`resume`'s tags),
for the DoFn to hand to Beam; the counters are Beam metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

import apache_beam as beam
import pyarrow as pa

from replay import format as fmt
from transforms.audio import wav
from transforms.spec.compression import AUTO_SAMPLE_SIZE
from transforms.spec.types import ReadTask, Segment
from transforms.stages.pending_rows import HandedOff
from transforms.stages.progress import ProgressFile
from transforms.stages.read_outputs import Batcher, first_key, sample_bytes
from transforms.stages.task_commits import (
    ERRORS_TAG,
    FILES_TAG,
    PARTS_TAG,
    SAMPLES_TAG,
    STATS_TAG,
    ReusedRecords,
    TaskRecords,
    packed_lines,
)


class ReadCounters:
    """The read stage's Beam counters (``record`` namespace), made once a DoFn."""

    def __init__(self) -> None:
        self.files = beam.metrics.Metrics.counter("record", "files_read")
        self.failed = beam.metrics.Metrics.counter("record", "files_failed")
        self.windows = beam.metrics.Metrics.counter("record", "windows")
        self.audio_frames = beam.metrics.Metrics.counter("record", "audio_frames")


class TaskOutputs:
    """One read task's outputs but its records' bytes, and its books for ``--resume``.

    Args:
      task: the read task.
      output_dir: the job's output directory (its commit records go under it).
      moment_shapes: {feature: shape} whose moments the z-score statistics need (empty: not
        normalising).
      analysis_keys: the columns of the rows handed to the analysis (class and features).
      analysis_rows: rows per analysis batch (its last: fewer).
      analyzed_splits: the splits whose rows go to the analysis (None: every split).
      checkpoint_bytes: bytes of records between checkpoints (inf: none).
      summary: a segment read and its windows -> its files table summary.
      counters: the DoFn's counters.
      progress: the DoFn's progress file.
      reuse: the DoFn's reader of an earlier run's records (``--resume``).
    """

    def __init__(
        self,
        task: ReadTask,
        *,
        output_dir: str,
        moment_shapes: Mapping[str, Sequence[int]],
        analysis_keys: Sequence[str],
        analysis_rows: int,
        analyzed_splits: Collection[str] | None,
        checkpoint_bytes: float,
        summary: Callable[[Segment, int], dict],
        counters: ReadCounters,
        progress: ProgressFile,
        reuse: ReusedRecords,
    ):
        self._task, self._reuse = task, reuse
        self._records = TaskRecords(output_dir, task, moment_shapes, summary=summary)
        self._analysis = Batcher(analysis_rows)
        self._analysis_keys = list(analysis_keys)
        self._analyzed = analyzed_splits
        self._checkpoint_bytes = checkpoint_bytes
        self._counters, self._progress = counters, progress

    def reused(self) -> Iterator:
        """The outputs of what an earlier run committed of the task (``--resume``)."""
        for record in self._task.resumed:
            yield from self._reuse.outputs(record)

    def analyses(self, seg: Segment) -> bool:
        """Whether `seg`'s rows go to the analysis (and their moments to the statistics)."""
        return self._analyzed is None or seg.file.split in self._analyzed

    def rows(
        self, position: int, seg: Segment, batch: pa.RecordBatch, *, first_row: int
    ) -> Iterator:
        """Takes a chunk's rows of segment `position` (`first_row`: its first row's number in
        the segment): yields the segment's AUTO sample (its first row, for the task's first
        segments) and the analysis batches they complete."""
        if first_row == 0 and self._task.start + position < AUTO_SAMPLE_SIZE:
            self._records.sampled.append(first_key(batch, seg))
            yield beam.pvalue.TaggedOutput(SAMPLES_TAG, sample_bytes(batch))
        if self.analyses(seg):
            yield from self._analysis.add(batch.select(self._analysis_keys))

    def file_read(self, position: int, windows: int) -> bytes:
        """Segment `position` read whole (`windows` windows); returns its files table line."""
        return fmt.table_line(self._records.file_done(position, windows))

    def file_failed(self, seg: Segment, e: Exception) -> beam.pvalue.TaggedOutput:
        """`seg`'s file failed with `e`: logged, counted, kept; returns its error output."""
        reason = e.reason if isinstance(e, wav.WavDecodeError) else f"{type(e).__name__}: {e}"
        logging.getLogger("audiorecords").warning("skipping %s: %s", seg.file.path, reason)
        self._counters.failed.inc()
        self._progress.add(failed=1)
        error = {"path": seg.file.path, "reason": reason}
        self._records.errors.append(error)
        return beam.pvalue.TaggedOutput(ERRORS_TAG, error)

    def written(self, handed: HandedOff) -> Iterator:
        """Rows handed to their parts: their moments to the task's, their counts to the
        counters and the progress line; yields their files' table lines as one output."""
        self._records.analysed(handed.sums, handed.analysed_rows)
        counts = handed.counts
        self._counters.windows.inc(counts["windows"])
        self._counters.files.inc(counts["files"])
        self._counters.audio_frames.inc(counts["audio_frames"])
        self._progress.add(files=counts["files"], windows=counts["windows"], bytes=handed.bytes)
        if handed.lines:
            yield beam.pvalue.TaggedOutput(FILES_TAG, packed_lines(handed.lines))

    def checkpoint_due(self, written: int, stop: int) -> bool:
        """Whether to checkpoint before segment `stop`, `written` bytes of records in all
        (those pending included): past `checkpoint_bytes` since the last, and not at the end."""
        since = written - self._records.written
        return since >= self._checkpoint_bytes and stop < len(self._task.segments)

    def checkpoint(self, stop: int, *, parts: list[dict], written: int) -> Iterator:
        """Records the segments before `stop` since the last checkpoint (their `parts`'
        pieces; `written`: the part writer's bytes); yields the piece's moments."""
        piece = self._records.checkpoint(stop, parts=parts, written=written)
        yield beam.pvalue.TaggedOutput(STATS_TAG, piece)

    def last_rows(self) -> Iterator[pa.RecordBatch]:
        """The analysis batch of the rows still pending (none if none is)."""
        yield from self._analysis.flush()

    def commit(self, parts: list[dict]) -> Iterator:
        """Records the whole task (its `parts` committed); yields the moments since the last
        checkpoint and the parts."""
        yield beam.pvalue.TaggedOutput(STATS_TAG, self._records.commit(parts=parts))
        for part in parts:
            yield beam.pvalue.TaggedOutput(PARTS_TAG, part)
