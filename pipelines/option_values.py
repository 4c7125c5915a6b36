"""The record options that parse into more than a value: ``--splits``, ``--analyze_splits``
and the ``--annotations`` options (`AnnotationConfig`).

Each parser raises `ValueError` naming the option; `pipelines.config.RecordConfig` turns it into
the user's one-line `UsageError`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from replay import format as fmt
from transforms.audio import annotation_windows as aw
from transforms.audio import annotations as ann

EVENT_WINDOWS = ("grid", "centered")  # --event_windows
TRAIN_SPLIT = "train"  # the split analysed by default when --splits is given
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")


@dataclasses.dataclass(frozen=True)
class AnnotationConfig:
    """The ``--annotations`` options.

    Attributes:
      pattern: glob of annotation tables.
      fmt: table format (`transforms.audio.annotations.FORMATS`).
      label_column: Raven label column (None: ``Annotation`` or the 8th column).
      rule: the window label rule.
      event_windows: ``grid`` (the usual windows) or ``centered`` (one per event).
      background_per_file: background windows per file with ``centered``.
      seed: seed of the background windows.
    """

    pattern: str
    fmt: str = "auto"
    label_column: str | None = None
    rule: aw.LabelRule = aw.LabelRule()
    event_windows: str = "grid"
    background_per_file: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.fmt not in ann.FORMATS:
            raise ValueError(f"--annotation_format must be one of {', '.join(ann.FORMATS)}")
        if self.event_windows not in EVENT_WINDOWS:
            raise ValueError(f"--event_windows must be one of {', '.join(EVENT_WINDOWS)}")
        if self.background_per_file < 0:
            raise ValueError("--background_per_file must be >= 0")
        if self.background_per_file and self.event_windows != "centered":
            raise ValueError("--background_per_file needs --event_windows centered")
        if self.background_per_file and self.rule.drop_background:
            raise ValueError("--background_per_file and --drop_background exclude each other")


def parse_splits(value: str | None) -> tuple[tuple[str, float], ...]:
    """``train=80,validation=10,test=10`` -> (("train", .8), ...); None/"" -> ().

    Raises:
      ValueError: malformed, duplicate or reserved names, or non-positive weights.
    """
    if not value:
        return ()
    parts = []
    for item in value.split(","):
        name, sep, weight = item.partition("=")
        name = name.strip()
        if not sep or not _SPLIT_NAME.match(name) or name == fmt.ALL_SPLIT:
            raise ValueError(f"--splits: bad item {item!r}; expected name=weight, e.g. train=80")
        try:
            w = float(weight)
        except ValueError:
            raise ValueError(f"--splits: weight of {name!r} is not a number: {weight!r}") from None
        if not w > 0:
            raise ValueError(f"--splits: weight of {name!r} must be > 0")
        parts.append((name, w))
    names = [n for n, _ in parts]
    if len(set(names)) != len(names):
        raise ValueError(f"--splits: duplicate split names in {value!r}")
    total = sum(w for _, w in parts)
    return tuple((n, w / total) for n, w in parts)


def parse_analyze_splits(value: str | None, *, split_names: Sequence[str]) -> tuple[str, ...]:
    """The splits TFT's full pass (z-score statistics) sees, from ``--analyze_splits``.

    Without ``--splits`` (the single split "all") that is everything; with splits, the named
    ones, by default ``train``: statistics from held-out data would leak into training features.

    Raises:
      ValueError: an unknown or repeated name, the option without ``--splits``, or splits
        without a ``train`` split and no ``--analyze_splits``.
    """
    if tuple(split_names) == (fmt.ALL_SPLIT,):
        if value:
            raise ValueError("--analyze_splits needs --splits")
        return (fmt.ALL_SPLIT,)
    if not value:
        if TRAIN_SPLIT not in split_names:
            raise ValueError(
                f"--splits has no split named {TRAIN_SPLIT!r} to compute statistics on; "
                f"name the analysed splits with --analyze_splits (of {', '.join(split_names)})"
            )
        return (TRAIN_SPLIT,)
    names = [n.strip() for n in value.split(",")]
    for i, name in enumerate(names):
        if name not in split_names:
            raise ValueError(
                f"--analyze_splits: unknown split {name!r}; --splits has {', '.join(split_names)}"
            )
        if name in names[:i]:
            raise ValueError(f"--analyze_splits: split {name!r} is listed twice")
    return tuple(names)
