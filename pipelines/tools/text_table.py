"""Plain-text tables for `inspect`'s report: left-aligned columns, the first row the header."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def text_table(rows: Sequence[Sequence[Any]], indent: str = "  ") -> list[str]:
    """`rows` (the first is the header) as lines of left-aligned columns, each after `indent`.

    Raises:
      ValueError: `rows` is empty.
    """
    if not rows:
        raise ValueError("a table needs at least its header row")
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [
        indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
