"""The plan's per-file lists handed to the job through a file beside the output, not inlined.

`beam.Create(tasks)` pickled every read task (each file's path, header, label, split) into the
submitted pipeline, so the job grew with the corpus (docs/performance.md; Beam's advice is the
same: no large ``Create``, the data belongs in storage). The
launcher now writes such a list once, ``<output_dir>/.tmp/plan/<name>-<sha256[:16]>.pickle``
(`stage`), and the job holds only a `Staged` reference: the path, the list's SHA-256 and its
length. The job's first step reads the file back (`load`): on the worker that runs it, through
the same file I/O as the parts (local paths, gs://).

The file is pickled (read tasks hold headers, annotation arrays and ``--resume`` records: no
other format carries them as they are). A list of read tasks is pickled as columns (`_ReadTasks`:
each field of the files and segments as one list), so pickling it is a few C loops, not a Python
call per file and segment; it reads back as the same objects, a file shared by segments still
one object. A list of files (the labelled inputs of a run planned in the job) is pickled so too
(`_InputFiles`), the paths as one string. Nothing the job did not stage is ever unpickled:
`load` checks the digest the job carries first, so a file changed or replaced after the launcher
wrote it is refused with a line naming it, as Beam's own staged pickles are trusted only because
the job names them.

A runner that runs the job in the launcher's own process (the in-memory DirectRunner) does not
read the file: `load` hands it the launcher's list itself (`stage` keeps it until `release`),
not a second copy of every file's plan.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import pickle
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from replay import storage
from transforms.spec.types import InputFile, ReadTask, Segment
from transforms.stages import atomic

PLAN_DIR = ".tmp/plan"  # under the output directory; a run's .tmp is removed when it ends
# (path, SHA-256) -> the launcher's list, while its job may run in this process (`release`)
_HELD: dict[tuple[str, str], list[Any]] = {}


@dataclasses.dataclass(frozen=True)
class Staged:
    """A list the launcher wrote for the job (`stage`): where, its SHA-256, how many items."""

    path: str
    sha256: str
    count: int


def stage(
    output_dir: str, name: str, items: Sequence[Any], *, held: Sequence[Any] | None = None
) -> Staged:
    """Writes `items` (picklable) for the job, atomically; the reference the job carries.

    Args:
      output_dir: the run's output directory (the file goes under its `PLAN_DIR`).
      name: what the list is (``tasks``, ``errors``): the file name's start.
      items: the list.
      held: what `load` hands a job in this process instead of `items` (items equal to
        theirs, held in less memory); None: `items`.
    """
    staged, data = pickled(output_dir, name, items, held=held)
    write(staged, data)
    return staged


def pickled(
    output_dir: str, name: str, items: Sequence[Any], *, held: Sequence[Any] | None = None
) -> tuple[Staged, bytes]:
    """`stage` but the write: the reference the job carries and the bytes `write` writes (so
    that the job can be built while they are written). Arguments as `stage`'s."""
    items = list(items)
    kinds = set(map(type, items))
    columns = _ReadTasks if kinds == {ReadTask} else _InputFiles if kinds == {InputFile} else None
    data = pickle.dumps(
        items if columns is None else columns(items), protocol=pickle.HIGHEST_PROTOCOL
    )
    digest = hashlib.sha256(data).hexdigest()
    path = f"{output_dir.rstrip('/')}/{PLAN_DIR}/{name}-{digest[:16]}.pickle"
    _HELD[(path, digest)] = items if held is None else list(held)
    return Staged(path=path, sha256=digest, count=len(items)), data


def write(staged: Staged, data: bytes) -> None:
    """Writes the bytes `pickled` made for `staged`, atomically."""
    atomic.write_bytes_atomically(staged.path, data)


def release(staged: Staged) -> None:
    """Forgets the launcher's list `staged` refers to (its job has ended); the file stays."""
    _HELD.pop((staged.path, staged.sha256), None)


