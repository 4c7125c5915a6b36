"""``--resume``'s reuse: the directory states, and the committed work each read task reuses.

A finished dataset of the same options is taken as it is (`finished_dataset`,
`finished_result`); an unfinished run's entries are checked against what the job writes
(`job_outputs`, `unknown_entries`); its commit and checkpoint records are chained per task and
handed to the tasks that reuse them (`plan_reuse`, `Reuse`). The design is in `pipelines.resume`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pipelines.config import RecordConfig
from pipelines.plan.reads import match_inputs
from pipelines.result import RecordResult
from pipelines.resume.fingerprint import option_difference
from replay import format as fmt
from replay import storage

COMMITS_DIR = ".tmp/commits"
PARTS_DIR = ".tmp/parts"  # transforms.stages.record_parts.PARTS_DIR
# transforms.stages.task_commits.COMMIT_VERSION: a record of another version (an older slice's) is
# not reused: its task is read again
COMMIT_VERSION = 5


def finished_dataset(output_dir: str, params: Mapping[str, Any]) -> Any | None:
    """``--resume`` on a finished dataset of ours: its `replay.DatasetInfo`, once its ``params``
    are checked to be `params`; None when `output_dir` holds no complete manifest of ours (a
    foreign one: planning refuses it as always).

    Raises:
      UsageError: the dataset was made with other options (the line names the first), is of
        another format version, or does not read back.
    """
    from pipelines.config import UsageError
    from replay import load_info
    from replay.errors import ReplayError

    path = f"{output_dir}/{fmt.MANIFEST_FILENAME}"
    try:
        manifest = json.loads(storage.read_text(path)) if storage.exists(path) else None
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != fmt.FORMAT_NAME:
        return None
    if manifest.get("complete") is not True:
        return None
    again = "rerun with --overwrite to make it again"
    version = manifest.get("format_version")
    if version != fmt.FORMAT_VERSION:
        raise UsageError(
            f"--resume: {output_dir} is a finished dataset of format version {version!r} "
            f"(this version writes {fmt.FORMAT_VERSION}); {again}"
        )
    difference = option_difference(manifest.get("params") or {}, params)
    if difference is not None:
        raise UsageError(
            f"--resume: {output_dir} is a finished dataset of other options: {difference}; "
            f"rerun with its options, or {again}"
        )
    try:
        info = load_info(output_dir)
        info.errors  # noqa: B018 - the errors table, read and checked now
    except (ReplayError, OSError) as e:
        raise UsageError(f"--resume: {output_dir} does not read back ({e}); {again}") from e
    return info


def bad_table_rows(errors: Sequence[Mapping[str, Any]], tables: Sequence[str]) -> int:
    """The entries of `errors` that are bad annotation table rows (``<table>:<line>``, or a
    whole table) of `tables`, not failed input files."""
    tables = frozenset(tables)
    return sum(1 for e in errors if e["path"] in tables or e["path"].rsplit(":", 1)[0] in tables)


def job_outputs(name: str, num_shards: Mapping[str, int]) -> frozenset[str]:
    """The top-level names a record job of dataset `name` and these shard counts writes in its
    output directory (besides its run marker): what ``--resume`` may delete."""
    fixed = {
        ".tmp",
        fmt.MANIFEST_FILENAME,
        fmt.FILES_TABLE,
        fmt.ERRORS_TABLE,
        fmt.SCHEMA_FILENAME,
        fmt.TRANSFORM_FN_DIR,
        fmt.TRANSFORMED_METADATA_DIR,
        fmt.RAW_METADATA_DIR,
        fmt.FEATURE_FN_DIR,
        fmt.OFFSETS_DIR,
    }
    shards = {
        fmt.shard_filename(name=name, split=split, index=i, num_shards=n, compression=c)
        for split, n in num_shards.items()
        for i in range(n)
        for c in fmt.COMPRESSION_SUFFIXES
    }
    return frozenset(fixed | shards)


def unknown_entries(names: Sequence[str], is_output: Callable[[str], bool]) -> list[str]:
    """The entries of `names` the job did not write: neither an output (`is_output`, e.g.
    ``job_outputs(...).__contains__`` or `named_output`) nor a temporary file of one
    (``<name>.tmp-<8 hex>``, `transforms.stages.atomic.temp_name`)."""
    unknown = []
    for entry in (n.rstrip("/") for n in names):
        temp = _temp_of(entry)
        if not is_output(entry) and not (temp is not None and is_output(temp)):
            unknown.append(entry)
    return sorted(unknown)


def named_output(name: str) -> Callable[[str], bool]:
    """Whether a top-level entry is one a record job of dataset `name` writes, whatever its
    shard counts (a run planned in the job: the launcher does not know them): a fixed output
    of `job_outputs` or a shard file of `name`."""
    fixed = job_outputs(name, {})

    def is_output(entry: str) -> bool:
        shard = fmt.parse_shard_filename(entry)
        return entry in fixed or (shard is not None and shard["name"] == name)

    return is_output


def _temp_of(name: str) -> str | None:
    """The name `name` is a temporary file of (``<name>.tmp-<8 hex>``,
    `transforms.stages.atomic.temp_name`); None: not one."""
    base, _, tag = name.rpartition(".tmp-")
    temp = bool(base) and len(tag) == 8 and all(c in "0123456789abcdef" for c in tag)
    return base if temp else None


@dataclasses.dataclass(frozen=True)
class Reuse:
    """What a resumed run takes from the committed work, and what it still reads.

    Attributes:
      tasks: the planned read tasks, each with the records of what was committed of it
        (`ReadTask.resumed`, `transforms.stages.task_commits`): a task reused whole has no segment
        left; one reused up to a checkpoint goes on from there in its part files
        (`ReadTask.start`; its records are ``continued``: their parts are committed whole by
        the task); one without records is read as planned.
      stale: records of the output directory's run that are not reused (past a gap or a
        checkpoint whose bytes are gone): deleted before the run, since a continued task
        rewrites their part bytes.
      whole_tasks: the tasks reused whole.
      windows: the windows reused.
    """

    tasks: tuple[Any, ...] = ()
    stale: tuple[str, ...] = ()
    whole_tasks: int = 0
    windows: int = 0


def _reusable(record: Any, task: int, num_segments: int) -> bool:
    """Whether `record` is task `task`'s, of this version, well-formed, covers a non-empty range
    of its segments, and names only that task's own parts (``.tmp/parts/<split>/<shard>/<task>
    .records`` or a temporary name of one: never another task's or directory's file, which a
    continued task would cut and append to)."""
    if not isinstance(record, dict) or record.get("version") != COMMIT_VERSION:
        return False
    start, stop, parts = record.get("start"), record.get("stop"), record.get("parts")
    if record.get("task") != task or not isinstance(start, int) or not isinstance(stop, int):
        return False
    if not 0 <= start < stop <= num_segments or not isinstance(parts, list):
        return False
    lists = ("files", "errors", "sampled")
    if not all(isinstance(record.get(k), list) for k in lists):
        return False
    if not _moments_ok(record.get("moments")):
        return False
    if not isinstance(record.get("counts"), dict) or not isinstance(record.get("windows"), int):
        return False
    return all(_own_part(part, task) for part in parts)


def _moments_ok(moments: Any) -> bool:
    """Whether a record's ``moments`` are {feature: {count, total, total_sq, nonfinite}} of
    integers (`transforms.stages.moments.Moments.to_json`)."""
    if not isinstance(moments, dict):
        return False
    fields = {"count", "total", "total_sq", "nonfinite"}
    for value in moments.values():
        if not isinstance(value, dict) or set(value) != fields:
            return False
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in value.values()):
            return False
    return True


def _own_part(part: Any, task: int) -> bool:
    """Whether `part` is a well-formed description of one of task `task`'s part files."""
    if not isinstance(part, dict) or not isinstance(part.get("path"), str):
        return False
    split, shard, runs = part.get("split"), part.get("shard"), part.get("runs")
    if not isinstance(split, str) or not isinstance(shard, int) or not isinstance(runs, list):
        return False
    if not isinstance(part.get("offset", 0), int) or part.get("offset", 0) < 0:
        return False
    for run in runs:
        if not (isinstance(run, list) and len(run) == 3 and isinstance(run[0], str)):
            return False
        if not all(isinstance(n, int) and n >= 0 for n in run[1:]):
            return False
    own = f"{PARTS_DIR}/{split}/{shard:05d}/{task:06d}.records"
    plain_split = "/" not in split and split not in ("", ".", "..")
    return plain_split and own in (part["path"], _temp_of(part["path"]))


