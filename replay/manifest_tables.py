"""The manifest schema's source tables (`replay.manifest`): the ``files`` / ``errors`` lists of
format versions 1 and 2 and their entries (`check_file_entry`, `check_error_entry`, also run on
each line of files.jsonl / errors.jsonl by `replay.tables`), the tables' counts and digests
(versions 3 and 4 in the manifest, 5 per commit), and a file's ``{num_bytes, sha256}`` entry.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from replay import format as fmt
from replay.json_checks import (
    Checker,
    field_of,
    show,
)

_FILE_FIELDS = {  # files[] keys the readers use -> ("str" | "int" | "time" | "scale", required)
    "path": ("str", True),
    "index": ("int", True),
    "size_bytes": ("int", False),  # format version 5
    "modified": ("time", False),  # format version 5: seconds since the epoch
    "label": ("str", False),
    "split": ("str", False),
    "num_windows": ("int", False),
    "sample_rate": ("int", False),
    "num_frames": ("int", False),
    "num_channels": ("int", False),
    "subtype": ("str", False),
    "full_scale": ("scale", False),
}


def check_sources(c: Checker, manifest: Mapping[str, Any]) -> None:
    """``files`` and ``errors`` (format versions 1, 2): the source-file lists `pipelines.inspect`
    and serving read."""
    files = c.optional_list(manifest, "files", "")
    for i, entry in enumerate(files or ()):
        check_file_entry(c, entry, f"files[{i}]")
    errors = c.optional_list(manifest, "errors", "")
    for i, entry in enumerate(errors or ()):
        check_error_entry(c, entry, f"errors[{i}]")


def check_file_entry(c: Checker, entry: Any, field: str) -> dict[str, Any]:
    """One ``files`` entry (a manifest list item, or a line of files.jsonl); returns it."""
    entry = c.as_obj(entry, field)
    for key, (kind, required) in _FILE_FIELDS.items():
        if key not in entry:
            if required:
                c.fail(field_of(field, key), "missing")
            continue
        value = entry[key]
        if kind == "str":
            c.as_str(value, field_of(field, key))
        elif kind == "int":
            c.as_int(value, field_of(field, key))
        elif kind == "time":
            if type(value) not in (int, float) or not (math.isfinite(value) and value >= 0):
                c.fail(field_of(field, key), f"expected a time >= 0, got {show(value)}")
        elif type(value) not in (int, float) or not (math.isfinite(value) and value > 0):
            c.fail(field_of(field, key), f"expected a positive number, got {show(value)}")
    return entry


def check_error_entry(c: Checker, entry: Any, field: str) -> dict[str, Any]:
    """One ``errors`` entry (a manifest list item, or a line of errors.jsonl); returns it."""
    entry = c.as_obj(entry, field)
    for key in ("path", "reason"):
        c.optional(entry, key, field, c.as_str)
    return entry


_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_tables(c: Checker, manifest: Mapping[str, Any]) -> None:
    """Format version 3: the counts and digests of files.jsonl / errors.jsonl (their entries
    are checked when a reader reads them, `replay.tables`); no list in the manifest itself."""
    for key in fmt.TABLE_FILENAMES:
        if key in manifest:
            c.fail(
                key,
                f"a format_version {manifest['format_version']} manifest holds no {key} list "
                f"(its entries are in {fmt.TABLE_FILENAMES[key]})",
            )
    for key in (*fmt.TABLE_COUNT_KEYS.values(), "tables"):
        if key not in manifest:
            c.fail(key, "missing")
    check_table_digests(c, manifest, "")


def check_table_digests(c: Checker, owner: Mapping[str, Any], parent: str) -> None:
    """`owner`'s ``tables`` (the manifest's, v3 and v4; a commit's, v5) against its counts."""
    tables = c.as_obj(owner["tables"], field_of(parent, "tables"))
    for key, count_key in fmt.TABLE_COUNT_KEYS.items():
        count = c.as_int(owner[count_key], field_of(parent, count_key))
        field = field_of(field_of(parent, "tables"), key)
        if key not in tables:
            c.fail(field, "missing")
        size = check_digest(c, tables[key], field)
        least, most = 3 * count, count * fmt.MAX_TABLE_LINE_BYTES  # "{}\n" .. the longest line
        if not least <= size <= most:
            c.fail(
                field_of(field, "num_bytes"),
                f"{size} bytes cannot hold {field_of(parent, count_key)} {count} lines of 3 to "
                f"{fmt.MAX_TABLE_LINE_BYTES} bytes",
            )


def check_digest(c: Checker, entry: Any, field: str) -> int:
    """A file's ``{"num_bytes", "sha256"}`` entry (a source table's, a shard's record offsets');
    returns its size."""
    entry = c.as_obj(entry, field)
    for part in ("num_bytes", "sha256"):
        if part not in entry:
            c.fail(field_of(field, part), "missing")
    size = c.as_int(entry["num_bytes"], field_of(field, "num_bytes"))
    digest = c.as_str(entry["sha256"], field_of(field, "sha256"))
    if not _SHA256.fullmatch(digest):
        c.fail(field_of(field, "sha256"), f"{show(digest)} is not 64 lowercase hex digits")
    return size
