"""Beam pipelines of audiorecords: ``python -m pipelines.record`` and its Python API.

``from pipelines import record_dataset`` runs the record job from Python (see `pipelines.api`),
from a `RecordConfig` (``from pipelines import RecordConfig``) or keywords.
Attributes load lazily so that ``python -m pipelines.inspect`` / ``pipelines.verify`` do not pay
for (or need) Apache Beam.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "record_dataset": "pipelines.api",
    "RecordConfig": "pipelines.config",
    "RecordResult": "pipelines.result",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pipelines' has no attribute {name!r}")
