"""``--append``: a new version of a finished dataset holding only the inputs it does not hold yet.

An append never rewrites what the dataset holds (the table formats' rule: immutable data files, a
new snapshot per commit, one atomic switch). It runs the ordinary record job on the new files
into ``appends/<token>/`` inside the dataset, with the dataset's own options, class list, signal
dtype and compression (so the records have its layout), numbering the new files after the old
ones and splitting them by the dataset's own rule. Then it commits: the next version's manifest
(`next_manifest`: the old shards and tables, plus the new ones under their directory) is created
as ``manifests/<version>.json``, which fails if another append created it first, and
``manifest.json`` is replaced by the same bytes. A reader holds the manifest it opened, and the
files it names never change: it keeps reading its version while a new one commits.

The transform is *frozen* by default: the dataset's ``transform_fn/``, class list and z-score
statistics are kept as they are; the new records' ``<feature>_norm`` use them. With
``--append_transform refresh`` the record job adds the moments every commit stores to its own in
the z-score analysis, so the new version's statistics are those of the union, exactly; its
``transform_fn/`` stays in its own directory. Class ids never change in either mode.

The token names the work, not the moment: the same append of the same files onto the same
version gets the same directory, so ``--append --resume`` continues a killed one through the
record job's own ``--resume``, and an ``--append`` without it starts that directory again.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from pipelines.config import OPTION_NAMES, RecordConfig, UsageError, require
from pipelines.plan import Continuation
from pipelines.resume import reuse
from replay import format as fmt

# The options an append may set apart from the dataset's: which files, how their failures and
# unknown labels are handled, how many shards the new records fill.
FREE_OPTIONS = ("input_pattern", "unknown_class", "strict", "num_shards", "elements_per_shard")
# a version adds tables and record offsets of its own; the versions before it have them too
_FIRST_APPENDABLE_FORMAT = fmt.OFFSETS_VERSION
# What the record job writes that an appended version does not keep; a refreshing one keeps its
# transform (`_TRANSFORM`).
_NOT_KEPT = (fmt.MANIFEST_FILENAME, fmt.SCHEMA_FILENAME, "metadata", fmt.FEATURE_FN_DIR)
_TRANSFORM = (fmt.TRANSFORM_FN_DIR, fmt.TRANSFORMED_METADATA_DIR)


@dataclasses.dataclass(frozen=True)
class AppendPlan:
    """An append, planned before any record work (`plan_append`)."""

    dataset_dir: str
    base: Mapping[str, Any]  # the manifest of the version appended to
    version: int  # the version this append commits
    config: RecordConfig  # the record job of the new files, into `data_dir`
    continuation: Continuation
    data_dir: str  # relative to `dataset_dir`: appends/<token>
    transform: str = fmt.FROZEN_TRANSFORM  # --append_transform


def manifest_version(manifest: Mapping[str, Any]) -> int:
    """The dataset version a manifest describes (format <= 4: version 1)."""
    return len(fmt.manifest_commits(manifest))


def stored_moments(manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    """The exact moments of every analysed row of the dataset, summed over its commits
    ({feature: Moments}); None when a commit has none stored (written before version 5)."""
    from transforms.stages.moments import from_json, total

    commits = fmt.manifest_commits(manifest)
    if any("moments" not in c for c in commits):
        return None
    return total(from_json(c["moments"]) for c in commits)


def stored_config(params: Mapping[str, Any], **changes: Any) -> RecordConfig:
    """The `RecordConfig` of a dataset's stored ``params``, with `changes`."""
    values = {k: v for k, v in params.items() if k in OPTION_NAMES}
    return RecordConfig(**{**values, **changes})


def option_conflicts(config: RecordConfig, params: Mapping[str, Any]) -> list[str]:
    """The options set in `config` (away from their defaults) that differ from the dataset's
    stored `params`, as ``--name value (the dataset's: value)`` phrases; `FREE_OPTIONS` aside."""
    defaults = {f.name: f.default for f in dataclasses.fields(RecordConfig)}
    own = config.params()
    conflicts = []
    for name, value in own.items():
        if name in FREE_OPTIONS or name not in params:
            continue
        field_default = defaults.get(name)
        if name == "hop_len":
            given = config.hop_len is not None
        elif name == "features":
            given = config.features != defaults["features"]
        else:
            given = value != field_default
        if given and json.dumps(value) != json.dumps(params[name]):
            conflicts.append(f"--{name} {value} (the dataset's: {params[name]})")
    return conflicts


