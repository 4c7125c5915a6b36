"""``--resume``'s fingerprint: the plan of a run as far as it shapes the records.

Every run writes, before any work, ``<out>/.tmp/resume.json``: the run's
*plan* as far as it shapes the records (`fingerprint`): every record option (the manifest's
``params``), the sorted input list with each file's size and modification time (Beam's
``last_updated``: the mtime locally, the object's update time on object stores), the package
version, and a digest of what planning derived from them (labels, splits, classes, signal dtype,
shard counts and the read tasks' cut, which also covers a changed label CSV, class list or
annotation table). ``--resume`` compares it with the new plan's and refuses in one line naming
the first difference (`first_difference`): runs are never mixed.

The rest of ``--resume``'s launcher side (directory states, committed work) is
`pipelines.resume`.
"""

from __future__ import annotations

import hashlib
import json
import marshal
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from replay import _fs

FINGERPRINT_FILE = ".tmp/resume.json"
FINGERPRINT_VERSION = 1


def package_version() -> str:
    """The installed audiorecords version ("dev" from a source tree)."""
    from importlib import metadata

    try:
        return metadata.version("audiorecords")
    except metadata.PackageNotFoundError:
        return "dev"


def fingerprint(
    params: Mapping[str, Any],
    stamps: Sequence[tuple[str, int, float]],
    *,
    derived: Mapping[str, Any],
    version: str | None = None,
) -> dict[str, Any]:
    """The plan of a run as far as it shapes the records (JSON values).

    Args:
      params: the record options (the manifest's ``params``).
      stamps: (path, size, mtime) of every matched input.
      derived: what planning derived (labels, splits, classes, tasks...): stored as a digest.
      version: the package version (default: the installed one).
    """
    text = json.dumps(derived, sort_keys=True, separators=(",", ":"), default=str)
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "package": package_version() if version is None else version,
        "options": json_values(params),
        "inputs": [[p, int(s), float(m)] for p, s, m in sorted(stamps)],
        "plan": hashlib.sha256(text.encode()).hexdigest(),
    }


def option_difference(before: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """The first option (by name) whose value differs, as a phrase; None: the same options."""
    before, now = json_values(before), json_values(now)
    for name in sorted(set(before) | set(now)):
        if before.get(name) != now.get(name):
            return f"option --{name} changed ({before.get(name)!r} -> {now.get(name)!r})"
    return None


def json_values(params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` as they read back from JSON (tuples are lists), keys sorted."""
    return json.loads(json.dumps(dict(params), sort_keys=True))


def first_difference(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """The first way the stored fingerprint `old` differs from `new`, as a phrase; None: same."""
    if old.get("fingerprint_version") != new["fingerprint_version"]:
        return f"its resume record has version {old.get('fingerprint_version')!r}"
    if old.get("package") != new["package"]:
        return f"the package version changed ({old.get('package')} -> {new['package']})"
    changed = option_difference(old.get("options", {}), new["options"])
    if changed is not None:
        return changed
    try:
        was = {p: (s, m) for p, s, m in old.get("inputs", [])}
    except (TypeError, ValueError):
        return "its resume record is malformed"
    is_ = {p: (s, m) for p, s, m in new["inputs"]}
    for path in sorted(set(was) | set(is_)):
        if path not in was:
            return f"input added: {path}"
        if path not in is_:
            return f"input removed: {path}"
        (s0, m0), (s1, m1) = was[path], is_[path]
        if s0 != s1:
            return f"input changed: {path} (size {s0} -> {s1})"
        if m0 != m1:
            return f"input changed: {path} (modified since the run started)"
    if old.get("plan") != new["plan"]:
        return (
            "the plan changed (labels, classes, splits or read tasks: a label CSV, class list "
            "or annotation table, or another runner or core count)"
        )
    return None


def read_fingerprint(output_dir: str) -> dict[str, Any] | None:
    """The stored fingerprint of the run in `output_dir` (None: none, or unreadable)."""
    path = f"{output_dir}/{FINGERPRINT_FILE}"
    try:
        if not _fs.exists(path):
            return None
        stored = json.loads(_fs.read_text(path))
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) else None


def annotation_digest(annotation: Any) -> str:
    """A digest of a file's planned annotation (`FileAnnotation`): every array's dtype, shape
    and bytes (numpy's repr cuts arrays over 1,000 elements to ``...``), its classes, summary,
    channels and row offset."""
    h = hashlib.sha256()
    for name in ("starts", "labels", "events", "num_events"):
        array = np.ascontiguousarray(getattr(annotation, name))
        h.update(f"{name}:{array.dtype.str}:{array.shape}:".encode())
        h.update(array.tobytes())
    rest = {
        "channels": int(annotation.channels),
        "classes": list(annotation.classes),
        "summary": annotation.summary,
        "row_offset": int(annotation.row_offset),
    }
    h.update(json.dumps(rest, sort_keys=True, separators=(",", ":"), default=str).encode())
    return h.hexdigest()


def function_digest(func: Any) -> str:
    """A digest of what a `shard_func` computes: its name, its code (nested code included:
    `marshal`), defaults and closure values (their repr); an object without code, its repr."""
    h = hashlib.sha256(getattr(func, "__qualname__", type(func).__qualname__).encode())
    code = getattr(func, "__code__", None)
    if code is None:
        h.update(repr(func).encode())
        return h.hexdigest()
    h.update(marshal.dumps(code))
    cells = []
    for cell in func.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            value = None
        cells.append(None if value is func else value)
    # a value whose repr holds its address differs run to run: refused (conservative)
    h.update(repr((func.__defaults__, func.__kwdefaults__, cells)).encode())
    return h.hexdigest()


def derived(plan: Any) -> dict[str, Any]:
    """What planning derived from the options and inputs (a `pipelines.plan.RecordPlan`), as
    JSON values for the fingerprint's ``plan`` digest: labels, splits, refusals, classes, the
    signal dtype, shard counts and the read tasks' cut."""
    func = plan.sharding.shard_func
    return {
        "inputs": [[f.index, f.path, f.label, f.split, f.error] for f in plan.inputs],
        "annotations": [
            [f.index, annotation_digest(f.annotation)]
            for f in plan.inputs
            if f.annotation is not None
        ],
        "classes": list(plan.classes),
        "signal_dtype": plan.read.signal_dtype,
        "num_shards": dict(sorted(plan.sharding.num_shards.items())),
        "shard_func": None if func is None else function_digest(func),
        "tasks": [
            [t.task_id, [[s.file.index, s.row_start, s.row_stop, s.split_rank] for s in t.segments]]
            for t in plan.tasks
        ],
    }
