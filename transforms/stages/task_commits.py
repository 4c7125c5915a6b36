"""``--resume``'s Beam side: commit and checkpoint records, and a reused record's outputs.

The design is in `pipelines.resume`. A read task that finished writes a *commit record*
(`commit_record`, by the read stage's sink, `transforms.stages.task_outputs.TaskOutputs`, once
its parts have their final names), and a long one a record of each checkpoint's piece (its
segments since the last checkpoint: byte ranges of its temporary parts); `TaskRecords` keeps
what they list. A resumed run does not read what they cover again: the read task, handed its
records, has `ReusedRecords` emit what the read stage emitted for their segments:

- ``parts``, ``files``, ``errors``: the record's lists, as they were, but for the parts' paths:
  a record holds them relative to the output directory (`relative_part_path`), resolved against
  the resumed run's; a checkpoint's parts only through the task that goes on in them
  (`continued_parts`), which commits them whole; a record's file summaries are dicts, emitted
  as their table lines as the read stage emits them;
- ``stats``: the moments of the record's analysed rows (`transforms.stages.moments`), stored
  in it when they were read: exact integers, so added to the rest in any order they give the
  statistics of an uninterrupted run bit for bit (`transforms.stages.exact_z_score`);
- no ``rows``: TFT's analysis is handed only the rows this run reads. It needs none of the
  reused ones: the z-score statistics come from the moments, and the class vocabulary is the
  planned classes whatever rows it sees (`transforms.stages.preprocessing`). So a reused record's
  parts are not read back for the analysis;
- ``samples`` (AUTO compression): the stored rows the read stage sampled (found by their row
  keys, the parts read only as far as the last of them), their signal and float32 values as
  `read_outputs.sample_bytes` takes them.

Reused rows are not read back and handed to TFT again (commit version 4 did): that cost half of
what reading them costs.
"""

from __future__ import annotations

import array
import itertools
import json
import math
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa

from replay import format as fmt
from transforms.spec.compression import AUTO_SAMPLE_SIZE
from transforms.spec.layout import RecordLayout
from transforms.spec.types import ReadTask, Segment
from transforms.stages import atomic, part_ranges
from transforms.stages.moments import (
    FeatureMoments,
    Moments,
    add_features,
    features_from_json,
    features_to_json,
)
from transforms.stages.progress import ProgressFile

COMMITS_DIR = ".tmp/commits"  # pipelines.resume.reuse.COMMITS_DIR
READ_BACK_BYTES = 64 << 20  # 64 MiB: read buffers of a record's parts, shared among them
COMMIT_VERSION = (
    5  # pipelines.resume.reuse.COMMIT_VERSION: records of another version are not reused
)
JSON_PIECE_ITEMS = 1024  # a commit record is written this many list items at a time
# the read stage's output tags (`read_windows` takes them from here)
FILES_TAG, ERRORS_TAG, PARTS_TAG, SAMPLES_TAG = "files", "errors", "parts", "samples"
STATS_TAG = "stats"
# the ``files`` output's compression: the runner holds that output until `Finalize`, a copy of it
# as its side input, and Finalize the items; table lines of one corpus repeat most of their bytes
FILES_ZLIB_LEVEL = 1


def packed_lines(lines: Iterable[bytes]) -> bytes:
    """One item of the read stage's ``files`` output: files table lines (`format.table_line`),
    joined and compressed (`unpacked_lines` gives them back)."""
    return zlib.compress(b"".join(lines), FILES_ZLIB_LEVEL)


def unpacked_lines(item: bytes) -> bytes:
    """The table lines (``\\n`` ended, joined) of an item of the ``files`` output."""
    return zlib.decompress(item)


def commit_record_path(output_dir: str, task: int, start: int, stop: int) -> str:
    """``.tmp/commits/<task>-<start>-<stop>.json``: task `task`'s segments [start, stop)."""
    return f"{output_dir.rstrip('/')}/{COMMITS_DIR}/{task:06d}-{start:06d}-{stop:06d}.json"


