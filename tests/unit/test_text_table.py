"""Plain-text tables of `inspect`'s report (`pipelines.tools.text_table`): left-aligned columns as
wide as their widest cell, two spaces apart, after an indent; no trailing spaces."""

from __future__ import annotations

import pytest

from pipelines.tools.text_table import text_table


def test_columns_are_left_aligned_to_their_widest_cell():
    rows = [("class", "windows", "share"), ("bird", 6, 0.5), ("engine-noise", 12, None)]
    assert text_table(rows) == [
        "  class         windows  share",
        "  bird          6        0.5",
        "  engine-noise  12       None",
    ]
    assert text_table([("a", "")], indent="") == ["a"]  # no trailing spaces
    assert text_table([("id",), (7,)], indent="> ") == ["> id", "> 7"]


def test_a_table_needs_its_header_and_rows_of_its_width():
    with pytest.raises(ValueError, match="at least its header row"):
        text_table([])
    with pytest.raises(ValueError):
        text_table([("a",), ("x", "y")])
