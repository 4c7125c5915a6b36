"""``--append``'s planning: the dataset appended to, checked, and the record job of its new files.

`plan_append` reads the finished dataset (its latest manifest and every input it holds), checks
the options against its own (`option_conflicts`) and the inputs against what it recorded
(`changed_inputs`), and plans the record job of the new files into ``appends/<token>/``
(`append_token`: the work's name, from the whole listing) with a `Continuation` (numbered after
its files, split by its rule, its moments for a refresh). Planned in the job it reads only the
latest manifest: the comparison is the plan step's (`HeldTables`, `pipelines.plan.held`).
The commit is `pipelines.append_commit`; the design,
`pipelines.append`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipelines.config import OPTION_NAMES, RecordConfig, UsageError, require
from pipelines.plan import Continuation
from pipelines.plan.splits import pattern_base
from pipelines.plan.types import Handover, HeldTables
from replay import format as fmt

# The options an append may set apart from the dataset's: which files, how their failures and
# unknown labels are handled, how many shards the new records fill.
FREE_OPTIONS = ("input_pattern", "unknown_class", "strict", "num_shards", "elements_per_shard")
# a version adds tables and record offsets of its own; the versions before it have them too
_FIRST_APPENDABLE_FORMAT = fmt.OFFSETS_VERSION


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
    in_job: bool = False  # the new files planned in the job (`Continuation.held`)


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
    base: Mapping[str, Any],
    config: RecordConfig,
    stamps: Iterable[Sequence[Any]],
    *,
    transform: str,
) -> str:
    """``v<version>-<digest>``: the work's name, from the version appended to, the options,
    the transform mode and every input the pattern matches ((path, size, modification time),
    in listing order; not only the new ones, which an append planned in the job learns there)."""
    digest = hashlib.sha256()
    for part in (
        json.dumps(base.get("commits") or base.get("tables"), sort_keys=True),
        transform,
        json.dumps(config.params(), sort_keys=True),
    ):
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    for path, size, modified in stamps:
        digest.update(f"{path}\0{int(size)}\0{float(modified)!r}\n".encode())
    return f"v{manifest_version(base) + 1}-{digest.hexdigest()[:16]}"


def read_base(path: str) -> dict[str, Any]:
    """A finished dataset's latest manifest, checked by the reader (its tables not read).

    Raises:
      UsageError: no finished dataset there, or one the reader refuses.
    """
    from replay import load_info
    from replay.errors import ReplayError

    try:
        info = load_info(path)
    except ReplayError as e:
        raise UsageError(no_dataset_refusal(path, e)) from e
    return json.loads(json.dumps(info.manifest, default=dict))


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
        raise UsageError(no_dataset_refusal(path, e)) from e
    return json.loads(json.dumps(info.manifest, default=dict)), known


def no_dataset_refusal(path: str, error: Exception) -> str:
    """The line refusing an append to `path`, which holds no dataset that reads back."""
    return f"--append: {path} holds no finished dataset to append to ({error})"


def changed_refusal(count: int, first: str) -> str:
    """The line refusing an append of `count` inputs changed since recorded, `first` the first
    in listing order (planned in the launcher or in the job)."""
    return (
        f"--append: {count} input(s) the dataset holds changed since they were recorded "
        f"(size or modification time), first {first}; pass "
        "--append_changed skip to leave their recorded windows as they are, or record again"
    )


def nothing_new_refusal(pattern: str, out: str, version: int) -> str:
    """The line refusing an append of `pattern` to version `version` of `out` that holds every
    input already (planned in the launcher or in the job)."""
    return (
        f"--append: every file --input_pattern {pattern!r} matches is in {out} "
        f"already (version {version}): nothing to append"
    )


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


def plans_in_job(base: Mapping[str, Any]) -> bool:
    """Whether an append to the dataset of manifest `base` can be planned in the job: its class
    list fixes the new files' classes (a dataset without one takes them from the files), and
    its shards are not by class (``--shard_by class`` shards by the new files' labels, which
    the launcher does not know then)."""
    return bool(base["classes"]) and base["params"].get("shard_by") != "class"


def plan_append(config: RecordConfig, *, in_job: bool = False) -> AppendPlan | None:
    """Checks `config` against the dataset in its ``output_dir`` and plans the append; None with
    ``--resume`` when the append was committed (its directory is the latest commit's, or every
    input is in the dataset already).

    `in_job`: plan the new files in the job (`AppendPlan.in_job`; `plans_in_job` of the
    dataset): the launcher reads the latest manifest and lists the inputs, the job's plan step
    compares them with the dataset's tables (`pipelines.plan.held`), not this process.

    Raises:
      UsageError: no finished dataset there, one of a format that cannot grow, an annotated
        dataset, a refresh without stored moments or statistics, an option that would change
        the records' layout; planned here, a changed input (without ``--append_changed
        skip``), or nothing new (without ``--resume``).
    """
    from pipelines.plan.reads import match_stamped

    out, base, sub, prior = _checked_config(config)
    stamps = tuple(match_stamped(config.input_pattern))
    if config.resume and committed_already(out, base, sub, stamps, config.append_transform):
        return None
    version = manifest_version(base)
    in_job = in_job and plans_in_job(base)
    known: dict[str, tuple[int, float] | None] = {}
    if not in_job:
        _, known = read_dataset(out)
        changed = changed_inputs(stamps, known)
        require(
            not changed or config.append_changed == "skip",
            changed_refusal(len(changed), changed[:1][0] if changed else ""),
        )
        new = any(s[0] not in known for s in stamps)
        if not new and config.resume:
            return None
        require(new, nothing_new_refusal(config.input_pattern, out, version))
    data_dir = fmt.append_dir(append_token(base, sub, stamps, transform=config.append_transform))
    first_index = sum(c["num_files"] + c["num_errors"] for c in fmt.manifest_commits(base))
    held = None
    if in_job:
        held = HeldTables(
            dataset_dir=out,
            parts=_table_parts(out, base),
            first_index=first_index,
            skip_changed=config.append_changed == "skip",
            input_pattern=config.input_pattern,
            version=version,
        )
    return AppendPlan(
        dataset_dir=out,
        base=base,
        version=version + 1,
        config=dataclasses.replace(sub, output_dir=f"{out}/{data_dir}"),
        continuation=Continuation(
            first_index=first_index,
            split_base=pattern_base(base["params"]["input_pattern"]),
            known=frozenset(known),
            prior_moments=prior,
            held=held,
            stamps=Handover(stamps),
        ),
        data_dir=data_dir,
        transform=config.append_transform,
        in_job=in_job,
    )


def committed_already(
    out: str,
    base: Mapping[str, Any],
    sub: RecordConfig,
    stamps: Sequence[Sequence[Any]],
    transform: str,
) -> bool:
    """Whether the latest commit of the dataset (manifest `base`) is this append's: its
    directory is the token of these `stamps` onto the version before it (one manifest read;
    the held inputs are not looked at)."""
    from replay import load_info

    commits = fmt.manifest_commits(base)
    if len(commits) < 2 or commits[-1]["mode"] != fmt.APPEND_MODE:
        return False
    before = json.loads(json.dumps(load_info(out, version=len(commits) - 1).manifest, default=dict))
    token = append_token(before, sub, stamps, transform=transform)
    return commits[-1]["dir"] == fmt.append_dir(token)


def _table_parts(out: str, base: Mapping[str, Any]) -> tuple[Any, ...]:
    """`HeldTables.parts` of the dataset (manifest `base`): every commit's table files."""
    from replay.tables import SourceTables, freeze

    tables = SourceTables(out, freeze(base))
    return tuple(
        (name, path, dict(expected), count, key)
        for name in ("files", "errors")
        for path, expected, count, key in tables.parts(name)
    )