def append_token(
    base: Mapping[str, Any], config: RecordConfig, new: Sequence[Any], *, transform: str
) -> str:
    """``v<version>-<digest>``: the work's name, from the version appended to, the options,
    the transform mode and the new files' (path, size, modification time)."""
    digest = hashlib.sha256()
    for part in (
        json.dumps(base.get("commits") or base.get("tables"), sort_keys=True),
        transform,
        json.dumps(config.params(), sort_keys=True),
        json.dumps([list(s) for s in new]),
    ):
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    return f"v{manifest_version(base) + 1}-{digest.hexdigest()[:16]}"


def read_dataset(path: str) -> tuple[dict[str, Any], dict[str, tuple[int, float] | None]]:
    """A finished dataset's latest manifest, checked by the reader, and every input it holds
    (its files and its errors, of every version): {path: (size, modification time) as
    recorded, or None (an error, or a file recorded before format version 5)}.

    Raises:
      UsageError: no finished dataset there, or one the reader refuses.
    """
    from replay import load_info
    from replay.errors import ReplayError

    try:
        info = load_info(path)
        known: dict[str, tuple[int, float] | None] = {e["path"]: None for e in info.errors}
        for f in info.files:
            stamped = "size_bytes" in f and "modified" in f
            known[f["path"]] = (f["size_bytes"], float(f["modified"])) if stamped else None
    except ReplayError as e:
        raise UsageError(f"--append: {path} holds no finished dataset to append to ({e})") from e
    return json.loads(json.dumps(info.manifest, default=dict)), known


def changed_inputs(
    stamps: Sequence[tuple[str, int, float]], known: Mapping[str, tuple[int, float] | None]
) -> list[str]:
    """The inputs of `stamps` the dataset holds with another size or modification time (pure;
    an input without a recorded stamp counts as unchanged)."""
    return [
        path
        for path, size, modified in stamps
        if known.get(path) is not None and known[path] != (size, float(modified))
    ]


def plan_append(config: RecordConfig) -> AppendPlan | None:
    """Checks `config` against the dataset in its ``output_dir`` and plans the append; None with
    ``--resume`` when every input is in the dataset already (the append was committed).

    Raises:
      UsageError: no finished dataset there, one of a format that cannot grow, an annotated
        dataset, a refresh without stored moments or statistics, an option that would change
        the records' layout, a changed input (without ``--append_changed skip``), or nothing
        new (without ``--resume``).
    """
    from pipelines.plan.reads import match_stamped
    from pipelines.plan.splits import pattern_base

    out = config.output_dir.rstrip("/") or "/"
    if out.startswith("gs://"):
        try:  # the commit's precondition (`create_exclusively`): known now, not after the job
            import google.cloud.storage  # noqa: F401
        except ImportError:
            raise UsageError(
                f"--append: {out}: committing on gs:// needs google-cloud-storage "
                "(pip install 'apache-beam[gcp]')"
            ) from None
    base, known = read_dataset(out)
    require(
        base["format_version"] >= _FIRST_APPENDABLE_FORMAT,
        f"--append: {out} is of format version {base['format_version']}, without the record "
        "offsets every version's shards have; record it again with this version to append to it",
    )
    params = base["params"]
    require(
        not params.get("annotations"),
        f"--append: {out} was recorded with --annotations; appending to an annotated dataset "
        "is not supported yet",
    )
    refresh = config.append_transform == fmt.REFRESH_TRANSFORM
    prior = stored_moments(base) if refresh else None
    require(
        not refresh or prior is not None,
        f"--append_transform refresh: {out} was recorded before format version 5 and stores no "
        "moments to recompute its statistics from; append with the frozen transform, or record "
        "it again",
    )
    require(
        not refresh or any(s.get("encoding") == "z_score" for s in base["elements"].values()),
        f"--append_transform refresh: {out} has no z-score statistics (recorded without "
        "features or with --no_normalize): nothing to refresh",
    )
    conflicts = option_conflicts(config, params)
    require(
        not conflicts,
        f"--append: {', '.join(conflicts)}: an append records with the dataset's own options "
        "(they fix the records' layout); leave them out",
    )
    elements = base["elements"]
    sub = stored_config(
        params,
        **{name: getattr(config, name) for name in FREE_OPTIONS},
        output_dir=out,
        classes=",".join(base["classes"]) if base["classes"] else None,
        signal_dtype=elements["signal"]["dtype"],
        compression=base["compression"],
        resume=config.resume,
    )
    stamps = match_stamped(config.input_pattern)
    changed = changed_inputs(stamps, known)
    require(
        not changed or config.append_changed == "skip",
        f"--append: {len(changed)} input(s) the dataset holds changed since they were recorded "
        f"(size or modification time), first {changed[:1][0] if changed else ''}; pass "
        "--append_changed skip to leave their recorded windows as they are, or record again",
    )
    new = [s for s in stamps if s[0] not in known]
    if not new and config.resume:
        return None
    require(
        bool(new),
        f"--append: every file --input_pattern {config.input_pattern!r} matches is in {out} "
        f"already (version {manifest_version(base)}): nothing to append",
    )
    token = append_token(base, sub, new, transform=config.append_transform)
    data_dir = fmt.append_dir(token)
    commits = fmt.manifest_commits(base)
    first_index = sum(c["num_files"] + c["num_errors"] for c in commits)
    return AppendPlan(
        dataset_dir=out,
        base=base,
        version=manifest_version(base) + 1,
        config=dataclasses.replace(sub, output_dir=f"{out}/{data_dir}"),
        continuation=Continuation(
            first_index=first_index,
            split_base=pattern_base(params["input_pattern"]),
            known=frozenset(known),
            prior_moments=prior,
        ),
        data_dir=data_dir,
        transform=config.append_transform,
    )


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
        _lost(plan)
    try:
        added = json.loads(_read(f"{data}/{fmt.MANIFEST_FILENAME}"))
    except FileNotFoundError:  # removed by the append that took the version (`clean_up`)
        _lost(plan)
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
        _lost(plan)
    switch_latest(out, text)
    clean_up(out, manifest)
    return manifest


