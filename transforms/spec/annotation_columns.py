"""The label columns of an annotated run's rows, as the read stage adds them to each file's rows.

Planning fixes every file's windows and their labels (`FileAnnotation`, made by
`pipelines.plan.annotated`, where the keys are described); a read task carries its segments'
rows of them, and `annotation_columns` gives the ``class``, ``labels``, ``events`` and
``num_events`` values of the rows the read stage cut (`transforms.stages.file_rows`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from replay import format as fmt
from transforms.spec.types import FileAnnotation


def annotation_columns(
    annotation: FileAnnotation, starts: np.ndarray, channels: np.ndarray
) -> dict[str, tuple[np.ndarray, int, pa.DataType]]:
    """The ``class``, ``labels``, ``events`` and ``num_events`` columns of k rows of a file.

    Args:
      annotation: the file's planned annotation.
      starts: int64 [k] window starts of the rows (each one of `annotation.starts`).
      channels: int64 [k] their channels (0 unless ``--channel_mode split``).

    Returns:
      {key: (flat values, values per row, Arrow value type)}
      (`transforms.stages.file_rows.list_column`).
    """
    window = np.searchsorted(annotation.starts, starts)
    if np.any(window >= len(annotation.starts)) or np.any(annotation.starts[window] != starts):
        raise ValueError("a row's window start is not one of the planned windows")
    rows = window * annotation.channels + np.asarray(channels, np.int64) - annotation.row_offset
    if len(rows) and (rows.min() < 0 or rows.max() >= len(annotation.classes)):
        raise ValueError("a row outside the rows this annotation holds")
    names = np.array([annotation.classes[r].encode() for r in rows], dtype=object)
    return {
        fmt.CLASS_KEY: (names, 1, pa.binary()),
        fmt.LABELS_KEY: (
            annotation.labels[rows].reshape(-1),
            annotation.labels.shape[1],
            pa.float32(),
        ),
        fmt.EVENTS_KEY: (
            annotation.events[rows].reshape(-1),
            annotation.events.shape[1] * 3,
            pa.int64(),
        ),
        fmt.NUM_EVENTS_KEY: (annotation.num_events[rows], 1, pa.int64()),
    }
