"""The manifest schema's splits and shards (`replay.manifest`): split names and counts, each shard's
entry (its file a plain name inside the directory of a commit, in commit order, named for its
index as the writer names it: `shard_name_problem`), a size that can hold its records, and its
record offsets file (format version 4). Its limits: `MAX_SPLITS`, `MAX_SHARDS_PER_SPLIT`,
`MAX_DEFLATE_RATIO`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from replay import format as fmt
from replay.json_checks import (
    Checker,
    field_of,
    show,
)
from replay.manifest_tables import check_digest

MAX_SPLITS = 1_000


MAX_SHARDS_PER_SPLIT = 1_000_000


MAX_DEFLATE_RATIO = 1032  # zlib's maximum compression ratio: GZIP / ZLIB shards shrink at most so


_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+")


def check_splits(
    c: Checker,
    splits: Any,
    *,
    name: str,
    compression: str,
    record_bytes: int,
    version: int,
    commit_dirs: Mapping[str, int],
    per_commit: list[int],
) -> int:
    """Checks every split and shard entry; returns the total example count.

    `commit_dirs`: each commit's directory -> its index (format version 5; ``{"": 0}`` before:
    the one implicit commit). Adds each shard's examples to `per_commit` at its commit's index.
    """
    splits = c.as_obj(splits, "splits")
    if not splits or len(splits) > MAX_SPLITS:
        c.fail("splits", f"{len(splits)} splits; expected 1 to {MAX_SPLITS}")
    if fmt.ALL_SPLIT in splits and len(splits) > 1:
        c.fail("splits", f"split {fmt.ALL_SPLIT!r} (a run without --splits) stands alone")
    total = 0
    for split, entry in splits.items():
        field = field_of("splits", split)
        if not _SPLIT_NAME.fullmatch(split) or not split.isascii():
            c.fail(field, "a split name is letters, digits and '_'")
        entry = c.as_obj(entry, field)
        for part in ("num_examples", "shards"):
            if part not in entry:
                c.fail(field_of(field, part), "missing")
        shards = c.as_list(entry["shards"], field_of(field, "shards"), limit=MAX_SHARDS_PER_SPLIT)
        listed = Counter(s["filename"] for s in shards if _named(s))
        places = _shard_places(c, shards, field_of(field, "shards"), commit_dirs, version=version)
        groups = Counter(directory for directory, _, _ in places)
        seen: Counter[str] = Counter()  # shards of each commit directory so far
        count = 0
        for i, (shard, (directory, commit, base)) in enumerate(zip(shards, places, strict=True)):
            sfield = f"{field_of(field, 'shards')}[{i}]"
            filename = shard["filename"]
            problem = shard_name_problem(
                base, name=name, split=split, index=seen[directory],
                num_shards=groups[directory], compression=compression,
            )  # fmt: skip
            seen[directory] += 1
            if listed[filename] > 1:
                problem = f"is listed {listed[filename]} times (each shard is read once)"
            if problem:
                c.fail(field_of(sfield, "filename"), f"{show(filename)} {problem}")
            examples = c.as_int(shard["num_examples"], field_of(sfield, "num_examples"))
            size = c.as_int(shard["num_bytes"], field_of(sfield, "num_bytes"))
            ratio = 1 if compression == "NONE" else MAX_DEFLATE_RATIO
            if examples * record_bytes > size * ratio:
                c.fail(
                    field_of(sfield, "num_bytes"),
                    f"{size} bytes cannot hold {examples} records of at least {record_bytes} "
                    "bytes (the element shapes or counts are wrong)",
                )
            _check_offsets(c, shard, sfield, version=version)
            count += examples
            per_commit[commit] += examples
        if c.as_int(entry["num_examples"], field_of(field, "num_examples")) != count:
            claim = entry["num_examples"]
            c.fail(field_of(field, "num_examples"), f"{claim} but its shards hold {count}")
        total += count
    return total


def _shard_places(
    c: Checker, shards: list[Any], field: str, commit_dirs: Mapping[str, int], *, version: int
) -> list[tuple[str, int, str]]:
    """``(commit directory, commit index, name in it)`` of each shard entry, every entry an
    object with its parts, its file inside the directory of a commit (a plain name in it), in
    commit order. Checked for every shard before any name is compared with the name its index
    gives, so a path that leaves its directory is the error reported."""
    places = []
    last = 0  # the commit of the shard before: shards come in commit order
    for i, shard in enumerate(shards):
        sfield = f"{field}[{i}]"
        shard = c.as_obj(shard, sfield)
        for part in ("filename", "num_examples", "num_bytes"):
            if part not in shard:
                c.fail(field_of(sfield, part), "missing")
        filename = c.as_str(shard["filename"], field_of(sfield, "filename"))
        directory = _commit_dir(filename, version)
        commit = commit_dirs.get(directory)
        if commit is None:
            known = [d for d in commit_dirs if d]
            c.fail(
                field_of(sfield, "filename"),
                f"{show(filename)} is in no commit's directory (the commits' directories: '' "
                f"and {show(known)})",
            )
        base = filename[len(directory) + 1 :] if directory else filename
        problem = fmt.plain_name_problem(base)
        if problem:
            c.fail(field_of(sfield, "filename"), f"{show(filename)} {problem}")
        if commit < last:
            c.fail(
                field_of(sfield, "filename"),
                f"{show(filename)} of commit {commit + 1} comes after a shard of commit "
                f"{last + 1} (shards are listed in commit order)",
            )
        last = commit
        places.append((directory, commit, base))
    return places


def _named(shard: Any) -> bool:
    return isinstance(shard, dict) and isinstance(shard.get("filename"), str)


def _commit_dir(filename: str, version: int) -> str:
    """The commit directory a shard `filename` names (format version 5: the part before its
    last ``/``); "" before version 5, where a shard name holds no directory."""
    if version < fmt.COMMITS_VERSION:
        return ""
    return fmt.split_shard_filename(filename)[0]


def _check_offsets(c: Checker, shard: Mapping[str, Any], field: str, *, version: int) -> None:
    """Format version 4: a shard's record offsets file, 8 bytes a record; none before."""
    if version < fmt.OFFSETS_VERSION:
        if "offsets" in shard:
            c.fail(field_of(field, "offsets"), f"needs format_version {fmt.OFFSETS_VERSION}")
        return
    if "offsets" not in shard:
        c.fail(field_of(field, "offsets"), "missing")
    size = check_digest(c, shard["offsets"], field_of(field, "offsets"))
    expected = fmt.OFFSET_BYTES * shard["num_examples"]
    if size != expected:
        c.fail(
            field_of(field_of(field, "offsets"), "num_bytes"),
            f"{size} bytes, but {shard['num_examples']} records take {expected}",
        )


def shard_name_problem(
    filename: str, *, name: str, split: str, index: int, num_shards: int, compression: str
) -> str | None:
    """Why `filename` is not the name of shard `index` of `split`, or None when it is.

    A shard name must be a plain file name inside the dataset directory (no separator, no
    ``..``, not absolute, no glob or control characters) and exactly the name the writer gives
    that shard (`format.shard_filename`): dataset name, split, index, count and compression
    suffix all agree with the manifest.
    """
    problem = fmt.plain_name_problem(filename)
    if problem:
        return problem
    expected = fmt.shard_filename(
        name=name, split=split, index=index, num_shards=num_shards, compression=compression
    )
    if filename != expected:
        return f"is not shard {index} of split {split!r} of this dataset (expected {expected!r})"
    return None
