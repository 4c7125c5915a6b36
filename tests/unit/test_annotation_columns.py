"""The label columns the read stage adds to an annotated file's rows (`annotation_columns`), from
a file's planned annotation written out by hand: rows in any order, a read task's share of the
rows, and the rows no plan made refused."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from replay import format as fmt
from transforms.spec.annotation_columns import annotation_columns
from transforms.spec.types import FileAnnotation

RATE = 8000
# Two windows (at 1 s and 3 s) of a two-channel file, rows in (window, channel) order: "tug" on
# channel 1 of the first window, "whale" on both channels of the second.
PLANNED = FileAnnotation(
    starts=np.array([RATE, 3 * RATE], np.int64),
    channels=2,
    classes=("background", "tug", "whale", "whale"),
    labels=np.array([[0, 0], [1, 0], [0, 1], [0, 1]], np.float32),
    events=np.array([[[-1, -1, -1]], [[0, RATE, 0]], [[0, RATE, 1]], [[0, RATE, 1]]], np.int64),
    num_events=np.array([0, 1, 1, 1], np.int64),
)


def test_the_columns_of_rows_in_any_order():
    cols = annotation_columns(PLANNED, np.array([3 * RATE, RATE]), np.array([1, 1]))
    assert cols[fmt.CLASS_KEY][0].tolist() == [b"whale", b"tug"]
    assert cols[fmt.LABELS_KEY][0].tolist() == [0, 1, 1, 0]
    assert cols[fmt.EVENTS_KEY][0].tolist() == [0, RATE, 1, 0, RATE, 0]
    assert cols[fmt.NUM_EVENTS_KEY][0].tolist() == [1, 1]
    assert {key: (width, kind) for key, (_, width, kind) in cols.items()} == {
        fmt.CLASS_KEY: (1, pa.binary()),
        fmt.LABELS_KEY: (2, pa.float32()),
        fmt.EVENTS_KEY: (3, pa.int64()),
        fmt.NUM_EVENTS_KEY: (1, pa.int64()),
    }


def test_a_read_tasks_share_of_the_rows():
    held = PLANNED.rows(2, 4)  # what a read task of rows [2, 4) carries: the window at 3 s only
    assert (held.row_offset, held.classes) == (2, ("whale", "whale"))
    cols = annotation_columns(held, np.array([3 * RATE, 3 * RATE]), np.array([0, 1]))
    assert cols[fmt.CLASS_KEY][0].tolist() == [b"whale", b"whale"]
    with pytest.raises(ValueError, match="outside the rows"):
        annotation_columns(held, np.array([RATE]), np.array([0]))
    with pytest.raises(ValueError, match="not one of the planned windows"):
        annotation_columns(PLANNED, np.array([5]), np.array([0]))
