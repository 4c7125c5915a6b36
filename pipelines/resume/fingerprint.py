"""``--resume``'s fingerprint: the plan of a run as far as it shapes the records.

Every run writes, before any work, ``<out>/.tmp/resume.json``: the run's *plan* as far as it
shapes the records (`fingerprint`): every record option (the manifest's ``params``), the sorted
input list with each file's size and modification time (Beam's ``last_updated``: the mtime
locally, the object's update time on object stores; stored as columns, `input_columns`: the
paths and sizes as JSON lists, the times as the base64 of their little-endian float64 bytes,
exact and without a float's text), the package version, and a digest of what planning derived
from them (labels, splits, classes, signal dtype, shard counts and the read tasks' cut, which
also covers a changed label CSV, class list or annotation table). A run planned in the job
(`pipelines.plan.in_job`) holds only what the launcher derives without reading headers (labels,
splits, refusals for their label, classes: `listing_digest`, a column at a time) and says so
(``"planned_in": "job"``): the rest is a function of the stamped files. ``--resume`` compares it
with the new plan's and refuses in one line naming the first difference (`first_difference`):
runs are never mixed.

A record of version 1 (the inputs as a list of [path, size, time], a run planned in the job
digested file by file) is still read: its inputs are compared as they are, and the launcher
digests a listing as version 1 did to compare it with such a record (`listing_digest`).

The rest of ``--resume``'s launcher side: `pipelines.resume.reuse` (directory states, committed
work) and `pipelines.resume.output_dir` (the output directory's start).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import marshal
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from replay import storage
from transforms.spec.types import FileEvents

FINGERPRINT_FILE = ".tmp/resume.json"
FINGERPRINT_VERSION = 2
READ_VERSIONS = (1, 2)  # the record versions `first_difference` compares with this one
_CHUNK = 4096  # list items encoded at a time (`plan_digest`, `json_pieces`)
_INPUT = attrgetter("index", "path", "label", "split", "error")  # a file in the plan digest
_ANNOTATION = attrgetter("annotation")
# an annotation table's event (transforms.audio.annotations.Event), every field
_EVENT = attrgetter("audio", "start_s", "end_s", "label", "channel", "source", "line", "by_stem")
_CELL = ("label", "split", "error")  # a file's fields `_files_digest` takes as values
_SEGMENT = attrgetter("file.index", "row_start", "row_stop", "split_rank")  # a task's segment


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
    derived: Mapping[str, Any] | str,
    version: str | None = None,
    planned_in_job: bool = False,
) -> dict[str, Any]:
    """The plan of a run as far as it shapes the records (JSON values; the inputs are tuples,
    lists once read back).

    Args:
      params: the record options (the manifest's ``params``).
      stamps: (path, size, mtime) of every matched input.
      derived: what planning derived (labels, splits, classes, tasks...; `derived`), stored as
        a digest; or that digest already made (`plan_digest`).
      version: the package version (default: the installed one).
      planned_in_job: `derived` is the launcher's part only (`listing_digest`): the run was
        planned in the job; marked ``"planned_in": "job"``.
    """
    made = {
        "fingerprint_version": FINGERPRINT_VERSION,
        "package": package_version() if version is None else version,
        "options": json_values(params),
        "inputs": input_columns(stamps),
        "plan": derived if isinstance(derived, str) else _digest([_json(derived)]),
    }
    if planned_in_job:
        made["planned_in"] = "job"
    return made


def input_columns(stamps: Sequence[tuple[str, int, float]]) -> dict[str, Any]:
    """The fingerprint's ``inputs``: `stamps` sorted by path, as columns (JSON values):
    ``paths`` and ``sizes`` lists, ``modified`` the base64 of the times' little-endian float64
    bytes (`input_stamps` reads them back)."""
    if not stamps:
        return {"paths": [], "sizes": [], "modified": ""}
    paths, sizes, times = map(list, zip(*stamps, strict=True))
    if not all(map(operator.lt, paths, itertools.islice(paths, 1, None))):  # not sorted yet
        paths, sizes, times = map(list, zip(*sorted(stamps), strict=True))
    if not set(map(type, sizes)) <= {int}:
        sizes = list(map(int, sizes))
    modified = np.asarray(times, dtype="<f8").tobytes()
    return {"paths": paths, "sizes": sizes, "modified": base64.b64encode(modified).decode()}


def input_stamps(inputs: Any) -> dict[str, tuple[int, float]]:
    """{path: (size, modification time)} of a fingerprint's ``inputs`` (`input_columns`, or a
    version-1 record's list of [path, size, time]).

    Raises:
      ValueError: not inputs of either form.
    """
    try:
        if isinstance(inputs, Mapping):
            times = np.frombuffer(base64.b64decode(inputs["modified"], validate=True), "<f8")
            paths, sizes = inputs["paths"], inputs["sizes"]
            if not len(paths) == len(sizes) == len(times):
                raise ValueError("columns of different lengths")
            return dict(zip(paths, zip(sizes, times.tolist(), strict=True), strict=True))
        return {p: (s, m) for p, s, m in inputs}
    except (TypeError, KeyError, binascii.Error) as e:
        raise ValueError(f"not a fingerprint's inputs: {e}") from e


def planned_in_job(fingerprint: Mapping[str, Any]) -> bool:
    """Whether the run `fingerprint` describes was planned in the job (`listing_digest`)."""
    return fingerprint.get("planned_in") == "job"


def json_pieces(fingerprint: Mapping[str, Any]) -> Iterator[bytes]:
    """The fingerprint file's bytes, in pieces: JSON, one key a line, a list's items encoded
    `_CHUNK` at a time (no text of every input at once)."""
    for n, (key, value) in enumerate(fingerprint.items()):
        yield f"{'{' if n == 0 else ','}\n{json.dumps(key)}: ".encode()
        yield from _value_pieces(value)
    yield b"\n}\n" if fingerprint else b"{}\n"


def _value_pieces(value: Any) -> Iterator[bytes]:
    """`json.dumps(value)`'s bytes in pieces: a list's items `_CHUNK` at a time, a dict's
    values so too."""
    if isinstance(value, (list, tuple)):
        yield from (piece.encode() for piece in _list_pieces(iter(value), json.dumps))
    elif isinstance(value, dict) and value:
        for n, (key, item) in enumerate(value.items()):
            yield f"{', ' if n else '{'}{json.dumps(key)}: ".encode()
            yield from _value_pieces(item)
        yield b"}"
    else:
        yield json.dumps(value).encode()


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
    if old.get("fingerprint_version") not in READ_VERSIONS:
        return f"its resume record has version {old.get('fingerprint_version')!r}"
    if planned_in_job(old) != planned_in_job(new):
        return "it was planned another way (in the job or in the launcher)"
    if old.get("package") != new["package"]:
        return f"the package version changed ({old.get('package')} -> {new['package']})"
    changed = option_difference(old.get("options", {}), new["options"])
    if changed is not None:
        return changed
    if old.get("inputs") != new["inputs"]:  # the same columns: the same inputs
        changed = _input_difference(old.get("inputs", []), new["inputs"])
        if changed is not None:
            return changed
    if old.get("plan") != new["plan"]:
        return (
            "the plan changed (labels, classes, splits or read tasks: a label CSV, class list "
            "or annotation table, or another runner or core count)"
        )
    return None


def _input_difference(old: Any, new: Any) -> str | None:
    """The first input (by path) added, removed or changed from `old` to `new` (a
    fingerprint's ``inputs`` each), as a phrase; None: the same inputs."""
    try:
        was = input_stamps(old)
    except ValueError:
        return "its resume record is malformed"
    is_ = input_stamps(new)
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
    return None


def read_fingerprint(output_dir: str) -> dict[str, Any] | None:
    """The stored fingerprint of the run in `output_dir` (None: none, or unreadable)."""
    path = f"{output_dir}/{FINGERPRINT_FILE}"
    try:
        if not storage.exists(path):
            return None
        stored = json.loads(storage.read_text(path))
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) else None


def annotation_digest(annotation: Any) -> str:
    """A digest of a file's planned annotation (`FileAnnotation`): every array's dtype, shape
    and bytes (numpy's repr cuts arrays over 1,000 elements to ``...``), its classes, summary,
    channels and row offset; of a listed file's matched rows (`FileEvents`): every field of
    each."""
    h = hashlib.sha256()
    if isinstance(annotation, FileEvents):
        h.update(_json(list(map(_EVENT, annotation.events))).encode())
        return h.hexdigest()
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
    JSON values for the fingerprint's ``plan`` digest (`plan_digest`): labels, splits,
    refusals, classes, the signal dtype, shard counts and the read tasks' cut."""
    return json.loads("".join(_derived_pieces(plan)))


def plan_digest(plan: Any) -> str:
    """The fingerprint's ``plan`` digest: SHA-256 of `derived(plan)`'s compact JSON (keys
    sorted), made and digested a few thousand files or segments at a time (no list of every
    file)."""
    return _digest(_derived_pieces(plan))


def listing_digest(
    listed: Any, *, cut: Mapping[str, Any], version: int = FINGERPRINT_VERSION
) -> str:
    """The ``plan`` digest of a run planned in the job: what the launcher derives without a
    header (`pipelines.plan.list_inputs`: labels, splits, refusals for their label, classes,
    the shard function), from a `ScannedInputs` of unread headers, and what the read tasks' cut
    depends on besides the headers (`cut`: the launcher's core count, whether one task).

    The files are digested as columns (`_files_digest`); `version` 1: as a version-1 record
    holds it, file by file (`_derived_pieces`' JSON), to compare with one.
    """
    if version == 1:
        pieces = _derived_pieces(listed, headers=False)
        return _digest(itertools.chain(pieces, [_json(dict(cut))]))
    func = listed.sharding.shard_func
    rest = {
        "classes": list(listed.classes),
        "cut": dict(cut),
        "files": _files_digest(listed.inputs),
        "shard_func": None if func is None else function_digest(func),
    }
    if listed.max_events is not None:  # --annotations: the rows refused without a header
        rest["bad_rows"] = [e.to_manifest() for e in listed.table_errors]
    return _digest([_json(rest)])


def _files_digest(files: Sequence[Any]) -> str:
    """SHA-256 of `files` (`InputFile`s without headers) as the listing makes them: each one's
    index, path, label, split, refusal and annotation, a column at a time (C loops: no text a
    file)."""
    h = hashlib.sha256()
    indexes = np.fromiter(map(attrgetter("index"), files), dtype="<i8", count=len(files))
    paths = list(map(attrgetter("path"), files))
    lengths = np.fromiter(map(len, paths), dtype="<i8", count=len(paths))
    # the distinct (label, split, refusal) values once, and each file's position among them
    cells = list(zip(*(map(attrgetter(name), files) for name in _CELL), strict=True))
    distinct = {cell: n for n, cell in enumerate(dict.fromkeys(cells))}
    codes = np.fromiter(map(distinct.__getitem__, cells), dtype="<i8", count=len(cells))
    annotated = (
        [  # (none in a listing without --annotations: a C loop finds none)
            (f.index, _annotation_entry(f.annotation)) for f in files if f.annotation is not None
        ]
        if any(map(_ANNOTATION, files))
        else []
    )
    h.update(_json([len(files), list(distinct), annotated]).encode())
    for column in (indexes, lengths, codes):
        h.update(column.tobytes())
    h.update("".join(paths).encode(errors="surrogatepass"))  # cut by `lengths`
    return h.hexdigest()


def _annotation_entry(annotation: Any) -> Any:
    """A file's annotation in `_files_digest`: a listed file's matched rows (`FileEvents`) as
    they are (each event's fields: one text for every file, no digest a file), else its
    `annotation_digest`."""
    if isinstance(annotation, FileEvents):
        return list(map(_EVENT, annotation.events))
    return annotation_digest(annotation)


def _derived_pieces(plan: Any, *, headers: bool = True) -> Iterator[str]:
    """The compact JSON text (keys sorted) of what `derived` returns, in pieces (without
    `headers`: only the parts a listing gives, `listing_digest`)."""
    func = plan.sharding.shard_func
    annotated = (
        (f.index, annotation_digest(f.annotation)) for f in plan.inputs if f.annotation is not None
    )
    yield '{"annotations":'
    yield from _list_pieces(annotated, _json)
    yield f',"classes":{_json(list(plan.classes))},"inputs":'
    yield from _list_pieces(map(_INPUT, plan.inputs), _json)
    if not headers:
        yield f',"shard_func":{_json(None if func is None else function_digest(func))}}}'
        return
    yield f',"num_shards":{_json(dict(sorted(plan.sharding.num_shards.items())))}'
    yield f',"shard_func":{_json(None if func is None else function_digest(func))}'
    yield f',"signal_dtype":{_json(plan.read.signal_dtype)},"tasks":['
    for n, task in enumerate(plan.tasks):
        yield f"{',' if n else ''}[{_json(task.task_id)},"
        segments = map(_SEGMENT, task.segments)
        yield from _list_pieces(segments, _json)
        yield "]"
    yield "]}"


def _json(value: Any) -> str:
    """The digest's JSON of `value` (compact, keys sorted)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _digest(pieces: Iterable[str]) -> str:
    """SHA-256 (hex) of the text `pieces` make."""
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece.encode())
    return h.hexdigest()


def _list_pieces(
    items: Iterator[Any], dumps: Callable[[Any], str], *, chunk: int = _CHUNK
) -> Iterator[str]:
    """The text ``dumps(list(items))`` makes (`dumps`: `json.dumps` with its options: `_json`
    or the default ones), in pieces of `chunk` items."""
    yield "["
    comma = "," if dumps is _json else ", "
    first = True
    while batch := list(itertools.islice(items, chunk)):
        text = dumps(batch)[1:-1]
        yield text if first else comma + text
        first = False
    yield "]"