def _part_end(part: Mapping[str, Any]) -> int:
    return int(part.get("offset", 0)) + sum(int(run[2]) for run in part["runs"])


def _parts_present(output_dir: str, record: Mapping[str, Any]) -> bool:
    """Whether every part byte `record` names is on disk (a checkpoint's temporary part may be
    shorter after a machine crash, or gone after a task that failed was retried)."""
    for part in record["parts"]:
        size = storage.size(f"{output_dir}/{part['path']}")
        if size is None or size < _part_end(part):
            return False
    return True


def record_paths(output_dir: str) -> dict[int, list[str]]:
    """The commit and checkpoint records' paths in `output_dir`, by task (the name's task
    number): one listing of the records' directory, no record read."""
    import tensorflow as tf  # listing local and object-store directories alike

    directory = f"{output_dir}/{COMMITS_DIR}"
    found: dict[int, list[str]] = {}
    if not storage.isdir(directory):
        return found
    for name in sorted(tf.io.gfile.listdir(directory)):
        task = name.split("-", 1)[0]
        if name.endswith(".json") and task.isdigit():
            found.setdefault(int(task), []).append(f"{directory}/{name}")
    return found


def read_records(paths: Sequence[str]) -> list[tuple[str, Any]]:
    """(path, record | None when unreadable) of each of `paths`, in order."""
    out = []
    for path in paths:
        try:
            record = json.loads(storage.read_text(path))
        except (OSError, ValueError):  # written atomically: unreadable = absent
            record = None
        out.append((path, record))
    return out