def _checked_config(config: RecordConfig) -> tuple[str, dict[str, Any], RecordConfig, Any]:
    """`plan_append`'s checks before any input is listed: (the dataset directory, its latest
    manifest, the record job's config (the dataset's options, `FREE_OPTIONS` from `config`),
    the stored moments a refresh adds to or None).

    Raises:
      UsageError: as `plan_append`, but for the inputs.
    """
    out = config.output_dir.rstrip("/") or "/"
    if out.startswith("gs://"):
        try:  # the commit's precondition (`create_exclusively`): known now, not after the job
            import google.cloud.storage  # noqa: F401
        except ImportError:
            raise UsageError(
                f"--append: {out}: committing on gs:// needs google-cloud-storage "
                "(pip install 'apache-beam[gcp]')"
            ) from None
    base = read_base(out)
    params = base["params"]
    prior = _checked_base(out, base, config)
    conflicts = option_conflicts(config, params)
    require(
        not conflicts,
        f"--append: {', '.join(conflicts)}: an append records with the dataset's own options "
        "(they fix the records' layout); leave them out",
    )
    sub = stored_config(
        params,
        **{name: getattr(config, name) for name in FREE_OPTIONS},
        output_dir=out,
        classes=",".join(base["classes"]) if base["classes"] else None,
        signal_dtype=base["elements"]["signal"]["dtype"],
        compression=base["compression"],
        resume=config.resume,
    )
    return out, base, sub, prior


def _checked_base(out: str, base: Mapping[str, Any], config: RecordConfig) -> Any:
    """`plan_append`'s checks of the dataset appended to (its manifest `base`): a format that
    can grow, not annotated, and for a refresh stored moments and z-score statistics. Returns
    the stored moments a refresh adds to (None: frozen).

    Raises:
      UsageError: as `plan_append`.
    """
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
    return prior
