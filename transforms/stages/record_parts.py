"""Part files: one task's encoded records for one shard, in TFRecord framing.

The read stage encodes each window's ``tf.train.Example`` once and appends it, framed as in a
TFRecord file, to the part file of the shard it belongs to
(``<output_dir>/.tmp/parts/<split>/<shard>/<task>.records``). A part file is therefore a valid
uncompressed TFRecord file, and an uncompressed shard is the byte concatenation of its parts in
task order: the write stage copies bytes and encodes nothing (a shard that is one whole part, as
with the in-memory DirectRunner's single read task, is a hard link to it: nothing is copied).
Each part's description lists its *runs* (consecutive records of one input file, and their byte
length), so the rows of a file that failed part-way (possibly in another task) are skipped
without parsing a record.

TFRecord framing is `transforms.stages.framing`'s; the part files' byte ranges, read back and
copied into shards, are `transforms.stages.part_ranges`'. Here: `PartWriter`, the part files of
one task, and their names (`part_path`).
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
from collections.abc import Sequence
from concurrent.futures import Executor, Future

from replay.storage import is_url
from transforms.stages import atomic
from transforms.stages.framing import FRAME_BYTES, frame, write_pieces

PARTS_DIR = ".tmp/parts"
_AHEAD_WRITES = 4  # record lists waiting for the writer thread (bounds memory)


def part_path(output_dir: str, *, split: str, shard: int, task: int) -> str:
    return f"{output_dir.rstrip('/')}/{PARTS_DIR}/{split}/{shard:05d}/{task:06d}.records"


class PartWriter:
    """The open part files of one task, one per (split, shard) it routes rows to.

    Parts are written under a temporary name (`transforms.stages.atomic`) and renamed by
    `commit`, so a retried task rewrites identical parts and a killed one leaves no part under
    its final name. Used as a context manager, a block that raises leaves no open file and no
    temporary part behind (`abort`), but for the checkpointed bytes of a part (`checkpoint`:
    a resumed run reuses them). With a
    one-thread `executor`, the writes run there in order while the caller goes on (file writes
    release the GIL; the read stage's thread also runs TFT's analysis).

    `continued`: a task a resumed run continues goes on in its earlier run's temporary parts
    (`transforms.stages.task_commits.continued_parts`: split, shard, path, end, runs): each is cut
    to `end` (its last checkpoint) and appended to, so its shard is still one whole part.
    """

    def __init__(
        self,
        output_dir: str,
        task: int,
        *,
        continued: Sequence[dict] = (),
        executor: Executor | None = None,
    ):
        self._output_dir, self._task = output_dir, task
        self._open: dict[tuple[str, int], tuple] = {}
        self._executor = executor
        self._pending: collections.deque[Future] = collections.deque()
        # checkpoints: (split, shard) -> (runs, bytes) of the part at the last one
        self._marks: dict[tuple[str, int], tuple[int, int]] = {}
        self.written = 0  # framed bytes handed to `write` (counted as written: deterministic)
        try:
            for part in continued:
                self._continue(part)
        except BaseException:
            self.abort()
            raise

    def _continue(self, part: dict) -> None:
        """Opens a continued task's part file, cut to its last checkpoint, for appending."""
        if is_url(part["path"]):
            raise ValueError(f"part {part['path']}: no checkpoint on an object store")
        key = (part["split"], part["shard"])
        final = part_path(self._output_dir, split=key[0], shard=key[1], task=self._task)
        fh = open(part["path"], "r+b")  # noqa: SIM115 - closed by commit / abort
        self._open[key] = (final, part["path"], fh, [list(run) for run in part["runs"]])
        self._marks[key] = (len(part["runs"]), part["end"])
        fh.truncate(part["end"])  # what a killed run wrote past its last checkpoint
        fh.seek(part["end"])

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()

    def abort(self) -> None:
        """Closes every open part and deletes it (a task that raised, or was abandoned): no open
        file and no temporary part stays behind; nothing was committed under a final name."""
        while self._pending:
            with contextlib.suppress(Exception):
                self._pending.popleft().result()
        for key, (_, tmp, fh, _) in self._open.items():
            with contextlib.suppress(Exception):
                fh.close()
            if key not in self._marks:  # a checkpointed part stays: its record names it
                atomic.remove_quietly(tmp)
        self._open.clear()

    def write(self, split: str, shard: int, *, path: str, records: Sequence[bytes]) -> None:
        """Appends `records` (serialized Examples of the input file `path`) to a part."""
        size = sum(len(r) for r in records) + FRAME_BYTES * len(records)
        self.write_runs(split, shard, records=records, runs=[[path, len(records), size]])

    def write_runs(
        self, split: str, shard: int, *, records: Sequence[bytes], runs: Sequence[list]
    ) -> None:
        """Appends `records` to a part: consecutive runs of input files, each [path, records,
        framed bytes] in order (what the part's description lists), as one hand-off to the
        writer thread. The part's bytes and runs are those of a `write` per run."""
        self.written += sum(run[2] for run in runs)
        if self._executor is None:
            self._append(split, shard, records, runs)
            return
        self._pending.append(self._executor.submit(self._append, split, shard, records, runs))
        while len(self._pending) > _AHEAD_WRITES:
            self._pending.popleft().result()

    def _append(
        self, split: str, shard: int, records: Sequence[bytes], runs: Sequence[list]
    ) -> None:
        key = (split, shard)
        if key not in self._open:
            final = part_path(self._output_dir, split=split, shard=shard, task=self._task)
            tmp = atomic.temp_name(final)
            fh = atomic.open_write(tmp)
            self._open[key] = (final, tmp, fh, [])
        _, _, fh, done = self._open[key]
        pieces = [piece for record in records for piece in frame(record)]
        size = write_pieces(fh, pieces)
        if size != sum(run[2] for run in runs):
            raise ValueError(
                f"part {key}: runs of {sum(run[2] for run in runs)} bytes, {size} written"
            )
        mark = self._marks.get(key, (0, 0))[0]
        for path, count, run_size in runs:
            if len(done) > mark and done[-1][0] == path:  # one run per file and piece
                done[-1][1] += count
                done[-1][2] += run_size
            else:
                done.append([path, count, run_size])

    def checkpoint(self) -> list[dict]:
        """Flushes every open part and describes what each got since the last checkpoint:
        a *piece* of the task (`transforms.stages.task_commits`).

        A description: split, shard, task, path (the part's temporary file), offset
        (where the piece's bytes begin in it), rows and runs. The files stay open and go on.
        Raises: ValueError on an output that cannot be appended to in place (object stores).
        """
        while self._pending:
            self._pending.popleft().result()
        out = []
        for key, (_, tmp, fh, runs) in sorted(self._open.items()):
            if is_url(tmp):
                raise ValueError(f"part {tmp}: no checkpoint on an object store")
            fh.flush()
            first, offset = self._marks.get(key, (0, 0))
            size = sum(run[2] for run in runs)
            if len(runs) > first:
                piece = [tuple(run) for run in runs[first:]]
                split, shard = key
                out.append(
                    {
                        "split": split,
                        "shard": shard,
                        "task": self._task,
                        "path": tmp,
                        "offset": offset,
                        "rows": sum(run[1] for run in piece),
                        "runs": piece,
                    }
                )
            self._marks[key] = (len(runs), size)
        return out

    def commit(self) -> list[dict]:
        """Closes every part and gives it its final name (a rename; a hard link for a part a
        checkpoint record names, which keeps its temporary name); returns their descriptions,
        sorted.

        A description: split, shard, task, path, rows and runs ([input path, records, bytes]).
        """
        while self._pending:
            self._pending.popleft().result()
        out = []
        for (split, shard), (final, tmp, fh, runs) in sorted(self._open.items()):
            fh.close()
            if (split, shard) in self._marks:  # checkpoint records name it: keep that name
                _link_or_copy(tmp, final)
            else:
                atomic.rename(tmp, final)  # a retried task: the same content replaces it
            del self._open[(split, shard)]
            rows = sum(run[1] for run in runs)
            out.append(
                {
                    "split": split,
                    "shard": shard,
                    "task": self._task,
                    "path": final,
                    "rows": rows,
                    "runs": [tuple(run) for run in runs],
                }
            )
        return out


def _link_or_copy(src: str, dst: str) -> None:
    """`dst` the same bytes as the local file `src`, which keeps its name: a hard link, or a copy
    where the filesystem has none. A retried task: the same content replaces `dst`."""
    atomic.remove_quietly(dst)
    try:
        os.link(src, dst)
    except OSError:
        tmp = atomic.temp_name(dst)
        shutil.copyfile(src, tmp)
        atomic.rename(tmp, dst)