def _chain(
    output_dir: str, task: Any, records: Sequence[tuple[str, Any]]
) -> list[tuple[str, dict]]:
    """Task `task`'s records to reuse, from its first segment on: at each point the record that
    covers most (a task's commit supersedes its checkpoints), while its bytes are on disk and
    each (split, shard) stays in one part file (a task's checkpoints all write into one file a
    shard; a retried attempt's are not mixed with another's)."""
    n = len(task.segments)
    candidates = [(p, r) for p, r in records if _reusable(r, task.task_id, n)]
    chain, at, files = [], 0, {}
    while True:
        here = sorted((r["stop"], p, r) for p, r in candidates if r["start"] == at)
        if not here:
            return chain
        stop, path, record = here[-1]
        keys = {(part["split"], part["shard"]): part["path"] for part in record["parts"]}
        if any(files.get(k, f) != f for k, f in keys.items()):
            return chain
        if not _parts_present(output_dir, record):
            return chain
        files.update(keys)
        chain.append((path, record))
        at = stop


def plan_reuse(output_dir: str, tasks: Sequence[Any], *, checkpoints: bool = True) -> Reuse:
    """The committed work of the run in `output_dir` that the planned `tasks` (`ReadTask`s)
    reuse (`task_reuse`, task by task): the tasks with their records, and the records not
    reused (those of a task not planned too).

    `checkpoints`: False for an output on an object store (a part there cannot be continued in
    place): only whole tasks' records are reused."""
    by_task = record_paths(output_dir)
    todo, stale, whole, windows = [], [], 0, 0
    for task in tasks:
        found = read_records(by_task.get(task.task_id, []))
        one = task_reuse(output_dir, task, found, checkpoints=checkpoints)
        todo += one.tasks
        stale += one.stale
        whole += one.whole_tasks
        windows += one.windows
    planned = {task.task_id for task in tasks}
    stale += [p for t, found in by_task.items() if t not in planned for p in found]
    return Reuse(tuple(todo), tuple(stale), whole, windows)


def task_reuse(
    output_dir: str,
    task: Any,
    found: Sequence[tuple[str, Any]],
    *,
    checkpoints: bool = True,
) -> Reuse:
    """What planned read task `task` reuses of its records `found` ((path, record | None),
    `read_records`): the task with the records it reuses (`_chain`), to read from where they
    stop, and its records not reused. `checkpoints` as `plan_reuse` takes it."""
    chain = _chain(output_dir, task, found)
    if not checkpoints and chain and chain[-1][1]["stop"] < len(task.segments):
        chain = []
    used = {path for path, _ in chain}
    stale = tuple(path for path, _ in found if path not in used)
    windows = sum(int(r["windows"]) for _, r in chain)
    at = chain[-1][1]["stop"] if chain else 0
    whole = at == len(task.segments)
    if whole:
        resumed = tuple(r for _, r in chain)
    else:  # reused up to a checkpoint (or not at all): the task goes on from there
        resumed = tuple({**r, "continued": True} for _, r in chain)
    segments = task.segments
    if at:  # pickled pieces (`task_coder.EncodedSegments`, a task planned in the job) stay so
        after = getattr(segments, "after", None)
        segments = after(at) if after is not None else segments[at:]
    todo = dataclasses.replace(task, segments=segments, start=at, resumed=resumed)
    return Reuse((todo,), stale, int(whole), windows)


def finished_result(info: Any, config: RecordConfig) -> RecordResult:
    """``--resume`` on a finished dataset (`info`: its checked `replay.DatasetInfo`): left
    untouched; its result, from its manifest and errors table."""
    errors = [dict(e) for e in info.errors]
    tables = [p for p, _ in match_inputs(config.annotations)] if config.annotations else []
    logging.getLogger("audiorecords").info("--resume: %s is finished: left untouched", info.path)
    result = RecordResult.from_manifest(
        json.loads(json.dumps(info.manifest, default=dict)),
        errors,
        output_dir=config.output_dir.rstrip("/") or "/",
        elapsed=0.0,
        audio_seconds=0.0,
        counters={},
        num_bad_rows=bad_table_rows(errors, tables),
    )
    return dataclasses.replace(result, already_complete=True)