def commit_record(
    output_dir: str,
    task: int,
    *,
    start: int,
    stop: int,
    parts: Sequence[Mapping],
    files: Sequence[Mapping],
    errors: Sequence[Mapping],
    sampled: Sequence[str],
    counts: Mapping[str, int],
    moments: Mapping[str, Moments],
) -> None:
    """Writes the record of task `task`'s segments [`start`, `stop`), atomically: the whole
    task once its parts are renamed, or a checkpoint's piece (its parts' bytes from an offset in
    their temporary files, flushed before this record is written).

    `counts`: the counter increments (files_read, audio_frames), counted again on reuse.
    `moments`: {feature: Moments} of these segments' analysed rows.
    """
    record = {
        "version": COMMIT_VERSION,
        "counts": dict(counts),
        "task": task,
        "start": start,
        "stop": stop,
        "moments": features_to_json(moments),
        "parts": [  # runs: tuples or lists, JSON arrays either way
            {**p, "path": relative_part_path(output_dir, p["path"])} for p in parts
        ],
        "files": files if isinstance(files, Summaries) else list(files),  # made as written
        "errors": list(errors),
        "sampled": list(sampled),
        "windows": sum(int(f["num_windows"]) for f in files),
    }
    path = commit_record_path(output_dir, task, start, stop)
    # key order kept: the files table keeps it
    atomic.write_atomically(path, (text.encode("utf-8") for text in json_pieces(record)))


def json_pieces(record: Mapping[str, Any], *, items: int = JSON_PIECE_ITEMS) -> Iterator[str]:
    """``json.dumps(record)``'s text, in pieces of at most `items` items of each of its lists
    (a whole task's record lists every file it read: made whole, its text and bytes are held
    twice over)."""
    yield "{"
    for n, (key, value) in enumerate(record.items()):
        yield f"{', ' if n else ''}{json.dumps(key)}: "
        if not isinstance(value, (list, tuple, Summaries)):
            yield json.dumps(value)
            continue
        yield "["
        for start in range(0, len(value), items):
            text = json.dumps(value[start : start + items])  # "[a, b]"
            yield (", " if start else "") + text[1:-1]
        yield "]"
    yield "}"


