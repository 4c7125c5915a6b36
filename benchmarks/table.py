"""The one table printer of the benchmarks: markdown tables and the ratio / spread cells in them.

Every scenario prints its results as markdown tables (pasted as they are into RESULTS.md) built
by `table`; a ratio is `ratio`'s ``1.23x`` (``-`` when either side is missing), a value of each
repeat with their median is `spread`'s ``a, b, c; median m``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence


def table(
    header: Sequence[str], rows: Iterable[Sequence[object]], *, align: str | None = None
) -> str:
    """A markdown table.

    Args:
      header: the column names.
      rows: the cells of each row (``str()`` of each; None shows as ``-``).
      align: one letter a column, ``l`` (left) or ``r`` (right); default: the first column
        left, the others right (names, then figures).

    Returns:
      The table's lines joined by newlines.

    Raises:
      ValueError: a row or `align` whose length is not the header's.
    """
    align = align or "l" + "r" * (len(header) - 1)
    if len(align) != len(header) or set(align) - {"l", "r"}:
        raise ValueError(f"align {align!r} does not fit {len(header)} columns of l / r")
    rule = " | ".join("---:" if a == "r" else "---" for a in align)
    lines = ["| " + " | ".join(header) + " |", f"| {rule} |"]
    for row in rows:
        cells = ["-" if c is None else str(c) for c in row]
        if len(cells) != len(header):
            raise ValueError(f"row {cells} has {len(cells)} cells, the header {len(header)}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def num(x: float | None, digits: int = 2) -> str:
    """`x` with `digits` decimals, ``-`` for None."""
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(a: float | None, b: float | None, *, digits: int = 2) -> str:
    """``a / b`` as ``1.23x``; ``-`` when either is missing or `b` is 0."""
    if a is None or not b:
        return "-"
    return f"{a / b:.{digits}f}x"


def spread(values: Sequence[float], *, digits: int = 2, unit: str = "") -> str:
    """Each repeat's value and their median: ``a, b, c; median m<unit>`` (``-`` if none)."""
    if not values:
        return "-"
    shown = ", ".join(f"{v:.{digits}f}" for v in values)
    return f"{shown}; median {statistics.median(values):.{digits}f}{unit}"
