"""Tiny filesystem layer: plain `os` for local paths (no TensorFlow import), tf.io.gfile for URLs.

Any path with a scheme (``gs://``, ``s3://``, ``file://``, ...) goes through `tf.io.gfile`, so
every filesystem TensorFlow can read works; local paths skip importing TensorFlow, which keeps
`replay.load_info` cheap.

One exception: `read_range` on ``gs://`` is an exact ranged GET through google-cloud-storage
(``pip install google-cloud-storage``, the ``gcs`` extra), not TensorFlow's GCS file system,
which reads in blocks of 64 MiB (``GCS_READ_CACHE_BLOCK_SIZE_MB``, read once as TensorFlow
loads): a ranged read of one record would ask for 64 MiB and be sent up to the rest of the
shard. The client is the library's default: Application Default Credentials, or the emulator at
``STORAGE_EMULATOR_HOST`` when that is set; one client a process, shared by its threads.
"""

from __future__ import annotations

import os
import posixpath
import stat
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

# The URL schemes a dataset may live under: those TensorFlow 2.21's file I/O (which writes the
# shards and reads them back in replay) has, "" being a plain local path; "ram" is left out (it
# is one process's memory). tests/unit/test_storage_schemes.py checks them against
# tf.io.gfile.get_registered_schemes(). No s3:// without tensorflow-io, which does not load
# against TensorFlow 2.21.
DATASET_SCHEMES = ("", "file", "gs")

# A gs:// ranged read's retries: google-cloud-storage's (429, 408, 5xx, a reset or timed-out
# connection; an interrupted answer resumed from its last byte), waiting from
# `GCS_RETRY_INITIAL_S` (doubling, jittered, at most 60 s) until `GCS_RETRY_TIMEOUT_S` have passed.
GCS_RETRY_INITIAL_S = 1.0
GCS_RETRY_TIMEOUT_S = 120.0
_gcs_client: tuple[int, object] | None = None  # (the process id it was made in, the client)
_gcs_lock = threading.Lock()


def is_url(path: str) -> bool:
    """Whether `path` has a scheme (``gs://bucket/x``) and so needs tf.io.gfile."""
    return "://" in path


def scheme(path: str) -> str:
    """The URL scheme of `path`, lower case (``"gs"``), or ``""`` for a plain path."""
    return path.split("://", 1)[0].lower() if is_url(path) else ""


def gfile():  # noqa: ANN202 - the tf.io.gfile module
    import tensorflow as tf  # lazy: TensorFlow takes seconds to import

    return tf.io.gfile


def join(directory: str, name: str) -> str:
    """`directory` / `name` for local paths and URLs alike."""
    if is_url(directory):
        return posixpath.join(directory, name)
    return os.path.join(directory, name)


def exists(path: str) -> bool:
    return gfile().exists(path) if is_url(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    return gfile().isdir(path) if is_url(path) else os.path.isdir(path)


def listdir(path: str) -> list[str]:
    """The entry names of directory `path` ([] when it does not exist)."""
    if is_url(path):
        return gfile().listdir(path) if gfile().isdir(path) else []
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def read_text(path: str) -> str:
    """The file's text (UTF-8)."""
    return read_bytes(path).decode("utf-8")


def read_bytes(path: str, *, limit: int | None = None) -> bytes:
    """The file's bytes.

    Raises:
      ValueError: the file is longer than `limit` bytes, or (local paths) not a regular file:
        a FIFO or device would block or never end.
    """
    too_big = ValueError(f"larger than {limit} bytes")
    if is_url(path):
        with gfile().GFile(path, "rb") as f:
            if limit is not None and f.size() > limit:  # refused before reading a byte
                raise too_big
            data = f.read() if limit is None else f.read(limit + 1)
    else:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ValueError("not a regular file")
        with open(path, "rb") as f:
            if limit is not None and os.fstat(f.fileno()).st_size > limit:
                raise too_big
            data = f.read() if limit is None else f.read(limit + 1)  # a file that grew since
    if limit is not None and len(data) > limit:
        raise too_big
    return data


def read_range(path: str, offset: int, length: int) -> bytes:
    """`length` bytes of the file from byte `offset` (fewer at its end): one exact ranged GET
    on ``gs://`` (google-cloud-storage, retried: module docstring), one ranged read through
    TensorFlow's file system otherwise (`replay.records` reads local shards itself).

    Raises:
      FileNotFoundError: (gs://) no such object.
      OSError: (gs://) the read failed, after its retries; the message names `path`.
      ImportError: (gs://) google-cloud-storage is not installed.
    """
    if scheme(path) == "gs":
        return _gcs_read_range(path, offset, length)
    with gfile().GFile(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def _gcs():  # noqa: ANN202 - a google.cloud.storage.Client
    """This process's google-cloud-storage client, made on first use (a forked child makes its
    own: the parent's connections are not the child's to use)."""
    global _gcs_client
    made = _gcs_client
    if made is None or made[0] != os.getpid():
        with _gcs_lock:
            made = _gcs_client
            if made is None or made[0] != os.getpid():
                from google.cloud import storage as gcs  # lazy: a second or two to import

                # project=None: reading objects needs no project (none looked up, none required)
                made = _gcs_client = (os.getpid(), gcs.Client(project=None))
    return made[1]


def _gcs_read_range(path: str, offset: int, length: int) -> bytes:
    """`read_range` of a gs:// object: one GET of bytes ``offset .. offset + length - 1``."""
    if length <= 0:
        return b""
    try:
        from google.api_core import exceptions
        from google.api_core.retry import Retry
        from google.cloud.storage.retry import DEFAULT_RETRY
    except ImportError as e:
        raise ImportError(
            f"{path}: reading gs:// by byte range needs google-cloud-storage "
            "(pip install google-cloud-storage)"
        ) from e
    bucket, _, name = path.split("://", 1)[1].partition("/")
    retry: Retry = DEFAULT_RETRY.with_delay(initial=GCS_RETRY_INITIAL_S).with_timeout(
        GCS_RETRY_TIMEOUT_S
    )
    last = offset + length - 1
    try:
        return (
            _gcs()
            .bucket(bucket)
            .blob(name)
            .download_as_bytes(
                start=offset, end=last, raw_download=True, checksum=None, retry=retry
            )
        )
    except exceptions.RequestRangeNotSatisfiable:  # `offset` at or past the object's end
        return b""
    except exceptions.NotFound as e:
        raise FileNotFoundError(f"{path}: no such object") from e
    except Exception as e:  # the client's error after its retries: any exception type
        reason = " ".join(f"{type(e).__name__}: {e}".split())
        raise OSError(f"{path}: reading bytes {offset}-{last} failed: {reason}") from e


def outside(root: str, path: str) -> str | None:
    """Where `path` really leads when that is outside directory `root` (local paths, through
    symlinks and ``..``), else None. URLs have no symlinks: always None."""
    if is_url(root) or is_url(path):
        return None
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    return None if os.path.commonpath([real_root, real]) == real_root else real


def size(path: str) -> int | None:
    """The file's size in bytes, or None when it does not exist (one cheap stat)."""
    if not is_url(path):
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            return None
    import tensorflow as tf

    try:
        return tf.io.gfile.stat(path).length
    except tf.errors.NotFoundError:
        return None


def sizes(paths: Sequence[str]) -> list[int | None]:
    """`size` of each path; remote stats run in parallel (one round trip each on GCS / S3)."""
    if len(paths) <= 4 or not any(is_url(p) for p in paths):
        return [size(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(32, len(paths))) as pool:
        return list(pool.map(size, paths))
