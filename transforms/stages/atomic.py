"""One way to write a dataset's files: under a temporary name, renamed into place when complete.

TFDS's ``incomplete_files`` is the model: `incomplete_file` yields a temporary path; when the
block ends the file is renamed to its final name (replacing a file there: a retried task writes
the same bytes again), and when the block raises it is deleted, so no reader ever sees a
half-written file under its final name. Part files, shards, the source tables and the manifest
are all written this way (record_parts, write_shards, finalize).

File system, chosen deliberately: a dataset is written where TensorFlow's file I/O can read it,
because replay reads it with that (`replay.storage.DATASET_SCHEMES`: local paths and gs://; the
config refuses any other `--output_dir`). Local paths go through `os` (a rename within a file
system is atomic); URLs through `tf.io.gfile` (on GCS a rename is one copy and one delete per
object: the object appears whole or not at all). Beam's FileSystems, which reads the inputs
(gs://, s3://, ...), renames on GCS through the JSON batch API, which GCS emulators lack, and
would give the writes a second client with its own credentials and retries.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import uuid
from collections.abc import Iterable, Iterator
from typing import IO

from replay.storage import gfile, is_url


def temp_name(path: str, *, directory: str | None = None) -> str:
    """A fresh temporary name for `path`: beside it, or in `directory` (unique per call:
    concurrent retries never share one)."""
    name = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    return name if directory is None else f"{directory.rstrip('/')}/{posixpath.basename(name)}"


def open_write(path: str) -> IO[bytes]:
    """A new binary file at `path` (truncated if it exists; local parent directories made),
    for writing."""
    if is_url(path):  # object stores have no directories to make
        fh = gfile().GFile(path, "wb")
        fh.write(b"")  # GFile creates its object at the first write: an empty file is one too
        return fh
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return open(path, "wb")  # noqa: SIM115 - the caller closes it


def rename(src: str, dst: str) -> None:
    """Moves `src` to `dst`, replacing `dst` if it exists."""
    if is_url(src) or is_url(dst):
        gfile().rename(src, dst, overwrite=True)
    else:
        os.replace(src, dst)


def remove_quietly(path: str) -> None:
    """Deletes `path` if it exists; errors are ignored (used while another error propagates)."""
    with contextlib.suppress(Exception):
        if is_url(path):
            gfile().remove(path)
        else:
            os.remove(path)


@contextlib.contextmanager
def incomplete_file(path: str, *, tmp: str | None = None) -> Iterator[str]:
    """Yields a temporary path to write `path` to; renamed to `path` when the block completes,
    deleted when it raises.

    Args:
      path: the final name.
      tmp: the temporary name (default `temp_name(path)`, beside it).
    """
    tmp = tmp or temp_name(path)
    try:
        yield tmp
    except BaseException:
        remove_quietly(tmp)
        raise
    rename(tmp, path)


def write_atomically(path: str, pieces: Iterable[bytes], *, tmp: str | None = None) -> None:
    """`path` := `pieces` joined, written one at a time through `incomplete_file` (a file too
    big to be joined in memory first). No piece is one empty write: on GCS a file never
    written to is no object."""
    with incomplete_file(path, tmp=tmp) as name, open_write(name) as fh:
        written = False
        for piece in pieces:
            fh.write(piece)
            written = True
        if not written:
            fh.write(b"")


def write_bytes_atomically(path: str, data: bytes, *, tmp: str | None = None) -> None:
    """`path` := `data`, through `incomplete_file`."""
    write_atomically(path, (data,), tmp=tmp)
