"""The source tables of a dataset (``files`` and ``errors``), read only when first used.

Format versions 1 and 2 keep both lists inside manifest.json (validated with it); version 3 keeps
them in ``files.jsonl`` / ``errors.jsonl`` (`replay.format`), which `load_info` never opens: a
reader starts in a time that does not grow with the number of source files. From version 5 each
commit (dataset version) has its own pair in its directory, and a table is the concatenation of
every commit's, in commit order, each file checked against its commit's entry. `SourceTables`
reads a table on first use and checks it completely before returning anything from it:

- the file is a regular file inside the dataset directory, of exactly the manifest's
  ``tables.<name>.num_bytes`` (a stat, before it is opened), and its SHA-256 is the manifest's;
- every line is at most `format.MAX_TABLE_LINE_BYTES`, ends in a newline and holds one JSON
  object that passes the checks version 2's manifest lists get (`replay.manifest`), and there are
  exactly ``num_files`` / ``num_errors`` lines;
- a table may be absent only when its count is 0.

Any failure is a `ManifestError` naming the table file (and the line), e.g.
``out/files.jsonl: line 3: index: expected an integer, got string '2'``. When the digest
disagrees, that is the error given, whatever the lines hold.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from replay import format as fmt
from replay import storage
from replay.errors import ManifestError
from replay.json_checks import MAX_JSON_DEPTH, Checker, depth_ok
from replay.manifest_tables import check_error_entry, check_file_entry

_CHUNK_BYTES = 1 << 20


def freeze(obj: Any) -> Any:
    """A read-only deep copy of parsed JSON: dicts -> MappingProxyType, lists -> tuples."""
    if isinstance(obj, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in obj.items()})
    if isinstance(obj, list | tuple):
        return tuple(freeze(v) for v in obj)
    return obj


class SourceTables:
    """``files`` and ``errors`` of one dataset: from the manifest (v1, v2) or, on first use, from
    their table files (v3). Thread-safe; each table is read at most once."""

    def __init__(self, path: str, manifest: Mapping[str, Any]):
        """`manifest`: the validated manifest, frozen (`freeze`)."""
        self.path = path
        self._manifest = manifest
        self._lock = threading.Lock()
        self._loaded: dict[str, tuple[Mapping[str, Any], ...]] = {}
        self.in_manifest = manifest["format_version"] < fmt.TABLES_VERSION

    def count(self, name: str) -> int:
        """Entries of table `name` ("files" / "errors") without reading the table."""
        if self.in_manifest:
            return len(self._manifest.get(name, ()))
        return self._manifest[fmt.TABLE_COUNT_KEYS[name]]

    def table_path(self, name: str) -> str:
        """Table `name`'s file in the dataset directory (version 1's, format version 5)."""
        return storage.join(self.path, fmt.TABLE_FILENAMES[name])

    def parts(self, name: str) -> list[tuple[str, Mapping[str, Any], int, str]]:
        """``(path, {"num_bytes", "sha256"}, count, the count's field)`` of each file table
        `name` is made of, in order: one before format version 5, one a commit from it."""
        key = fmt.TABLE_COUNT_KEYS[name]
        if self._manifest["format_version"] < fmt.COMMITS_VERSION:
            return [(self.table_path(name), self._manifest["tables"][name], self.count(name), key)]
        return [
            (
                storage.join(self.path, fmt.commit_file(commit["dir"], fmt.TABLE_FILENAMES[name])),
                commit["tables"][name],
                commit[key],
                f"commits[{i}].{key}",
            )
            for i, commit in enumerate(self._manifest["commits"])
        ]

    def get(self, name: str) -> tuple[Mapping[str, Any], ...]:
        """The entries of table `name`, read and checked on the first call.

        Raises:
          ManifestError: the table is missing, disagrees with the manifest or holds a bad line.
        """
        with self._lock:
            if name not in self._loaded:
                if self.in_manifest:
                    entries = tuple(self._manifest.get(name, ()))  # validated and frozen
                else:  # one table file, or one a commit (version 5), in order
                    entries = tuple(
                        entry for part in self.parts(name) for entry in self._read(name, *part)
                    )
                self._loaded[name] = entries
            return self._loaded[name]

    def _read(
        self, name: str, path: str, expected: Mapping[str, Any], count: int, key: str
    ) -> tuple[Mapping[str, Any], ...]:
        """The `count` entries (the manifest's field `key`) of table file `path`, checked against
        its `expected` size and SHA-256."""
        return tuple(table_entries(self.path, name, path, expected, count, key))


def table_entries(
    root: str, name: str, path: str, expected: Mapping[str, Any], count: int, key: str
) -> Iterator[Mapping[str, Any]]:
    """The entries of table `name` ("files" / "errors") in its file `path` of the dataset
    `root`, one at a time as they are read: `count` of them (the manifest's field `key`), the
    file of the `expected` size and SHA-256 (a `SourceTables.parts` item). An entry is given
    once its line is checked; the file's whole checks end the iteration.

    Raises:
      ManifestError: as `SourceTables.get` (after the entries read before the problem).
    """
    size = _stat_table(root, path, missing_ok=count == 0)
    if size is None:  # absent, and the manifest says it is empty
        return
    if size != expected["num_bytes"]:
        raise ManifestError(
            f"{path}: table is {size} bytes but the manifest says {expected['num_bytes']} "
            "(truncated or rewritten after the run)"
        )
    check = check_file_entry if name == "files" else check_error_entry
    digest = hashlib.sha256()
    given = 0
    problem: str | None = None
    for number, line in enumerate(_lines(path, digest), start=1):
        if problem is not None:
            continue  # hash the rest: a digest mismatch is the error to give
        problem = _line_problem(line)
        if problem is None:
            checker = _LineChecker(f"{path}: line {number}")
            try:
                entry = check(checker, _parse(line, checker), "")
            except ManifestError as e:
                problem = str(e).removeprefix(f"{path}: ")
                continue
            given += 1
            yield freeze(entry)
        else:
            problem = f"line {number}: {problem}"
    if digest.hexdigest() != expected["sha256"]:
        raise ManifestError(
            f"{path}: table's SHA-256 is {digest.hexdigest()} but the manifest says "
            f"{expected['sha256']} (rewritten after the run)"
        )
    if problem is not None:
        raise ManifestError(f"{path}: {problem}")
    if given != count:
        raise ManifestError(
            f"{path}: table holds {given} entries but the manifest's {key} is {count}"
        )


class _LineChecker(Checker):
    """`replay.manifest`'s checks with "<table>: line <n>: <key>: <problem>" messages."""

    def fail(self, field: str, problem: str) -> None:
        where = f"{self.path}: {field}" if field else self.path
        raise ManifestError(f"{where}: {problem}")


def _stat_table(root: str, path: str, *, missing_ok: bool) -> int | None:
    """The table file's size; None when it is absent and may be. Refuses, before any byte is
    read, a table that leads outside the dataset or is not a regular file (a FIFO would block)."""
    target = storage.outside(root, path)
    if target is not None:
        raise ManifestError(f"{path}: leads outside the dataset directory (to {target})")
    if storage.is_url(path):
        size = storage.size(path)
    else:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            size = None
        else:
            if not stat.S_ISREG(st.st_mode):
                raise ManifestError(f"{path}: table is not a regular file")
            size = st.st_size
    if size is None and not missing_ok:
        raise ManifestError(
            f"{path}: table is missing but the manifest lists entries in it (an incomplete copy "
            "of the dataset?)"
        )
    return size


def _lines(path: str, digest: Any) -> Iterator[bytes]:
    """The file's lines, each with its ``\\n`` (the last may lack it), fed to `digest` as read.
    A line longer than `MAX_TABLE_LINE_BYTES` comes back cut to one byte over the limit."""
    limit = fmt.MAX_TABLE_LINE_BYTES
    if storage.is_url(path):
        import tensorflow as tf

        fh = tf.io.gfile.GFile(path, "rb")
    else:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    with fh:
        pending = b""
        skipping = False  # inside a line already given back cut
        while True:
            chunk = fh.read(_CHUNK_BYTES)
            if not chunk:
                break
            digest.update(chunk)
            pending += chunk
            start = 0
            while True:
                end = pending.find(b"\n", start)
                if end < 0:
                    break
                if not skipping:
                    yield pending[start : end + 1]
                skipping = False
                start = end + 1
            pending = pending[start:]
            if len(pending) > limit:
                if not skipping:
                    yield pending[: limit + 1]
                skipping, pending = True, b""
        if pending and not skipping:
            yield pending


def _line_problem(line: bytes) -> str | None:
    if len(line) > fmt.MAX_TABLE_LINE_BYTES:
        return f"longer than {fmt.MAX_TABLE_LINE_BYTES} bytes"
    if not line.endswith(b"\n"):
        return "no newline at the end (the table was cut short)"
    if line == b"\n":
        return "empty line"
    return None


def _parse(line: bytes, checker: Any) -> Any:
    try:
        value = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as e:
        checker.fail("", f"not UTF-8 ({e})")
    except (ValueError, RecursionError) as e:  # JSONDecodeError, a 5,000-digit integer, nesting
        checker.fail("", f"not JSON ({_short(e)})")
    if isinstance(value, dict | list) and not depth_ok(value):
        checker.fail("", f"nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def _short(error: Exception) -> str:
    text = str(error).replace("\n", " ")
    return text if len(text) <= 120 else text[:117] + "..."