def continued_parts(output_dir: str, records: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The part files a continued task goes on in (`record_parts.PartWriter`): for each
    (split, shard) of its checkpoint `records` (in order), its file, where the last of them
    ends, and all their runs."""
    parts: dict[tuple[str, int], dict] = {}
    for record in records:
        for part in record["parts"]:
            key = (part["split"], part["shard"])
            entry = parts.setdefault(
                key,
                {
                    "split": key[0],
                    "shard": key[1],
                    "path": f"{output_dir.rstrip('/')}/{part['path']}",
                    "runs": [],
                },
            )
            entry["runs"] += [list(run) for run in part["runs"]]
            entry["end"] = part.get("offset", 0) + sum(run[2] for run in part["runs"])
    return [parts[k] for k in sorted(parts)]


def relative_part_path(output_dir: str, path: str) -> str:
    """A part's path relative to `output_dir`, as commit records store it (a copied or moved
    output directory reuses its own parts, never the directory it was copied from)."""
    prefix = f"{output_dir.rstrip('/')}/"
    if not path.startswith(prefix):
        raise ValueError(f"part {path} is not under the output directory {output_dir}")
    return path[len(prefix) :]


def _records(path: str, offset: int, size: int, *, block_bytes: int) -> Iterator[memoryview]:
    """The records of `size` bytes of the part file `path` from `offset`, read `block_bytes` at a
    time (each valid until the next is taken: `_parse` copies what it keeps)."""
    r = part_ranges.ByteRange(path, offset, size)
    return part_ranges.record_views(r, block_bytes=block_bytes)


def _parse(record: bytes | memoryview) -> Mapping[str, Any]:
    import tensorflow as tf

    return tf.train.Example.FromString(record).features.feature


def _row_key(feature: Mapping[str, Any]) -> tuple[int, int, int]:
    channel = feature[fmt.CHANNEL_KEY].int64_list.value[0] if fmt.CHANNEL_KEY in feature else 0
    return (
        feature[fmt.INDEX_KEY].int64_list.value[0],
        feature[fmt.WIN_START_KEY].int64_list.value[0],
        channel,
    )


def _part_rows(
    path: str, *, offset: int = 0, size: int, block_bytes: int
) -> Iterator[tuple[tuple[int, int, int], Any]]:
    """(row key, parsed record) of every record of a part (`size` bytes of the file `path` from
    `offset`), in order."""
    for raw in _records(path, offset, size, block_bytes=block_bytes):
        feature = _parse(raw)
        yield _row_key(feature), feature


def sample_bytes(feature: Mapping[str, Any], layout: RecordLayout) -> bytes:
    """One stored row's signal and float32 values, as `read_outputs.sample_bytes` joins them
    (`layout.arrow_schema()` order)."""
    pieces = []
    for field in layout.arrow_schema():
        if field.name == fmt.SIGNAL_KEY:
            pieces.append(feature[fmt.SIGNAL_KEY].bytes_list.value[0])
        elif field.type == pa.list_(pa.float32()):
            pieces.append(feature[field.name].bytes_list.value[0])
    return b"".join(pieces)


class ReusedRecords:
    """A commit or checkpoint record -> the read stage's outputs for its segments (rows untagged,
    the rest tagged), as `read_windows.ReadTaskFn` yields them for a task a resumed run reuses:
    in the read stage itself, so that the job's graph is an uninterrupted run's."""

    def __init__(
        self,
        layout: RecordLayout,
        *,
        output_dir: str,
        progress: ProgressFile,
    ):
        self._layout, self._output_dir = layout, output_dir.rstrip("/")
        self._counters = {
            name: beam.metrics.Metrics.counter("record", name)
            for name in (
                "files_read",
                "files_failed",
                "windows",
                "audio_frames",
                "records_reused",
                "windows_reused",
            )
        }
        self._progress = progress

    def outputs(self, record: Mapping[str, Any]) -> Iterator:
        """The outputs of `record`'s segments; its parts only for a whole task's record (a
        ``continued`` one's task goes on in its parts and commits them whole)."""
        if record["moments"]:
            moments = features_from_json(record["moments"])
            yield beam.pvalue.TaggedOutput(STATS_TAG, moments)
        yield from self._samples(record)
        yield from self._counted(record)

    def _samples(self, record: Mapping[str, Any]) -> Iterator:
        """The sampled rows' bytes, read back from the parts as far as the last of them."""
        sampled = [tuple(k) for k in record["sampled"]][:AUTO_SAMPLE_SIZE]
        if not sampled:
            return
        wanted, last = frozenset(sampled), max(sampled)
        block = min(
            max(READ_BACK_BYTES // max(1, len(record["parts"])), 64 << 10),
            part_ranges.COPY_CHUNK_BYTES,
        )
        firsts = {}  # sampled row key -> its stored row
        for part in record["parts"]:  # each in row order: read as far as the last sampled row
            rows = _part_rows(
                self._part_path(part),
                offset=part.get("offset", 0),
                size=sum(run[2] for run in part["runs"]),
                block_bytes=block,
            )
            for key, feature in itertools.takewhile(lambda row: row[0] <= last, rows):
                if key in wanted:
                    firsts[key] = feature
        for key in sampled:
            if key in firsts:
                yield beam.pvalue.TaggedOutput(SAMPLES_TAG, sample_bytes(firsts[key], self._layout))

    def _part_path(self, part: Mapping[str, Any]) -> str:
        """The part's file in this run's output directory (records hold relative paths)."""
        return f"{self._output_dir}/{part['path']}"

    def _counted(self, record: Mapping[str, Any]) -> Iterator:
        files = record["files"]
        first = int(record["counts"].get("files_read", 0))
        windows = int(record["windows"])
        self._counters["files_read"].inc(first)
        self._counters["audio_frames"].inc(int(record["counts"].get("audio_frames", 0)))
        self._counters["files_failed"].inc(len(record["errors"]))
        self._counters["windows"].inc(windows)
        self._counters["records_reused"].inc()
        self._counters["windows_reused"].inc(windows)
        failed = len(record["errors"])
        self._progress.add(files=first, failed=failed, windows=windows, reused=windows)
        for start in range(0, len(files), JSON_PIECE_ITEMS):  # as the read stage emits them:
            lines = map(fmt.table_line, files[start : start + JSON_PIECE_ITEMS])  # lines, packed
            yield beam.pvalue.TaggedOutput(FILES_TAG, packed_lines(lines))
        for e in record["errors"]:
            yield beam.pvalue.TaggedOutput(ERRORS_TAG, e)
        if record.get("continued"):
            return
        for p in record["parts"]:
            part = {**p, "path": self._part_path(p), "runs": [tuple(r) for r in p["runs"]]}
            yield beam.pvalue.TaggedOutput(PARTS_TAG, part)


class Summaries(Sequence):
    """A read task's file summaries, in order: its earlier run's (dicts, from the records it
    resumes), then this run's, kept as (segment position, windows) and made into dicts by
    `summary` when read. A whole task's list is held to its end for its commit record: 16 bytes
    a file, where dicts took over ten times more.
    Slices are lists of dicts."""

    def __init__(
        self,
        prior: Sequence[dict],
        segments: Sequence[Segment],
        summary: Callable[[Segment, int], dict],
    ):
        self._prior, self._segments, self._summary = list(prior), segments, summary
        self._positions, self._windows = array.array("q"), array.array("q")

    def append(self, position: int, windows: int) -> None:
        self._positions.append(position)
        self._windows.append(windows)

    def __len__(self) -> int:
        return len(self._prior) + len(self._positions)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = i + len(self) if i < 0 else i
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i < len(self._prior):
            return self._prior[i]
        j = i - len(self._prior)
        return self._summary(self._segments[self._positions[j]], self._windows[j])


class TaskRecords:
    """What a read task has done, for its commit record and its checkpoints' records
    (`commit_record`): whole-task lists (a continued task's begin with its earlier run's, from
    `ReadTask.resumed`), counts as the read stage's counters count, the analysed rows' moments
    (of `moment_keys`), and where the last checkpoint cut them."""

    def __init__(
        self,
        output_dir: str,
        task: ReadTask,
        moment_shapes: Mapping[str, Sequence[int]],
        *,
        summary: Callable[[Segment, int], dict],
    ):
        self._output_dir, self._task = output_dir, task
        self._moment_keys = tuple(moment_shapes)
        self._values_per_row = {k: math.prod(shape) for k, shape in moment_shapes.items()}
        prior = task.resumed
        self.files = Summaries([f for r in prior for f in r["files"]], task.segments, summary)
        self.errors: list[dict] = [e for r in prior for e in r["errors"]]
        # AUTO compression: row keys of the first rows of the task's first segments
        self.sampled: list[list[int]] = [list(k) for r in prior for k in r["sampled"]]
        self._counts = {  # files_read, audio_frames: as read_windows' counters count them
            key: sum(int(r["counts"].get(key, 0)) for r in prior)
            for key in ("files_read", "audio_frames")
        }
        self._piece: FeatureMoments = {}  # analysed rows' moments since the last checkpoint
        self._total: FeatureMoments = {}  # the whole task's (its earlier run's pieces too)
        for r in prior:
            self._total = add_features(self._total, features_from_json(r["moments"]))
        self.written = 0  # the part writer's bytes at the last checkpoint
        self._at = self._mark(segment=0)

    def _mark(self, *, segment: int) -> dict[str, Any]:
        return {
            "segment": segment,  # of task.segments
            "files": len(self.files),
            "errors": len(self.errors),
            "sampled": len(self.sampled),
            "counts": dict(self._counts),
        }

    def analysed(self, sums: Mapping[str, tuple[Any, Any]], num_rows: int) -> None:
        """Rows handed to the analysis, by their `moments.row_sums` per feature: their moments
        count in the current piece."""
        if not self._moment_keys or not num_rows:
            return
        moments = {
            key: Moments.of_row_sums(*sums[key], values_per_row=self._values_per_row[key])
            for key in self._moment_keys
        }
        self._piece = add_features(self._piece, moments)

    def file_done(self, position: int, windows: int) -> dict:
        """Segment `position` (of the task's segments) read, `windows` windows; returns its
        summary. A file counts once its first segment is read."""
        self.files.append(position, windows)
        seg = self._task.segments[position]
        if seg.row_start == 0:
            self._counts["files_read"] += 1
            self._counts["audio_frames"] += seg.file.info.num_frames
        return self.files[-1]

    def _take_piece(self) -> FeatureMoments:
        piece = {k: self._piece.get(k, Moments()) for k in self._moment_keys}
        self._piece = {}
        self._total = add_features(self._total, piece)
        return piece

    def checkpoint(self, stop: int, *, parts: list[dict], written: int) -> FeatureMoments:
        """Records the task's segments since the last checkpoint, up to `stop` (of
        `task.segments`), as a piece a resumed run reuses: `parts`, what
        `record_parts.PartWriter.checkpoint` describes, then `written` bytes in all; the parts
        go on. Returns the piece's moments (the read stage hands them to the analysis)."""
        at = self._at
        piece = self._take_piece()
        self._record(
            start=self._task.start + at["segment"],
            stop=self._task.start + stop,
            parts=parts,
            files=self.files[at["files"] :],
            errors=self.errors[at["errors"] :],
            sampled=self.sampled[at["sampled"] :],
            moments=piece,
            counts={k: n - at["counts"][k] for k, n in self._counts.items()},
        )
        self.written = written
        self._at = self._mark(segment=stop)
        return piece

    def commit(self, *, parts: list[dict]) -> FeatureMoments:
        """Records the whole task (its parts committed): supersedes its checkpoints. Returns
        the moments since the last checkpoint (the earlier pieces' went to the analysis)."""
        piece = self._take_piece()
        self._record(
            start=0,
            stop=self._task.start + len(self._task.segments),
            parts=parts,
            files=self.files,
            errors=self.errors,
            sampled=self.sampled,
            moments=self._total,
            counts=self._counts,
        )
        return piece

    def _record(self, **fields: Any) -> None:
        commit_record(self._output_dir, self._task.task_id, **fields)
