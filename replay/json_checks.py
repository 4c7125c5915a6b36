"""Typed checks of untrusted JSON fields: the `Checker` manifest.json (`replay.manifest`) and the
source tables files.jsonl / errors.jsonl (`replay.tables`) are validated with.

Each check returns the value when it has the expected JSON type and range, else raises
`ManifestError` "<path>: <field>: <problem>", the field named as a reader would write it
(``splits.train.shards[0].filename``) and the value shown short (`show`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from replay.errors import ManifestError

MAX_JSON_DEPTH = 32  # the writer nests 4 deep; this bounds recursion on crafted input
MAX_COUNT = 1 << 48  # any example or byte count (sums stay far inside int64)


def show(value: Any, limit: int = 80) -> str:
    """A short one-line repr of a (possibly huge, possibly multi-line) JSON value."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def got(value: Any) -> str:
    """``string 'x'``, ``integer 5``, ``null``: what a field held, for a type error."""
    return kind_of(value) if value is None else f"{kind_of(value)} {show(value)}"


def kind_of(value: Any) -> str:
    names = {dict: "object", list: "list", str: "string", bool: "bool", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def field_of(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{show(key)}]"


class Checker:
    """Raises `ManifestError` "<manifest path>: <field>: <problem>" on the first failure."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, field: str, problem: str) -> None:
        raise ManifestError(f"{self.path}: {field}: {problem}")

    def as_obj(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(field, f"expected an object, got {got(value)}")
        return value

    def as_list(self, value: Any, field: str, *, limit: int) -> list[Any]:
        if not isinstance(value, list):
            self.fail(field, f"expected a list, got {got(value)}")
        if len(value) > limit:
            self.fail(field, f"{len(value)} entries, more than the limit {limit}")
        return value

    def as_str(self, value: Any, field: str) -> str:
        if not isinstance(value, str):
            self.fail(field, f"expected a string, got {got(value)}")
        return value

    def as_int(self, value: Any, field: str, *, low: int = 0, high: int = MAX_COUNT) -> int:
        if type(value) is not int:  # bool is an int subclass; 5.0, "5", null are not counts
            self.fail(field, f"expected an integer, got {got(value)}")
        if not low <= value <= high:
            self.fail(field, f"{show(value)} outside [{low}, {high}]")
        return value

    def optional(self, obj: Mapping[str, Any], key: str, parent: str, check: Any) -> Any:
        """`check(value, field)` when `key` is present (JSON null counts as present)."""
        if key in obj:
            return check(obj[key], field_of(parent, key))
        return None

    def optional_list(
        self, obj: Mapping[str, Any], key: str, parent: str, *, limit: int = MAX_COUNT
    ) -> list[Any] | None:
        return self.optional(obj, key, parent, lambda v, f: self.as_list(v, f, limit=limit))


def depth_ok(value: Any, depth: int = 1) -> bool:
    """Whether `value` nests at most MAX_JSON_DEPTH containers deep (the recursion stops there)."""
    if depth > MAX_JSON_DEPTH:
        return False
    children = value.values() if isinstance(value, dict) else value
    return all(depth_ok(v, depth + 1) for v in children if isinstance(v, dict | list))
