"""``--append``'s commit protocol: the next version's manifest created exclusively, then switched.

`commit` makes the next version's manifest (`next_manifest`: the old shards and tables, plus the
new ones under their directory), creates ``manifests/<version>.json`` only if no other append
created it first (`create_exclusively`: the commit point, an exclusive create on local disks and
a generation precondition on GCS), replaces ``manifest.json`` by the same bytes
(`switch_latest`) and removes what is not kept (`clean_up`); `finish_commit` completes one a
killed append left between the commit point and the clean-up. The design, `pipelines.append`.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections.abc import Mapping
from typing import Any, NoReturn

from pipelines.append_plan import AppendPlan, manifest_version
from pipelines.config import UsageError
from replay import format as fmt

# What the record job writes that an appended version does not keep; a refreshing one keeps its
# transform (`_TRANSFORM`).
_NOT_KEPT = (fmt.MANIFEST_FILENAME, fmt.SCHEMA_FILENAME, "metadata", fmt.FEATURE_FN_DIR)
_TRANSFORM = (fmt.TRANSFORM_FN_DIR, fmt.TRANSFORMED_METADATA_DIR)


def next_manifest(
    base: Mapping[str, Any],
    added: Mapping[str, Any],
    *,
    data_dir: str,
    created_utc: str,
    transform: str = fmt.FROZEN_TRANSFORM,
) -> dict[str, Any]:
    """The manifest of the version after `base` that adds the dataset `added` (recorded into
    `data_dir`, relative to the dataset) (pure).

    The new version lists every shard of `base`, then `added`'s under `data_dir`, split by
    split; its commits are `base`'s plus one for `added` (with `added`'s own moments); its
    counts are the sums. Classes and options stay `base`'s. The element specs are `base`'s
    with the `transform` frozen, `added`'s (the z-score statistics of the union, which its
    record job computed with `base`'s moments) with ``"refresh"``.

    Raises:
      ValueError: `added` does not hold `base`'s elements (keys, dtypes, shapes, encodings).
    """
    problem = layout_difference(base["elements"], added["elements"])
    if problem is not None:
        raise ValueError(f"the new records do not have the dataset's layout: {problem}")
    commits = fmt.manifest_commits(base)
    commits.append(
        {
            "version": manifest_version(base) + 1,
            "dir": data_dir,
            "mode": fmt.APPEND_MODE,
            "created_utc": created_utc,
            "input_pattern": added["params"]["input_pattern"],
            "num_files": added["num_files"],
            "num_errors": added["num_errors"],
            "num_examples": added["num_examples"],
            "tables": {k: dict(v) for k, v in fmt.manifest_commits(added)[0]["tables"].items()},
            "transform": transform,
            "moments": dict(fmt.manifest_commits(added)[0].get("moments", {})),
        }
    )
    splits = {name: _split(s) for name, s in base["splits"].items()}
    for name, split in added["splits"].items():
        merged = splits.setdefault(name, {"num_examples": 0, "shards": []})
        merged["num_examples"] += split["num_examples"]
        merged["shards"] += [
            dict(shard, filename=f"{data_dir}/{shard['filename']}") for shard in split["shards"]
        ]
    manifest = {k: v for k, v in base.items() if k != "tables"}
    manifest.update(
        format_version=fmt.FORMAT_VERSION,
        dataset_version=manifest_version(base) + 1,
        splits=splits,
        num_examples=sum(c["num_examples"] for c in commits),
        num_files=sum(c["num_files"] for c in commits),
        num_errors=sum(c["num_errors"] for c in commits),
        commits=commits,
        versions=dict(added["versions"]),
    )
    if transform == fmt.REFRESH_TRANSFORM:
        manifest["elements"] = {k: dict(v) for k, v in added["elements"].items()}
    return manifest


def _split(split: Mapping[str, Any]) -> dict[str, Any]:
    return {"num_examples": split["num_examples"], "shards": [dict(s) for s in split["shards"]]}


def layout_difference(base: Mapping[str, Any], added: Mapping[str, Any]) -> str | None:
    """How `added`'s element specs differ from `base`'s, as a phrase (the z-score statistics
    aside: the dataset's are kept); None: the same layout."""
    statistics = ("mean", "var")
    for key in sorted(set(base) | set(added)):
        if key not in base or key not in added:
            return f"key {key!r} is only in the {'new' if key in added else 'stored'} records"
        mine = {k: v for k, v in base[key].items() if k not in statistics}
        theirs = {k: v for k, v in added[key].items() if k not in statistics}
        if mine != theirs:
            return f"key {key!r} is {theirs} (the dataset's: {mine})"
    return None


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def commit(plan: AppendPlan, *, created_utc: str | None = None) -> dict[str, Any]:
    """Commits the recorded append as the next version; returns its manifest.

    The commit point is the exclusive creation of ``manifests/<version>.json``; then
    ``manifest.json`` becomes the same bytes (`switch_latest`), and what is not kept is removed
    (`clean_up`).

    Raises:
      UsageError: another append committed this version first (this append's directory is
        removed: nothing of it stays), or the new records do not have the dataset's layout.
    """
    out = plan.dataset_dir
    data = f"{out}/{plan.data_dir}"
    manifests = f"{out}/{fmt.MANIFESTS_DIR}"
    if _gfile().exists(f"{out}/{fmt.version_manifest_filename(plan.version)}"):
        lost(plan)
    try:
        added = json.loads(_read(f"{data}/{fmt.MANIFEST_FILENAME}"))
    except FileNotFoundError:  # removed by the append that took the version (`clean_up`)
        lost(plan)
    try:
        manifest = next_manifest(
            plan.base,
            added,
            data_dir=plan.data_dir,
            created_utc=created_utc or now_utc(),
            transform=plan.transform,
        )
    except ValueError as e:
        raise UsageError(f"--append: {out}: {e}") from e
    text = json.dumps(manifest, indent=1).encode("utf-8")
    _gfile().makedirs(manifests)
    if plan.version == 2:  # the first append keeps version 1's manifest beside the others
        first = _read(f"{out}/{fmt.MANIFEST_FILENAME}")
        create_exclusively(f"{out}/{fmt.version_manifest_filename(1)}", first, missing_ok=True)
    if not create_exclusively(f"{out}/{fmt.version_manifest_filename(plan.version)}", text):
        lost(plan)
    switch_latest(out, text)
    clean_up(out, manifest)
    return manifest


def lost(plan: AppendPlan) -> NoReturn:
    """Another append committed `plan`'s version first: this one's directory goes (the
    winner's `clean_up` may have removed it while this one's record job ran)."""
    remove_tree(f"{plan.dataset_dir}/{plan.data_dir}", quiet=True)
    raise UsageError(
        f"--append: another append committed version {plan.version} of {plan.dataset_dir} "
        "first; nothing of this one was kept: run it again to append what is still new"
    )


def switch_latest(out: str, text: bytes) -> None:
    """``manifest.json`` := `text` (the newest version's manifest), atomically."""
    from transforms.stages import atomic

    atomic.write_bytes_atomically(f"{out}/{fmt.MANIFEST_FILENAME}", text)


def clean_up(out: str, manifest: Mapping[str, Any]) -> None:
    """After version `manifest` committed: removes what its append's record job wrote for its
    own transform (a clean-up killed half-way is done again by the next append's
    `finish_commit`, while it is still the newest), and the directories of appends that can no
    longer commit (killed ones, or ones still running for a version that is now taken: theirs
    fails at its commit)."""
    committed = {c["dir"] for c in fmt.manifest_commits(manifest)}
    latest = manifest_version(manifest)
    for c in fmt.manifest_commits(manifest)[-1:]:
        if c["mode"] == fmt.APPEND_MODE:
            kept = c.get("transform") == fmt.REFRESH_TRANSFORM  # its transform is the version's
            for name in _NOT_KEPT + (() if kept else _TRANSFORM):
                remove_tree(f"{out}/{c['dir']}/{name}", quiet=True)
    appends = f"{out}/{fmt.APPENDS_DIR}"
    gfile = _gfile()
    names = [n.rstrip("/") for n in gfile.listdir(appends)] if gfile.isdir(appends) else []
    for name in sorted(names):
        version = _token_version(name)
        doomed = version is not None and version <= latest  # its version is taken
        if doomed and f"{fmt.APPENDS_DIR}/{name}" not in committed:
            remove_tree(f"{appends}/{name}", quiet=True)


def finish_commit(out: str) -> None:
    """Finishes what a killed append left after its commit point: ``manifest.json`` becomes the
    newest committed version's (``manifests/<v>.json``), then `clean_up`. Nothing to do on a
    dataset never appended to."""
    manifests = f"{out}/{fmt.MANIFESTS_DIR}"
    if not _gfile().isdir(manifests):
        return
    pointer = latest = _read(f"{out}/{fmt.MANIFEST_FILENAME}")
    version = manifest_version(json.loads(latest))
    while _gfile().exists(f"{out}/{fmt.version_manifest_filename(version + 1)}"):
        version += 1
        latest = _read(f"{out}/{fmt.version_manifest_filename(version)}")
    if pointer != latest:
        switch_latest(out, latest)
    clean_up(out, json.loads(latest))


def _token_version(name: str) -> int | None:
    """The version an append directory's token targets (``v3-...`` -> 3); None: not a token."""
    head = name.split("-", 1)[0]
    return int(head[1:]) if head[:1] == "v" and head[1:].isdigit() else None


def create_exclusively(path: str, data: bytes, *, missing_ok: bool = False) -> bool:
    """Creates `path` holding `data`, complete or not at all; False when it exists already
    (`missing_ok`: then it is left as it is).

    Locally a temporary file is hard-linked into place: the link fails when the name exists.
    On GCS the object is written with the precondition ``ifGenerationMatch=0``, which the
    server refuses when the object exists; an object appears whole or not at all.
    """
    if path.startswith("gs://"):
        return _create_gcs_object(path, data) or missing_ok
    from transforms.stages import atomic

    tmp = atomic.temp_name(path)
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        return missing_ok
    finally:
        os.remove(tmp)
    return True


def _create_gcs_object(path: str, data: bytes) -> bool:
    """Uploads `data` to the gs:// `path` unless an object is there (False then)."""
    from google.api_core import exceptions
    from google.cloud import storage

    bucket, _, name = path.removeprefix("gs://").partition("/")
    blob = storage.Client().bucket(bucket).blob(name)
    try:
        blob.upload_from_string(data, if_generation_match=0)
    except exceptions.PreconditionFailed:
        return False
    return True


def _gfile() -> Any:
    import tensorflow as tf  # the dataset's file system (transforms.stages.atomic)

    return tf.io.gfile


def _read(path: str) -> bytes:
    """The bytes of `path` (FileNotFoundError when it is missing)."""
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path, "rb") as fh:
            return fh.read()
    except tf.errors.NotFoundError as e:
        raise FileNotFoundError(path) from e


def remove_tree(path: str, *, quiet: bool = False) -> None:
    """Removes the file or directory `path`, if there. `quiet`: a failure (another process
    writing into it) is logged, not raised: what is left is removed by a later append."""
    import tensorflow as tf

    gfile = _gfile()
    try:
        if gfile.isdir(path):
            gfile.rmtree(path)
        elif gfile.exists(path):
            gfile.remove(path)
    except (tf.errors.OpError, OSError) as e:
        if not quiet:
            raise
        logging.getLogger("audiorecords").info("--append: %s: not removed yet (%s)", path, e)
