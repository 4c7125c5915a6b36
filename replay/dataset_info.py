"""`DatasetInfo`: the read-only view of one dataset version's manifest, and `ShardInfo`, one
shard as it lists it; built from a manifest file (`read_manifest`, `parse_manifest`: the bytes
read with a size limit, parsed, validated by `replay.manifest`). Its queries (splits, features,
shards, tensor specs) and checks (shards on disk, source tables, earlier versions) are methods.
`replay.info` finds which manifest to read (`load_info`) and is where users import these from.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from replay import format as fmt
from replay import manifest as schema
from replay import storage
from replay.errors import (
    IncompleteDatasetError,
    ManifestError,
    MissingShardError,
    ShardError,
    ShardSizeError,
    UnknownFeatureError,
    UnknownSplitError,
    VersionNotFoundError,
)
from replay.tables import SourceTables, freeze

if TYPE_CHECKING:
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One shard file as the manifest lists it.

    Attributes:
      split: the split the shard belongs to.
      filename: file name inside the dataset directory (`format.shard_filename`).
      path: full path or URL of the file.
      num_examples: records (windows) in the file.
      num_bytes: the file's size in bytes.
      offsets_path: full path or URL of its record offsets file (format version 4; None
        before: `format.offsets_filename`).
      offsets_sha256: that file's SHA-256 (hex) as the manifest gives it.
      commit: the dataset version whose commit wrote the shard (1 before format version 5).
    """

    split: str
    filename: str
    path: str
    num_examples: int
    num_bytes: int
    offsets_path: str | None = None
    offsets_sha256: str | None = None
    commit: int = 1


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Read-only view of a dataset's manifest.json (see `replay.format` for every field).

    Attributes:
      path: the dataset directory (as given to `load_info`).
      name: dataset name used in shard file names.
      format_version: manifest format version.
      version: the dataset version (``dataset_version``; 1 before format version 5).
      created_utc: when the run finished (ISO-8601).
      compression: NONE, GZIP or ZLIB (`compression_type` is tf.data's argument).
      elements: `format.ElementSpec` of every key of a decoded element, in manifest order.
      classes: the class vocabulary in `target` order.
      splits: split names in manifest order ("all" for a run without splits).
      shards: split -> its `ShardInfo`s in order (format version 5: every commit's, in commit
        order).
      commits: one read-only mapping per version 1 .. `version`, as the manifest's ``commits``
        (`replay.format`); before format version 5 the one implicit commit
        (`format.implicit_commit`).
      params: the record run's options.
      versions: library versions of the record run.
      manifest: the whole manifest, read-only (format version 3: without the source tables).
      sources: the source tables behind `files` and `errors` (`replay.tables.SourceTables`).

    `files` (every decoded input file) and `errors` (every input that failed, with its reason)
    are properties: tuples of read-only mappings (see `replay.format`). From format version 3
    they are files of their own (files.jsonl, errors.jsonl), read and checked on first access;
    `num_files` / `num_errors` count them without reading them.
    """

    path: str
    name: str
    format_version: int
    version: int
    created_utc: str
    compression: str
    elements: Mapping[str, fmt.ElementSpec]
    classes: tuple[str, ...]
    splits: tuple[str, ...]
    shards: Mapping[str, tuple[ShardInfo, ...]] = dataclasses.field(repr=False)
    commits: tuple[Mapping[str, Any], ...] = dataclasses.field(repr=False)
    params: Mapping[str, Any] = dataclasses.field(repr=False)
    versions: Mapping[str, Any] = dataclasses.field(repr=False)
    manifest: Mapping[str, Any] = dataclasses.field(repr=False)
    sources: SourceTables = dataclasses.field(repr=False, compare=False)

    @property
    def files(self) -> tuple[Mapping[str, Any], ...]:
        """Every decoded input file, by index (v3: files.jsonl, read and checked on first use).

        Raises:
          ManifestError: the table is missing, disagrees with the manifest or holds a bad line.
        """
        return self.sources.get("files")

    @property
    def errors(self) -> tuple[Mapping[str, Any], ...]:
        """Every input that failed, with its reason, by path (v3: errors.jsonl, as `files`)."""
        return self.sources.get("errors")

    @property
    def num_files(self) -> int:
        """len(files), without reading the table."""
        return self.sources.count("files")

    @property
    def num_errors(self) -> int:
        """len(errors), without reading the table."""
        return self.sources.count("errors")

    def check_tables(self) -> None:
        """Reads and checks both source tables now (size, SHA-256, every entry), as the first
        access of `files` / `errors` would: every commit's (format version 5).
        `pipelines.verify` runs it.

        Raises:
          ManifestError: names the table file (and line).
        """
        for name in fmt.TABLE_FILENAMES:
            self.sources.get(name)

    def check_versions(self) -> None:
        """Checks every earlier version's stored manifest against this one (format version 5):
        each ``manifests/<v>.json`` exists and validates, describes version v, has the same
        elements (the z-score statistics aside, after an append that refreshed them), classes,
        name and compression, lists this version's first v commits, and its
        shards of each split are exactly this version's shards of those commits, in order.
        `pipelines.verify` and `replay.verify_dataset` run it. Nothing to check for version 1.

        Raises:
          ManifestError: the first problem, naming the stored manifest.
        """
        if self.version == 1:
            return
        for version in range(1, self.version + 1):
            stored = storage.join(self.path, fmt.version_manifest_filename(version))
            if not storage.exists(stored):
                raise VersionNotFoundError(
                    f"{stored}: missing: version {version} of {self.version} has no stored manifest"
                )
            older = read_manifest(self.path, stored)
            check_version(older, version, stored)
            problem = _history_problem(older, self)
            if problem:
                raise ManifestError(f"{stored}: {problem}")

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def compression_type(self) -> str:
        """`compression` spelled as tf.data's ``compression_type`` ("" for NONE)."""
        return fmt.tf_compression_type(self.compression)

    @property
    def element_spec(self) -> dict[str, tf.TensorSpec]:
        """`tf.TensorSpec` of every key of an unbatched element (imports TensorFlow)."""
        return self.tensor_specs()

    def tensor_specs(self, features: str | Sequence[str] | None = None) -> dict[str, tf.TensorSpec]:
        """`tf.TensorSpec` of each key in `features` (default: all keys)."""
        import tensorflow as tf

        return {
            key: tf.TensorSpec(shape=spec.shape, dtype=tf.as_dtype(spec.dtype))
            for key, spec in self.select_features(features).items()
        }

    def num_examples(self, split: str | Sequence[str] | None = None) -> int:
        """Examples (windows) in `split` (a name or a list of names; None: all splits); of a
        sliced split (``"train[:10%]"``): `replay.slicing.num_examples`."""
        return sum(shard.num_examples for shard in self.shard_list(split))

    def shard_list(self, split: str | Sequence[str] | None = None) -> list[ShardInfo]:
        """The shards of `split` (a name or a list of names; None: all splits), in order; the
        records of a sliced split (``"train[:10%]"``): `replay.slicing.split_spans`."""
        return [shard for name in self.select_splits(split) for shard in self.shards[name]]

    def select_splits(self, split: str | Sequence[str] | None = None) -> list[str]:
        """Validated split names (None: all); raises UnknownSplitError naming the available ones."""
        if split is None:
            return list(self.splits)
        names = [split] if isinstance(split, str) else list(dict.fromkeys(split))
        unknown = [name for name in names if name not in self.shards]
        if unknown or not names:
            hint = ""
            if any(isinstance(n, str) and set(n) & set("[]+") for n in unknown):
                hint = " (a slice such as 'train[:10%]' is resolved by replay.slicing)"
            raise UnknownSplitError(
                f"{self.path}: unknown split(s) {unknown or names!r}; "
                f"available splits: {list(self.splits)}{hint}"
            )
        return names

    def select_features(
        self, features: str | Sequence[str] | None = None
    ) -> dict[str, fmt.ElementSpec]:
        """Specs of the keys in `features` (None: all), in manifest order.

        Raises:
          UnknownFeatureError: a key is not in the manifest (the message lists the available ones).
        """
        if features is None:
            return dict(self.elements)
        wanted = {features} if isinstance(features, str) else set(features)
        unknown = sorted(wanted - set(self.elements))
        if unknown or not wanted:
            raise UnknownFeatureError(
                f"{self.path}: unknown feature(s) {unknown or sorted(wanted)!r}; "
                f"available features: {list(self.elements)}"
            )
        return {key: spec for key, spec in self.elements.items() if key in wanted}

    def check_shards(self, split: str | Sequence[str] | None = None) -> None:
        """Stat every shard of `split`: each must exist with the manifest's byte size.

        One stat per shard (in parallel for URLs); no shard is opened.

        Raises:
          MissingShardError: a shard does not exist (names it).
          ShardSizeError: a shard's size differs from the manifest's num_bytes (names it).
        """
        self.check_shard_files(self.shard_list(split))

    def check_shard_files(self, shards: Sequence[ShardInfo]) -> None:
        """`check_shards` of these shards (of a sliced split, `replay.slicing.split_spans`').

        Raises:
          MissingShardError, ShardSizeError, ShardError: as `check_shards`.
        """
        self.check_paths(shards)
        sizes = storage.sizes([shard.path for shard in shards])
        missing = [shard.path for shard, size in zip(shards, sizes, strict=True) if size is None]
        if missing:
            raise MissingShardError(
                f"{self.path}: {len(missing)} shard(s) listed in the manifest are missing: "
                f"{_names(missing)}"
            )
        for shard, size in zip(shards, sizes, strict=True):
            if size != shard.num_bytes:
                raise ShardSizeError(
                    f"{shard.path}: shard is {size} bytes but the manifest says {shard.num_bytes} "
                    "(truncated or rewritten after the run)"
                )

    def check_paths(self, shards: Iterable[ShardInfo]) -> None:
        """Every shard's file must really be inside the dataset directory.

        The manifest's names are plain file names (`replay.manifest`); this also refuses a
        shard that is a symlink (or sits under one) leading out of the directory, so no reader
        opens a file outside the dataset. Local paths only: URLs have no symlinks.

        Raises:
          ShardError: names the shard and where it leads.
        """
        for shard in shards:
            target = storage.outside(self.path, shard.path)
            if target is not None:
                raise ShardError(
                    f"{shard.path}: shard leads outside the dataset directory (to {target})"
                )

    def schema(self) -> Any:
        """The tensorflow_metadata Schema in schema.pbtxt, or None when there is none."""
        path = storage.join(self.path, fmt.SCHEMA_FILENAME)
        if not storage.exists(path):
            return None
        if storage.outside(self.path, path) is not None:
            raise ManifestError(f"{path}: leads outside the dataset directory")
        from google.protobuf import text_format
        from tensorflow_metadata.proto.v0 import schema_pb2

        return text_format.Parse(storage.read_text(path), schema_pb2.Schema())


def _names(paths: Iterable[str], limit: int = 5) -> str:
    paths = list(paths)
    shown = ", ".join(paths[:limit])
    return shown + (f", ... ({len(paths) - limit} more)" if len(paths) > limit else "")


def check_version(info: DatasetInfo, version: int, where: str) -> DatasetInfo:
    """`info`, the manifest stored at `where` as version `version`'s, when it is that version."""
    if info.version != version:
        raise VersionNotFoundError(
            f"{where}: the manifest of dataset version {version} says dataset_version "
            f"{info.version}"
        )
    return info


def _history_problem(older: DatasetInfo, latest: DatasetInfo) -> str | None:
    """Why `older` is not an earlier version of `latest` (`DatasetInfo.check_versions`).

    The z-score statistics may differ when an append after `older` refreshed them."""
    refreshed = any(
        c.get("transform") == fmt.REFRESH_TRANSFORM for c in latest.commits[older.version :]
    )
    for field in ("name", "compression", "elements", "classes", "splits"):
        mine, theirs = getattr(older, field), getattr(latest, field)
        if field == "elements" and refreshed:
            mine, theirs = _without_statistics(mine), _without_statistics(theirs)
        if mine != theirs:
            return f"its {field} differ from version {latest.version}'s"
    keys = ("version", "dir", "mode", *fmt.TABLE_COUNT_KEYS.values(), "num_examples", "tables")
    for i, commit in enumerate(older.commits):
        newer = latest.commits[i]
        differ = [k for k in keys if k in commit and commit[k] != newer.get(k)]
        if differ:
            return f"commits[{i}]: {', '.join(differ)} differ from version {latest.version}'s"
    for split in older.splits:
        kept = [s for s in latest.shards[split] if s.commit <= older.version]
        if list(older.shards[split]) != kept:
            return (
                f"splits.{split}.shards: not version {latest.version}'s shards of commits 1 to "
                f"{older.version} ({len(older.shards[split])} listed, {len(kept)} expected)"
            )
    return None


def _without_statistics(elements: Mapping[str, fmt.ElementSpec]) -> dict[str, Any]:
    """`elements` with each z-score key's statistics left out (its source kept)."""
    return {
        key: spec if spec.z_score is None else (spec.dtype, spec.shape, spec.z_score.source)
        for key, spec in elements.items()
    }


def read_manifest(path: str, manifest_path: str) -> DatasetInfo:
    """The `DatasetInfo` of the manifest file `manifest_path` of the dataset at `path`."""
    if not storage.exists(manifest_path):
        raise IncompleteDatasetError(
            f"{path}: incomplete dataset: no {fmt.MANIFEST_FILENAME} (the record pipeline writes "
            "it last; a run is still writing here, or it died)"
        )
    target = storage.outside(path, manifest_path)
    if target is not None:
        raise ManifestError(f"{manifest_path}: leads outside the dataset directory (to {target})")
    try:
        raw = storage.read_bytes(manifest_path, limit=schema.MAX_MANIFEST_BYTES)
    except ValueError as e:  # not a regular file (a FIFO would block), or too big
        raise ManifestError(f"{manifest_path}: manifest: unreadable ({e})") from e
    return parse_manifest(raw, path=path, manifest_path=manifest_path)


def parse_manifest(raw: bytes, *, path: str, manifest_path: str) -> DatasetInfo:
    """The `DatasetInfo` of manifest.json bytes `raw`, validated completely (`load_info` after
    reading the file; the manifest fuzzers call it directly).

    Raises:
      IncompleteDatasetError: not JSON (a manifest cut short), or not marked complete.
      ManifestError: anything `replay.manifest.validate` refuses.
    """
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IncompleteDatasetError(
            f"{manifest_path}: incomplete dataset: unreadable manifest ({e})"
        ) from e
    except (ValueError, RecursionError) as e:  # a 5,000-digit integer, 100,000 nested lists
        raise ManifestError(f"{manifest_path}: manifest: unreadable ({e})") from e
    schema.validate(manifest, path=manifest_path)  # every field, before anything is built
    return _from_manifest(path, manifest)


def _offsets(path: str, shard: Mapping[str, Any]) -> dict[str, Any]:
    """A shard's record offsets file as `ShardInfo` names it (none before format version 4)."""
    if "offsets" not in shard:
        return {}
    return {
        "offsets_path": storage.join(path, fmt.offsets_filename(shard["filename"])),
        "offsets_sha256": shard["offsets"]["sha256"],
    }


def _from_manifest(path: str, manifest: dict[str, Any]) -> DatasetInfo:
    """The `DatasetInfo` of a manifest `replay.manifest.validate` accepted."""
    elements = fmt.element_specs(manifest)
    commits = fmt.manifest_commits(manifest)
    commit_of = {commit["dir"]: commit["version"] for commit in commits}
    shards = {
        split: tuple(
            ShardInfo(
                split=split,
                filename=shard["filename"],
                path=storage.join(path, shard["filename"]),
                num_examples=shard["num_examples"],
                num_bytes=shard["num_bytes"],
                commit=commit_of[fmt.split_shard_filename(shard["filename"])[0]],
                **_offsets(path, shard),
            )
            for shard in entry["shards"]
        )
        for split, entry in manifest["splits"].items()
    }
    frozen = freeze(manifest)
    return DatasetInfo(
        path=path,
        name=manifest.get("name", fmt.DEFAULT_NAME),
        format_version=manifest["format_version"],
        version=len(commits),
        created_utc=manifest.get("created_utc", ""),
        compression=manifest["compression"],
        elements=MappingProxyType(elements),
        classes=tuple(manifest.get("classes", ())),
        splits=tuple(fmt.split_names(manifest)),
        shards=MappingProxyType(shards),
        commits=freeze(commits),
        params=frozen.get("params", freeze({})),
        versions=frozen.get("versions", freeze({})),
        manifest=frozen,
        sources=SourceTables(path, frozen),
    )
