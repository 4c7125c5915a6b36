"""``--append``'s planning: the dataset appended to, checked, and the record job of its new files.

`plan_append` reads the finished dataset (its latest manifest and every input it holds), checks
the options against its own (`option_conflicts`) and the inputs against what it recorded
(`changed_inputs`), and plans the record job of the new files into ``appends/<token>/``
(`append_token`: the work's name) with a `Continuation` (numbered after its files, split by its
rule, its moments for a refresh). The commit is `pipelines.append_commit`; the design,
`pipelines.append`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pipelines.config import OPTION_NAMES, RecordConfig, UsageError, require
from pipelines.plan import Continuation
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
    params = base["params"]
    prior = _checked_base(out, base, config)
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
