"""The manifest schema's versions and commits (format version 5, `format`, "Versions and
commits"; `replay.manifest`): ``dataset_version`` and ``commits`` in order, each commit's
directory, mode, counts, tables and optional transform and moments; the manifest's counts as the
commits' sums. Its limit: `MAX_COMMITS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from replay import format as fmt
from replay.json_checks import (
    Checker,
    field_of,
    show,
)
from replay.manifest_tables import check_table_digests

MAX_COMMITS = 100_000  # dataset versions of one dataset


_COMMIT_COUNTS = ("num_files", "num_errors", "num_examples")


def check_commits(c: Checker, manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Format version 5: ``dataset_version`` and ``commits`` (`format`, "Versions and
    commits"); returns the commits. Before version 5: neither key, one implicit commit."""
    version = manifest["format_version"]
    if version < fmt.COMMITS_VERSION:
        for key in ("dataset_version", "commits"):
            if key in manifest:
                c.fail(
                    key, f"needs format_version {fmt.COMMITS_VERSION}, the manifest says {version}"
                )
        return [{"dir": "", "num_examples": manifest["num_examples"]}]
    for key in ("dataset_version", "commits"):
        if key not in manifest:
            c.fail(key, "missing")
    dataset_version = c.as_int(
        manifest["dataset_version"], "dataset_version", low=1, high=MAX_COMMITS
    )
    commits = c.as_list(manifest["commits"], "commits", limit=MAX_COMMITS)
    if len(commits) != dataset_version:
        c.fail(
            "commits",
            f"{len(commits)} commits, but dataset_version is {dataset_version} (one commit a "
            "version)",
        )
    dirs: set[str] = set()
    for i, commit in enumerate(commits):
        field = f"commits[{i}]"
        commit = c.as_obj(commit, field)
        for part in ("version", "dir", "mode", "created_utc", "input_pattern", *_COMMIT_COUNTS,
                     "tables"):  # fmt: skip
            if part not in commit:
                c.fail(field_of(field, part), "missing")
        number = c.as_int(commit["version"], field_of(field, "version"), high=MAX_COMMITS)
        if number != i + 1:
            c.fail(field_of(field, "version"), f"{number}, but commit {i} is version {i + 1}")
        directory = c.as_str(commit["dir"], field_of(field, "dir"))
        problem = fmt.commit_dir_problem(directory, version=i + 1)
        if problem:
            c.fail(field_of(field, "dir"), f"{show(directory)} {problem}")
        if directory in dirs:
            c.fail(field_of(field, "dir"), f"{show(directory)} is an earlier commit's directory")
        dirs.add(directory)
        mode = commit["mode"]
        expected = fmt.RECORD_MODE if i == 0 else fmt.APPEND_MODE
        if mode != expected:
            c.fail(field_of(field, "mode"), f"{show(mode)}, but version {i + 1} is {expected!r}")
        c.as_str(commit["created_utc"], field_of(field, "created_utc"))
        c.as_str(commit["input_pattern"], field_of(field, "input_pattern"))
        for key in _COMMIT_COUNTS:
            c.as_int(commit[key], field_of(field, key))
        check_table_digests(c, commit, field)
        _check_commit_transform(c, commit, field, first=i == 0)
    return commits


def _check_commit_transform(c: Checker, commit: Mapping[str, Any], field: str, *, first: bool):
    """A commit's optional ``transform`` (appends only: which transform the version uses) and
    ``moments`` ({feature: {count, total, total_sq, nonfinite}}, integers)."""
    if "transform" in commit:
        transform = commit["transform"]
        if first or transform not in fmt.APPEND_TRANSFORMS:
            allowed = "none on version 1" if first else f"one of {list(fmt.APPEND_TRANSFORMS)}"
            c.fail(field_of(field, "transform"), f"{show(transform)}: {allowed}")
    moments = c.optional(commit, "moments", field, c.as_obj)
    for feature, value in (moments or {}).items():
        where = field_of(field_of(field, "moments"), feature)
        value = c.as_obj(value, where)
        for key in ("count", "total", "total_sq", "nonfinite"):
            if key not in value:
                c.fail(field_of(where, key), "missing")
            if type(value[key]) is not int:  # exact totals: any size, any sign
                c.fail(field_of(where, key), f"expected an integer, got {show(value[key])}")


def check_commit_sums(
    c: Checker, manifest: Mapping[str, Any], commits: list[dict[str, Any]]
) -> None:
    """Format version 5: no top-level tables or lists; the counts are the commits' sums."""
    for key in (*fmt.TABLE_FILENAMES, "tables"):
        if key in manifest:
            c.fail(
                key,
                f"a format_version {manifest['format_version']} manifest keeps its source "
                "tables per commit (commits[i].tables)",
            )
    for key in fmt.TABLE_COUNT_KEYS.values():
        if key not in manifest:
            c.fail(key, "missing")
        total = sum(commit[key] for commit in commits)
        if c.as_int(manifest[key], key) != total:
            c.fail(key, f"{manifest[key]} but the commits hold {total}")
