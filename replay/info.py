"""`load_info`: what an audiorecords dataset holds, from its manifest, without reading a shard.

Importing this module (and calling `load_info` on a local path) does not import TensorFlow; only
`DatasetInfo.element_spec` and URLs (``gs://...``) do.

Dataset versions (format version 5, `replay.format`, "Versions and commits"): `load_info` reads
the latest version (``manifest.json``, or ``manifests/<v+1>.json`` while one exists past it) or,
with ``version=v``, version v's stored manifest. A `DatasetInfo` is one version: its shards and
tables are that version's, and stay readable while later versions are appended.

Here: `load_info` (the dataset directory checked, the version's manifest found) and
`available_versions`. The view it returns, `DatasetInfo` (and `ShardInfo`), and the reading of
a manifest file are `replay.dataset_info`'s, importable from here.
"""

from __future__ import annotations

import os
import re

from replay import format as fmt
from replay import storage
from replay.dataset_info import (  # noqa: F401 - DatasetInfo, ShardInfo, parse_manifest re-exported
    DatasetInfo,
    ShardInfo,
    check_version,
    parse_manifest,
    read_manifest,
)
from replay.errors import DatasetNotFoundError, VersionNotFoundError


def load_info(path: str | os.PathLike, *, version: int | None = None) -> DatasetInfo:
    """Read and validate a dataset's manifest.json (or a version's stored manifest).

    Args:
      path: the dataset directory: a local path or any tf.io.gfile URL (``gs://bucket/out``).
      version: the dataset version to read (`DatasetInfo.version`; format version 5: each
        append adds one); None: the latest, ``manifest.json``, or ``manifests/<v+1>.json``
        while one exists past it (an append killed after its commit point). Version v is
        ``manifests/<v>.json``, or manifest.json when that is version v (version 1 of a
        dataset never appended to).

    Returns:
      A read-only `DatasetInfo` of that version.

    Raises:
      DatasetNotFoundError: `path` does not exist, is not a directory, or is a URL whose
        scheme TensorFlow's file I/O has no file system for (``s3://``).
      IncompleteDatasetError: no manifest.json, an unreadable one, or one not marked complete.
      ManifestError: a manifest this reader does not understand (e.g. a newer format_version).
      VersionNotFoundError: no version `version` (the message lists the available ones), or a
        stored manifest of another version than its name says.
      TypeError: `version` is not an integer.
    """
    path = os.fspath(path)
    if version is not None and type(version) is not int:
        raise TypeError(f"version must be an integer, not {type(version).__name__}")
    _check_directory(path)
    manifest_path = storage.join(path, fmt.MANIFEST_FILENAME)
    if version is not None:
        if version >= 1:
            stored = storage.join(path, fmt.version_manifest_filename(version))
            if storage.exists(stored):
                return check_version(read_manifest(path, stored), version, stored)
        info = read_manifest(path, manifest_path)
        if info.version != version:
            raise VersionNotFoundError(
                f"{path}: no dataset version {version!r}; available versions: "
                f"{available_versions(path, info.version)}"
            )
        return info
    info = read_manifest(path, manifest_path)
    while True:  # a committed version past the pointer: an append killed before updating it
        stored = storage.join(path, fmt.version_manifest_filename(info.version + 1))
        if not storage.exists(stored):
            return info
        info = check_version(read_manifest(path, stored), info.version + 1, stored)


def available_versions(path: str, latest: int) -> list[int]:
    """The dataset versions of the dataset at `path`: those stored in ``manifests/`` and
    `latest`, manifest.json's (format version 5), sorted."""
    stored = re.compile(r"([1-9][0-9]{0,8})\.json")
    names = storage.listdir(storage.join(path, fmt.MANIFESTS_DIR))
    found = {int(m[1]) for m in map(stored.fullmatch, names) if m}
    return sorted(found | {latest})


def _check_directory(path: str) -> None:
    """Refuses a `path` that is no dataset directory `load_info` can read."""
    if storage.scheme(path) not in storage.DATASET_SCHEMES:
        raise DatasetNotFoundError(
            f"{path}: replay reads with TensorFlow's file I/O, which has no "
            f"{storage.scheme(path)}:// file system (it reads gs:// and local or mounted paths)"
        )
    if not storage.isdir(path):
        what = "is not a directory" if storage.exists(path) else "does not exist"
        raise DatasetNotFoundError(f"{path}: dataset directory {what}")