def load(staged: Staged) -> list[Any]:
    """The list `staged` refers to, once its bytes are checked against the job's digest.

    Raises:
      ValueError: the file is not the one the launcher wrote (missing, changed, or another
        number of items), naming it.
    """
    held = _HELD.get((staged.path, staged.sha256))
    if held is not None:  # the job runs in the launcher's process: its list, not a copy
        return held
    try:
        data = storage.read_bytes(staged.path)
    except Exception as e:  # noqa: BLE001 - any file system's "not found" / "denied"
        raise ValueError(f"{staged.path}: the job's staged plan cannot be read: {e}") from e
    if hashlib.sha256(data).hexdigest() != staged.sha256:
        raise ValueError(
            f"{staged.path}: the job's staged plan changed after the launcher wrote it "
            "(SHA-256 differs); run the job again"
        )
    items = pickle.loads(data)  # noqa: S301 - the digest the job carries matched: ours
    if len(items) != staged.count:
        raise ValueError(
            f"{staged.path}: {len(items)} items staged, the job expects {staged.count}"
        )
    return items


_FILE_FIELDS = tuple(f.name for f in dataclasses.fields(InputFile))
_SEGMENT_FIELDS = tuple(f.name for f in dataclasses.fields(Segment))  # "file" first
_TASK_FIELDS = tuple(f.name for f in dataclasses.fields(ReadTask))


class _ReadTasks:
    """A list of `ReadTask`s, pickled as the columns of its tasks, segments and files (each
    file once), and unpickled as the list (`_read_tasks`)."""

    def __init__(self, tasks: list[ReadTask]) -> None:
        self.tasks = tasks

    def __reduce__(self) -> tuple[Any, tuple]:
        segments = list(itertools.chain.from_iterable(t.segments for t in self.tasks))
        files = list(map(attrgetter("file"), segments))
        ids = list(map(id, files))
        if len(set(ids)) == len(ids):  # a segment per file: the file's position is its own
            positions: list[int] | range = range(len(files))
        else:  # files cut into several segments: each file once
            files = list({id(f): f for f in files}.values())
            first = {id(f): n for n, f in enumerate(files)}
            positions = list(map(first.__getitem__, ids))
        return _read_tasks, (
            [list(map(attrgetter(name), files)) for name in _FILE_FIELDS],
            [
                list(positions),
                *(list(map(attrgetter(name), segments)) for name in _SEGMENT_FIELDS[1:]),
            ],
            [
                [len(t.segments) if name == "segments" else getattr(t, name) for t in self.tasks]
                for name in _TASK_FIELDS
            ],
        )


class _InputFiles:
    """A list of `InputFile`s, pickled as the columns of their fields, the paths as one string
    (`_joined`), and unpickled as the list (`_input_files`)."""

    def __init__(self, files: list[InputFile]) -> None:
        self.files = files

    def __reduce__(self) -> tuple[Any, tuple]:
        columns = [list(map(attrgetter(name), self.files)) for name in _FILE_FIELDS]
        columns[_PATH] = _joined(columns[_PATH])
        return _input_files, (columns,)


def _joined(paths: list[str]) -> str | list[str]:
    """`paths` as one string, `_PATHS_SEPARATOR` between them, when no path holds it (the list
    as it is else): one string pickles in one copy."""
    joined = _PATHS_SEPARATOR.join(paths)
    if len(paths) < 2 or joined.count(_PATHS_SEPARATOR) != len(paths) - 1:
        return paths
    return joined


def _input_files(columns: list) -> list[InputFile]:
    """The files `_InputFiles` pickled, from the columns of their fields."""
    paths = columns[_PATH]
    if isinstance(paths, str):
        columns[_PATH] = paths.split(_PATHS_SEPARATOR)
    return list(map(InputFile, *columns))


_PATH = _FILE_FIELDS.index("path")
_PATHS_SEPARATOR = "\0"  # in no local path


def _read_tasks(files: list[list], segments: list[list], tasks: list[list]) -> list[ReadTask]:
    """The read tasks `_ReadTasks` pickled: from the columns of their files, segments (the
    file's position) and tasks (the number of segments)."""
    made = list(map(InputFile, *files))
    cut = list(map(Segment, map(made.__getitem__, segments[0]), *segments[1:]))
    out, start = [], 0
    for values in zip(*tasks, strict=True):
        fields = dict(zip(_TASK_FIELDS, values, strict=True))
        count = fields["segments"]
        fields["segments"] = tuple(cut[start : start + count])
        start += count
        out.append(ReadTask(**fields))
    return out
