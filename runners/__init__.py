"""Runner-specific choices, in one place, so pipelines/ and transforms/ stay runner-agnostic.

Moving the record job from a laptop to a cluster is a change of flags: ``--runner`` picks an
engine from `ENGINES`, and `configure` turns the user's flags into final Beam options:

- checks them before any work (`check`: static, also used to test the documented recipes;
  then the engine's own probes: endpoints answer, jars and files exist), failing with one line;
- fills in what each engine needs: the DirectRunner's running mode, our packages staged from
  setup.py for Dataflow and container workers, the one-numeric-thread worker plugin, LOOPBACK
  for embedded job services.

See docs/running-at-scale.md for the recipes.

The package imports lazily: `import runners` alone imports no Apache Beam (``runners.quiet``,
used by the Beam-free ``python -m pipelines.verify`` / ``inspect``, lives here too); the names
below load `runners.engines`, and with it Beam, on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ENGINES",
    "KNOWN_RUNNERS",
    "Engine",
    "RunnerError",
    "check",
    "compute_threads",
    "configure",
    "engine_for",
    "runner_name",
    "sequential_tasks",
    "translation_only",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("runners.engines"), name)
    raise AttributeError(f"module 'runners' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