def _lost(plan: AppendPlan) -> NoReturn:
    """Another append committed `plan`'s version first: this one's directory goes (the
    winner's `clean_up` may have removed it while this one's record job ran)."""
    _remove_tree(f"{plan.dataset_dir}/{plan.data_dir}", quiet=True)
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
                _remove_tree(f"{out}/{c['dir']}/{name}", quiet=True)
    appends = f"{out}/{fmt.APPENDS_DIR}"
    gfile = _gfile()
    names = [n.rstrip("/") for n in gfile.listdir(appends)] if gfile.isdir(appends) else []
    for name in sorted(names):
        version = _token_version(name)
        doomed = version is not None and version <= latest  # its version is taken
        if doomed and f"{fmt.APPENDS_DIR}/{name}" not in committed:
            _remove_tree(f"{appends}/{name}", quiet=True)


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


def _remove_tree(path: str, *, quiet: bool = False) -> None:
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


def run_append(config: RecordConfig, *, run: Callable[..., Any]) -> Any:
    """Plans the append, records the new files with `run` (`pipelines.job.run_job` with a
    `Continuation`) and commits.

    Returns:
      The record job's `RecordResult` (the appended files' counts), for the dataset directory
      and the version committed; with ``--resume`` on an append already committed, the
      finished dataset's result (``already_complete``).
    """
    from replay import load_info

    out = config.output_dir.rstrip("/") or "/"
    if _gfile().exists(f"{out}/{fmt.MANIFEST_FILENAME}"):
        finish_commit(out)
    plan = plan_append(config)
    if plan is None:
        info = load_info(out)
        result = reuse.finished_result(info, config)
        return dataclasses.replace(result, dataset_version=manifest_version(info.manifest))
    if not config.resume:
        _remove_tree(f"{plan.dataset_dir}/{plan.data_dir}")  # a killed try of the same append
    try:
        result = run(plan.config, continuation=plan.continuation)
    except Exception:
        taken = fmt.version_manifest_filename(plan.version)
        if _gfile().exists(f"{plan.dataset_dir}/{taken}"):
            _lost(plan)  # another append took the version (and removed this one's files)
        raise
    commit(plan)
    return dataclasses.replace(result, output_dir=plan.dataset_dir, dataset_version=plan.version)
