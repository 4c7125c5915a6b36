"""Read stage: a ReadTask (segments of files) -> encoded records, routed to per-shard part files.

A task reads as decode -> encode / write -> sink, fused in one DoFn (`ReadTaskFn`) for speed:
decode and encode here (a read-ahead thread and the compute pool), write in
`transforms.stages.pending_rows.BatchedPartWriter`, and the sink, everything else a task emits
and its books for ``--resume``, in `transforms.stages.task_outputs.TaskOutputs`.

For each task the DoFn decodes its file segments in bounded memory (`transforms.stages.file_rows`),
computes features and encodes the stored Examples once per chunk (in the compute pool), and

- streams every record to a *part* file of the shard it belongs to (TFRecord framing under
  ``<output_dir>/.tmp/parts/<split>/<shard>/<task>.records``, `transforms.stages.record_parts`:
  written under a temporary name and renamed when the task is done (linked, once a checkpoint
  named it), so a retried task rewrites identical parts, and concatenated into shards by the
  write stage); rows are routed to their shards in the compute pool and handed to the part
  writer in batches of consecutive chunks (`transforms.stages.pending_rows`), not per file;
- emits the rows of the analysed splits (`pipelines.config.parse_analyze_splits`:
  ``train`` by default when there are splits, so test windows never shape the statistics) as
  RecordBatches for tensorflow-transform's analysis (fused in this stage), and, when
  normalising, their exact moments (`transforms.stages.moments`), one ``{feature: Moments}``
  per piece of the task (its checkpoints cut pieces), for the z-score statistics; every row is
  written either way (its ``<feature>_norm`` is computed by the reader from those statistics,
  format version 2);
- emits small tagged records: written ``parts``, per-segment ``files`` summaries (the files
  table lines of their summary dicts, `replay.format.table_line`: bytes, the lines of a batch's
  segments joined and compressed in one object for Beam to hold and for `Finalize`'s side
  input, `task_commits.packed_lines`), ``errors``
  (a file that fails to decode, with its reason), and ``samples`` to decide AUTO compression.

Only these small records cross stage boundaries: the bulk data goes through files, so memory
stays bounded and worker processes pay off (the runner's data plane never carries the audio).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from replay import format as fmt
from replay.storage import is_url
from transforms.audio import formats
from transforms.spec.sharding import shard_of
from transforms.spec.types import ReadTask, ReadWindowsConfig, Segment, Sharding
from transforms.stages.examples import StoredEncoder
from transforms.stages.file_rows import (
    chunk_rows,
    file_rows,
    output_rate,
    rows_to_batch,
    rows_to_batch_many,
)
from transforms.stages.moments import row_sums
from transforms.stages.packs import packs
from transforms.stages.pending_rows import BatchedPartWriter, HandOffError, route_chunk
from transforms.stages.prefetch import ComputePool, prefetch
from transforms.stages.progress import ProgressFile
from transforms.stages.task_commits import (  # the output tags live there (its reuse emits them)
    ERRORS_TAG,
    FILES_TAG,
    PARTS_TAG,
    SAMPLES_TAG,
    STATS_TAG,
    ReusedRecords,
)
from transforms.stages.task_outputs import ReadCounters, TaskOutputs

__all__ = ["ERRORS_TAG", "FILES_TAG", "PARTS_TAG", "SAMPLES_TAG", "STATS_TAG", "ReadTaskFn"]
_AHEAD_CHUNKS = 4  # chunks decoded / in the feature pool ahead of the writer (8 MiB each)
# Rows for TFT's analysis leave a task in RecordBatches of about this many bytes of features or
# more (and its last rows): TFT runs its analysis graph once per batch; a clip is one row.
ANALYSIS_BATCH_BYTES = 8 << 20  # 8 MiB
# A read task checkpoints (`transforms.stages.task_commits`) at the first segment end past this many
# bytes of records since the last: what a killed run loses at most (a fraction of a second of
# reading; a checkpoint costs a flush and a small JSON file).
CHECKPOINT_BYTES = 64 << 20  # 64 MiB
# Computed rows wait (`transforms.stages.pending_rows`) until this many bytes of records are
# pending, then go to the part writer together (and before a checkpoint, and at a task's end):
# a hand-off per part, not per file.
WRITE_BATCH_BYTES = 8 << 20  # 8 MiB


def _route(batch: pa.RecordBatch, seg: Segment, first_row: int, sh: Sharding) -> np.ndarray:
    """Shard of every row of `batch`, whose first row is row `first_row` of `seg`.s file."""
    n = batch.num_rows
    split = seg.file.split
    count = sh.num_shards[split]
    if sh.shard_func is not None:
        rows = [
            {k: (v[0] if len(v) == 1 else np.asarray(v)) for k, v in r.items()}
            for r in batch.to_pylist()
        ]
        return np.array([int(sh.shard_func(r)) % count for r in rows], dtype=np.int64)
    starts = batch.column(batch.schema.get_field_index(fmt.WIN_START_KEY)).flatten()
    i = batch.schema.get_field_index(fmt.CHANNEL_KEY)
    channels = batch.column(i).flatten().to_numpy() if i >= 0 else np.zeros(n, np.int64)
    starts = starts.to_numpy()
    return np.array(
        [
            shard_of(
                (seg.file.index, int(channels[j]), int(starts[j])),
                label=seg.file.label,
                split_rank=seg.split_rank + first_row + j,
                num_shards=count,
                sharding=sh,
            )
            for j in range(n)
        ],
        dtype=np.int64,
    )


class _SegmentStream:
    """Splits the (segment, packed chunk | None | error) items of the packs by segment."""

    def __init__(self, items: Iterator[tuple[int, object]], *, close: Callable[[], None]):
        self._items = items
        self._close = close
        self._ended = -1  # the last segment whose end item was consumed

    def batches(self) -> Iterator[tuple[pa.RecordBatch, list[bytes], dict, list | None]]:
        """The next segment's (batch, records, row sums, shards | None); raises the error that
        ended it, if one did."""
        for seg, item in self._items:
            if item is None or isinstance(item, Exception):
                self._ended = seg
                if isinstance(item, Exception):
                    raise item
                return
            yield item.result()

    def skip(self, i: int) -> None:
        """Drops the rest of segment `i` (its consumer failed part-way), up to its end item:
        past any other of its chunks that failed too (each failed chunk ends a `batches`)."""
        while self._ended < i:
            try:
                for _ in self.batches():
                    pass
            except Exception:  # noqa: BLE001, S112 - the segment is already reported as failed
                continue
            return  # its end item, or the end of the stream

    def close(self) -> None:
        self._close()


class ReadTaskFn(beam.DoFn):
    """ReadTask -> RecordBatches (for TFT analysis) + tagged parts/files/errors/samples/stats.

    A task reads as three steps (`_read_task`): decode (its segments' chunks, in a thread, and
    their features and records, in the compute pool: `_encoded`), write (the records to their
    parts: `pending_rows.BatchedPartWriter`), and sink (everything else it emits, and its books
    for ``--resume``: `task_outputs.TaskOutputs`).

    Only rows of `analyzed_splits` (None: every split) go to the analysis; all rows are written,
    encoded with `classes` (the planned class list: ``target`` is the index in it).
    """

    def __init__(
        self,
        config: ReadWindowsConfig,
        sh: Sharding,
        *,
        classes: Sequence[str],
        output_dir: str,
        analyzed_splits: Collection[str] | None = None,
    ):
        self._config, self._sharding, self._output_dir = config, sh, output_dir
        self._encode = StoredEncoder(config.layout, classes)
        # the z-score statistics' moments of the analysed rows (none without normalisation)
        layout = config.layout
        self._moment_shapes = dict(layout.feature_shapes) if layout.normalize else {}
        # rows per analysis batch: ANALYSIS_BATCH_BYTES of float32 features (a class is ~16 B)
        row_bytes = 16 + 4 * sum(math.prod(s) for s in config.layout.feature_shapes.values())
        self._analysis_rows = max(1, ANALYSIS_BATCH_BYTES // row_bytes)
        # a checkpoint after each CHECKPOINT_BYTES of records (local output only: object stores
        # cannot append to a part in place)
        self._checkpoint_bytes = math.inf if is_url(output_dir) else CHECKPOINT_BYTES
        self._analyze = None if analyzed_splits is None else frozenset(analyzed_splits)
        self._counters = ReadCounters()
        self._progress = ProgressFile(output_dir)
        self._reused = ReusedRecords(
            config.layout,
            output_dir=output_dir,
            progress=self._progress,
        )

    def setup(self) -> None:
        threads = self._config.compute_threads
        self._pool = ComputePool(threads, name="audiorecords-features")
        self._writes = ThreadPoolExecutor(1, "audiorecords-parts") if threads > 1 else None

    def teardown(self) -> None:
        self._pool.shutdown()
        if self._writes is not None:
            self._writes.shutdown(cancel_futures=True)

    def finish_bundle(self) -> None:
        self._progress.flush()

    def process(
        self, task: ReadTask, planned: tuple[ReadWindowsConfig, Sharding] | None = None
    ) -> Iterator:
        if planned is not None:  # planned in the job: its signal dtype and shard counts
            self._config, self._sharding = planned
        outputs = self._outputs(task)
        yield from outputs.reused()  # --resume: what an earlier run committed of this task
        if task.resumed and not task.segments:  # reused whole: its record named its parts
            return
        # A task that raises (strict mode, a worker error) leaves no open part behind, but for
        # its checkpointed bytes (a resumed run reuses them).
        with BatchedPartWriter(
            self._output_dir,
            task,
            batched=self._sharding.shard_func is None,
            batch_bytes=WRITE_BATCH_BYTES,
            executor=self._writes,
        ) as parts:
            yield from self._read_task(task, parts, outputs)

    def _outputs(self, task: ReadTask) -> TaskOutputs:
        """The sink of `task`'s outputs but its records' bytes, and of its ``--resume`` books."""
        return TaskOutputs(
            task,
            output_dir=self._output_dir,
            moment_shapes=self._moment_shapes,
            analysis_keys=self._config.layout.analysis_keys,
            analysis_rows=self._analysis_rows,
            analyzed_splits=self._analyze,
            checkpoint_bytes=self._checkpoint_bytes,
            summary=self._file_summary,
            counters=self._counters,
            progress=self._progress,
            reuse=self._reused,
        )

    def _read_task(
        self, task: ReadTask, parts: BatchedPartWriter, outputs: TaskOutputs
    ) -> Iterator:
        """decode -> encode / write -> sink, segment by segment.

        Each chunk's rows, decoded and encoded ahead (`_encoded`), go to their parts (handed
        over in batches of WRITE_BATCH_BYTES: a long file's every few chunks, so memory stays
        bounded; with a `shard_func`, routed here and handed over chunk by chunk: the user's
        function runs in this thread, and its error is its file's) and to the sink (AUTO
        samples, analysis batches); each segment ends read (its files table line) or failed
        (its error); a checkpoint after each CHECKPOINT_BYTES of records.
        """
        encoded = self._encoded(task)
        try:
            for i, seg in enumerate(task.segments):
                read = 0  # rows of the segment read
                try:
                    for batch, records, sums, shards in encoded.batches():
                        if shards is None:
                            shards = _route(batch, seg, seg.row_start + read, self._sharding)
                        analysed = outputs.analyses(seg)
                        if parts.add(seg, records, shards, sums=sums if analysed else None):
                            yield from outputs.written(parts.hand_off(in_segment=True))
                        yield from outputs.rows(i, seg, batch, first_row=read)
                        read += batch.num_rows
                except HandOffError:  # the task's failure, not this file's
                    raise
                except Exception as e:  # noqa: BLE001 - a bad file becomes an error entry
                    if self._config.strict:
                        raise
                    encoded.skip(i)
                    yield outputs.file_failed(seg, e)
                else:
                    parts.file_read(seg, read, outputs.file_read(i, read))
                if outputs.checkpoint_due(parts.total_bytes, i + 1):
                    yield from outputs.written(parts.hand_off())
                    yield from outputs.checkpoint(
                        i + 1, parts=parts.checkpoint(), written=parts.written
                    )
        finally:
            encoded.close()
        yield from outputs.written(parts.hand_off())
        yield from outputs.last_rows()
        yield from outputs.commit(parts.commit())

    def _encoded(self, task: ReadTask) -> _SegmentStream:
        """The task's chunks, decoded ahead in a thread across its files, their features and
        records computed in a pool of `compute_threads` while this thread writes and sinks
        earlier ones. Chunks of consecutive short files share one job
        (`transforms.stages.packs`); the prefetch depth counts packs, each at most one full
        chunk of rows."""
        groups = prefetch(
            packs(
                self._task_chunks(task),
                submit=lambda chunks: self._pool.submit(self._rows_pack, chunks=chunks),
                max_rows=lambda chunk: chunk_rows(chunk["f"].info, self._config),
                key=self._pack_key,
            ),
            depth=_AHEAD_CHUNKS,
        )
        return _SegmentStream(itertools.chain.from_iterable(groups), close=groups.close)

    def _task_chunks(self, task: ReadTask) -> Iterator[tuple[int, object]]:
        """(segment, decoded chunk: `rows_to_batch` keyword arguments); a segment ends with
        (i, None) | (i, error)."""
        for i, seg in enumerate(task.segments):
            try:
                for chunk in self._segment_chunks(seg):
                    yield i, chunk
            except Exception as e:  # noqa: BLE001 - raised in the consuming thread
                yield i, e
                continue
            yield i, None

    def _segment_chunks(self, seg: Segment) -> Iterator[dict]:
        if seg.row_stop <= seg.row_start:
            return
        f = seg.file
        with FileSystems.open(f.path, compression_type="uncompressed") as fh:
            chunks = file_rows(
                fh,
                path=f.path,
                info=f.info,
                config=self._config,
                row_start=seg.row_start,
                row_stop=seg.row_stop,
                planned_starts=None if f.annotation is None else f.annotation.starts,
            )
            rank = seg.split_rank + seg.row_start  # of the chunk's first row
            for starts, channels, signal in chunks:
                yield {
                    "f": f,
                    "starts": starts,
                    "channels": channels,
                    "signal": signal,
                    "rank": rank,
                }
                rank += len(starts)

    def _pack_key(self, chunk: dict) -> int | None:
        """Chunks at one output rate share a job; an annotated file's are computed alone."""
        f = chunk["f"]
        return None if f.annotation is not None else output_rate(f.info, self._config)

    def _rows_pack(self, chunks: list[dict]) -> list:
        """Each chunk's (RecordBatch, records, row sums, shards), or the exception computing it
        raised.

        The pack's rows are computed and encoded at once; if that fails, chunk by chunk, so
        that a file's error (e.g. a feature beyond float16) is that file's alone. The row sums
        (`moments.row_sums` of each feature, for the statistics) and each row's shard
        (`_shards`) are taken here, in the pool.
        """
        if len(chunks) > 1:
            try:
                batch = rows_to_batch_many(chunks, config=self._config)
                records = self._encode(batch)
            except Exception:  # noqa: BLE001, S110 - retried chunk by chunk below
                pass
            else:
                sums = self._row_sums(batch)
                out, offset = [], 0
                for chunk in chunks:
                    k = len(chunk["starts"])
                    cut = {
                        key: (a[offset : offset + k], b[offset : offset + k])
                        for key, (a, b) in sums.items()
                    }
                    rows = batch.slice(offset, k)
                    try:
                        shards = self._shards(chunk, rows)
                    except Exception as e:  # noqa: BLE001 - raised by that chunk's PackedChunk
                        out.append(e)
                    else:
                        out.append((rows, records[offset : offset + k], cut, shards))
                    offset += k
                return out
        out = []
        for chunk in chunks:
            try:
                out.append(self._rows(chunk))
            except Exception as e:  # noqa: BLE001 - raised by that chunk's PackedChunk
                out.append(e)
        return out

    def _rows(self, chunk: dict) -> tuple[pa.RecordBatch, list[bytes], dict, list[int] | None]:
        """A decoded chunk -> its raw rows (features computed), their stored records, row sums
        and shards."""
        batch = rows_to_batch(
            f=chunk["f"],
            starts=chunk["starts"],
            channels=chunk["channels"],
            signal=chunk["signal"],
            config=self._config,
        )
        return batch, self._encode(batch), self._row_sums(batch), self._shards(chunk, batch)

    def _shards(self, chunk: dict, batch: pa.RecordBatch) -> list[int] | None:
        """The shard of each row of a chunk (`batch` its rows); None with a `shard_func`: the
        read stage's thread routes them."""
        if self._sharding.shard_func is not None:
            return None
        channels = batch.schema.get_field_index(fmt.CHANNEL_KEY) >= 0
        return route_chunk(chunk, self._sharding, channels=channels)

    def _row_sums(self, batch: pa.RecordBatch) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """{feature: each row's float64 sums of its values and squares} (normalising only)."""
        sums = {}
        for key in self._moment_shapes:
            values = batch.column(batch.schema.get_field_index(key)).flatten().to_numpy()
            sums[key] = row_sums(values.reshape(batch.num_rows, -1))
        return sums

    def _file_summary(self, seg: Segment, rows: int) -> dict:
        """The summary of a segment read (`rows` windows): a function of them alone (a task's
        records make them again when written, `task_commits.Summaries`)."""
        f, info = seg.file, seg.file.info
        return {
            "path": f.path,
            "index": f.index,
            "size_bytes": f.size_bytes,
            "modified": f.modified,
            "label": f.label,
            "split": f.split,
            "num_windows": rows,
            "sample_rate": output_rate(info, self._config),
            "num_frames": info.num_frames,
            "num_channels": info.num_channels,
            "subtype": info.subtype,
            "full_scale": info.full_scale,
            **formats.lossy_fields(info.subtype),  # Vorbis: lossy: true, lossy_reason
            # --annotations: the file's per-class statistics
            **({} if f.annotation is None else {"annotation": dict(f.annotation.summary)}),
        }
