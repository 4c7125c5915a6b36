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

The token names the work, not the moment: the same append of the same listing onto the same
version gets the same directory, so ``--append --resume`` continues a killed one through the
record job's own ``--resume``, and an ``--append`` without it starts that directory again; once
committed, it is the latest commit's directory (`pipelines.append_plan.committed_already`).

Where the runner plans in the job (inputs on an object store, or ``plan_in_job``), the new
files are planned in the job: the launcher reads the latest manifest and lists, and the plan
step compares the listing with the dataset's tables (`pipelines.plan.held`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from pipelines.append_commit import (
    clean_up,
    commit,
    create_exclusively,
    finish_commit,
    layout_difference,
    lost,
    next_manifest,
    now_utc,
    remove_tree,
    switch_latest,
)
from pipelines.append_plan import (
    FREE_OPTIONS,
    AppendPlan,
    append_token,
    changed_inputs,
    manifest_version,
    nothing_new_refusal,
    option_conflicts,
    plan_append,
    read_dataset,
    stored_config,
    stored_moments,
)
from pipelines.config import RecordConfig, UsageError
from pipelines.resume import reuse
from replay import format as fmt
from replay import storage

# re-exported: the planning and the commit protocol moved to `pipelines.append_plan` and
# `pipelines.append_commit`; their names stay importable from here
__all__ = [
    "FREE_OPTIONS",
    "AppendPlan",
    "append_token",
    "changed_inputs",
    "clean_up",
    "commit",
    "create_exclusively",
    "finish_commit",
    "layout_difference",
    "manifest_version",
    "next_manifest",
    "now_utc",
    "option_conflicts",
    "plan_append",
    "read_dataset",
    "run_append",
    "stored_config",
    "stored_moments",
    "switch_latest",
]


def run_append(config: RecordConfig, *, run: Callable[..., Any], in_job: bool = False) -> Any:
    """Plans the append, records the new files with `run` (`pipelines.job.run_job` with a
    `Continuation`) and commits. `in_job`: the new files are planned in the job where the
    dataset allows it (`pipelines.append_plan.plans_in_job`).

    Returns:
      The record job's `RecordResult` (the appended files' counts), for the dataset directory
      and the version committed; with ``--resume`` on an append already committed, the
      finished dataset's result (``already_complete``).
    """
    out = config.output_dir.rstrip("/") or "/"
    if storage.gfile().exists(f"{out}/{fmt.MANIFEST_FILENAME}"):
        finish_commit(out)
    plan = plan_append(config, in_job=in_job)
    if plan is None:
        return _finished(out, config)
    if not config.resume:
        remove_tree(f"{plan.dataset_dir}/{plan.data_dir}")  # a killed try of the same append
    try:
        result = run(plan.config, continuation=plan.continuation, plan_in_job=plan.in_job)
    except Exception as e:
        if isinstance(e, UsageError):  # planned in the job: its plan step's refusals too
            _drop_empty_appends_dir(out)
            version = manifest_version(plan.base)
            nothing_new = nothing_new_refusal(config.input_pattern, out, version)
            if config.resume and str(e) == nothing_new:
                return _finished(out, config)  # as planned in the launcher: nothing to do
        taken = fmt.version_manifest_filename(plan.version)
        if storage.gfile().exists(f"{plan.dataset_dir}/{taken}"):
            lost(plan)  # another append took the version (and removed this one's files)
        raise
    if result.translated:  # --template_location: the record job described, nothing to commit
        return result
    commit(plan)
    return dataclasses.replace(result, output_dir=plan.dataset_dir, dataset_version=plan.version)


def _finished(out: str, config: RecordConfig) -> Any:
    """``--resume`` of an append with nothing left to do: the finished dataset's result."""
    from replay import load_info

    info = load_info(out)
    result = reuse.finished_result(info, config)
    return dataclasses.replace(result, dataset_version=manifest_version(info.manifest))


def _drop_empty_appends_dir(out: str) -> None:
    """Removes ``appends/`` when a refused append planned in the job left it empty."""
    appends = f"{out}/{fmt.APPENDS_DIR}"
    if not storage.is_url(out) and os.path.isdir(appends) and not os.listdir(appends):
        os.rmdir(appends)
