"""A shard's record offsets (format version 4): read and checked against the manifest.

``offsets/<shard filename>.offsets`` (`replay.format`) holds where each record of the shard
starts, so a reader can start at any record (`replay.global_order`). Like the source tables
(`replay.tables`), the file is untrusted until checked: it must be a regular file inside the
dataset directory, exactly 8 bytes a record the manifest lists, with the manifest's SHA-256.
Whether each offset really starts a record is checked where records are read: TensorFlow's
reader checks every frame's length and data CRC32C, and `replay.shard_check` compares the offsets
with the records it reads.
"""

from __future__ import annotations

import hashlib

from replay import format as fmt
from replay import storage
from replay.errors import CorruptShardError, MissingShardError, NoOffsetsError
from replay.info import DatasetInfo, ShardInfo


def read_offsets(info: DatasetInfo, shard: ShardInfo) -> bytes:
    """The shard's record offsets file, checked (module docstring): little-endian uint64s.

    Raises:
      NoOffsetsError: the dataset's format version has no record offsets.
      MissingShardError: the offsets file is missing.
      CorruptShardError: it is not a regular file inside the dataset, or its size or SHA-256
        differs from the manifest's (names the file).
    """
    path = shard.offsets_path
    if path is None:
        raise NoOffsetsError(
            f"{info.path}: format_version {info.format_version} has no record offsets "
            f"(version {fmt.OFFSETS_VERSION} on): record it again to read it in this order"
        )
    real = storage.outside(info.path, path)
    if real is not None:
        raise CorruptShardError(f"{path}: record offsets lead outside the dataset, to {real}")
    expected = fmt.OFFSET_BYTES * shard.num_examples
    if storage.size(path) is None:
        raise MissingShardError(f"{path}: record offsets missing (shard {shard.filename})")
    try:
        data = storage.read_bytes(path, limit=expected)
    except ValueError as e:
        raise CorruptShardError(f"{path}: record offsets: {e}") from e
    if len(data) != expected:
        raise CorruptShardError(
            f"{path}: record offsets: {len(data)} bytes, the manifest's {shard.num_examples} "
            f"records take {expected}"
        )
    if hashlib.sha256(data).hexdigest() != shard.offsets_sha256:
        raise CorruptShardError(f"{path}: record offsets: SHA-256 differs from the manifest's")
    return data
