"""Exceptions raised by `replay`; every message names the dataset path or shard file involved."""

from __future__ import annotations

from replay import format as fmt


class ReplayError(Exception):
    """Base class of every error `replay` raises itself."""


class DatasetNotFoundError(ReplayError, FileNotFoundError):
    """The dataset path does not exist or is not a directory."""


class IncompleteDatasetError(ReplayError):
    """The directory has no complete manifest.json: a record run still writing, or one that died.

    The pipeline writes manifest.json last, atomically and marked ``"complete": true``; without it
    the shards beside it may be partial.
    """


class ManifestError(ReplayError, fmt.FormatError):
    """manifest.json is not one this reader understands (e.g. a newer ``format_version``)."""


class VersionNotFoundError(ManifestError):
    """A requested dataset version does not exist (the message lists the available ones), or
    its stored manifest describes another version."""


class ShardError(ReplayError):
    """A shard file listed in the manifest is unusable."""


class MissingShardError(ShardError, FileNotFoundError):
    """A shard listed in the manifest does not exist."""


class ShardSizeError(ShardError):
    """A shard's byte size differs from the manifest's ``num_bytes`` (truncated or rewritten)."""


class CorruptShardError(ShardError):
    """A shard fails its record checksums or holds a different record count (`verify_dataset`)."""


class MalformedRecordError(CorruptShardError):
    """A record that passes its checksums but is not the ``tf.train.Example`` the manifest's
    elements describe (`replay.source`): names the shard, the record and the key. Attributes
    ``shard_path``, ``record`` (its index in the shard) and ``key`` (None: the Example's
    structure)."""


class UnknownSplitError(ReplayError, ValueError):
    """A requested split is not in the manifest (the message lists the available ones)."""


class UnknownFeatureError(ReplayError, ValueError):
    """A requested feature key is not in the manifest (the message lists the available ones)."""


class NoOffsetsError(ReplayError, ValueError):
    """The global read order on a dataset written before record offsets (format version < 4)."""


class SplitSliceError(UnknownSplitError):
    """A split spelling that is no valid slice of the recorded splits (`replay.slicing`):
    malformed, a step, a bound out of range, overlapping parts or no record selected. An
    `UnknownSplitError`, as every split the manifest does not name was before slicing."""


class NoRandomAccessError(ReplayError, ValueError):
    """Random access (`replay.open_records`) to shards that have none: GZIP / ZLIB ones, whose
    records are reached only by decompressing from the shard's start."""
