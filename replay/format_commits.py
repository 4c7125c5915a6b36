"""The format's versions and commits (format version 5, `replay.format`): where each commit's files
are (``appends/<token>/``, ``manifests/<v>.json``), the names and rules of commit directories,
modes and an append's transform; importable from `replay.format` too.

Versions and commits (format version 5). A dataset grows by appending: each append records only
new inputs into a directory of its own, ``appends/<token>/`` (`APPENDS_DIR`; the token matches
`COMMIT_TOKEN_RE`, one path segment), and commits a new *dataset version*. The manifest's
``dataset_version`` (an integer >= 1: the first record is version 1, each append adds 1) and
``commits``, one entry per version 1 .. ``dataset_version`` in order, describe them. Commit i
(0-based) has:

- ``version``: i + 1;
- ``dir``: ``""`` for version 1 (the dataset directory itself), else ``appends/<token>``
  (`commit_dir_problem`: no other form, so no ``..``, absolute path, backslash or empty
  segment);
- ``mode``: ``"record"`` for version 1, ``"append"`` after (`COMMIT_MODES`);
- ``created_utc`` (ISO-8601), ``input_pattern`` (the run's input glob);
- ``num_files``, ``num_errors``, ``num_examples``: that commit's own counts (integers >= 0;
  ``num_examples`` is the sum of the commit's shards over every split);
- ``tables``: ``{"files": {"num_bytes", "sha256"}, "errors": {...}}`` of that commit's own
  source tables, ``<dir>/files.jsonl`` and ``<dir>/errors.jsonl`` (the root ones for ``""``).

A version 5 manifest has no top-level ``tables``; its ``num_files``, ``num_errors`` and
``num_examples`` are the sums over its commits. ``splits[split].shards`` is the union of every
commit's shards of that split, in commit order: a shard of commit directory D is named
``D/<name>`` (``<name>`` alone for ``""``), where ``<name>`` is `shard_filename` of its index and
count *within that commit's shards of the split*; its record offsets file is
``D/offsets/<name>.offsets`` (`offsets_filename`). The reader's source tables are the
concatenation of every commit's, in commit order. ``transform_fn/``, ``feature_fn/`` and the
other metadata stay at the root (version 1's).

Each version's manifest is also stored, immutable, as ``manifests/<v>.json``
(`version_manifest_filename`). An append writes its files, then ``manifests/<v>.json`` of the
version it appends to when that is absent, then creates ``manifests/<v+1>.json`` exclusively
and whole (the commit point: written aside, then linked into place, or uploaded only if absent;
a reader takes any file there for the committed version), then replaces ``manifest.json`` with
the same bytes. A reader takes
``manifest.json`` and then, while ``manifests/<v+1>.json`` exists, that one (an append killed
between its commit point and the pointer update is committed). A dataset never appended to has
no ``manifests/`` directory: its manifest.json is version 1. A format version <= 4 dataset is
version 1 with one implicit commit (`implicit_commit`). Shards are never rewritten, so a reader
holding version v's manifest keeps reading exactly v while later versions are committed.
"""

from __future__ import annotations

import re

MANIFESTS_DIR = "manifests"  # v5: <v>.json, version v's manifest (`version_manifest_filename`)
APPENDS_DIR = "appends"  # v5: <token>/, one appended commit's files
COMMIT_TOKEN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # fullmatch: one segment
RECORD_MODE = "record"  # version 1's commit
APPEND_MODE = "append"  # every later commit
COMMIT_MODES = (RECORD_MODE, APPEND_MODE)
# an append's ``transform``: frozen keeps the transform before it; refresh brings its own
# (``<dir>/transform_fn/``, the statistics of the union in the version's elements)
FROZEN_TRANSFORM, REFRESH_TRANSFORM = "frozen", "refresh"
APPEND_TRANSFORMS = (FROZEN_TRANSFORM, REFRESH_TRANSFORM)


def split_shard_filename(filename: str) -> tuple[str, str]:
    """``(commit dir, shard name)`` of a manifest's shard `filename` (format version 5):
    ``("appends/t", "x.tfrecord-...")`` for ``appends/t/x.tfrecord-...``, ``("", filename)``
    for a name without a directory."""
    directory, _, name = filename.rpartition("/")
    return directory, name


def commit_file(directory: str, name: str) -> str:
    """The path, relative to the dataset directory, of file `name` of the commit whose
    directory is `directory` (``""``: the dataset directory itself)."""
    return f"{directory}/{name}" if directory else name


def append_dir(token: str) -> str:
    """The commit directory of an append named `token`: ``appends/<token>``."""
    problem = commit_token_problem(token)
    if problem:
        raise ValueError(f"append token {token!r} {problem}")
    return f"{APPENDS_DIR}/{token}"


def commit_token_problem(token: str) -> str | None:
    """Why `token` cannot name an append's directory, or None when it can."""
    if not isinstance(token, str) or not COMMIT_TOKEN_RE.fullmatch(token):
        return f"does not match {COMMIT_TOKEN_RE.pattern}"
    return None


def commit_dir_problem(directory: str, *, version: int) -> str | None:
    """Why `directory` is not a valid ``dir`` of commit `version` (format version 5), or None.

    Version 1's is ``""``; every later one's is ``appends/<token>`` with a token matching
    `COMMIT_TOKEN_RE`: one segment, so no ``..``, absolute path, backslash or empty segment.
    """
    if version == 1:
        return None if directory == "" else "must be '' (version 1 is the dataset directory)"
    prefix = f"{APPENDS_DIR}/"
    if not directory.startswith(prefix) or commit_token_problem(directory[len(prefix) :]):
        return f"is not {prefix}<token> (<token> matching {COMMIT_TOKEN_RE.pattern})"
    return None


def version_manifest_filename(version: int) -> str:
    """Version `version`'s immutable manifest, relative to the dataset directory (format
    version 5): ``manifests/<version>.json``."""
    if type(version) is not int or version < 1:
        raise ValueError(f"a dataset version is an integer >= 1, not {version!r}")
    return f"{MANIFESTS_DIR}/{version}.json"
