"""Planning's own data: the scanned inputs (`ScannedInputs`), the validated run (`RecordPlan`)
and the dataset an ``--append`` run adds to (`Continuation`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from replay import format as fmt
from transforms.spec.types import InputFile, ReadTask, ReadWindowsConfig, Sharding


@dataclasses.dataclass(frozen=True)
class RecordPlan:
    """A validated run: inputs, configs and shard count."""

    output_dir: str
    name: str
    inputs: tuple[InputFile, ...]  # every matched file; `error` set on the unusable ones
    read: ReadWindowsConfig
    compression: str
    sharding: Sharding  # with the shard count per split
    tasks: tuple[ReadTask, ...]
    input_bytes: int
    params: Mapping[str, Any]
    classes: tuple[str, ...] = ()  # the class list in `target` order (labels.run_classes)
    analyzed_splits: tuple[str, ...] = (fmt.ALL_SPLIT,)  # splits TFT's statistics come from
    annotation_errors: tuple[dict, ...] = ()  # --annotations: bad table rows (manifest errors)
    input_stamps: tuple[tuple[str, int, float], ...] = ()  # (path, size, mtime): pipelines.resume


@dataclasses.dataclass(frozen=True)
class ScannedInputs:
    """What planning learns from storage (`scan_inputs`), before sizing the work."""

    output_dir: str  # without a trailing "/"
    inputs: tuple[InputFile, ...]  # headers read (`info`), or `error` set
    classes: tuple[str, ...]  # the class list in `target` order
    sharding: Sharding  # splits and classes; no shard counts yet
    signal_dtype: str  # resolved: holds every usable file exactly
    # --annotations: most events in one window (None: no tables; listed: 1, the least)
    max_events: int | None = None
    annotation_errors: tuple[dict, ...] = ()  # --annotations: bad table rows (headers read)
    # --annotations, listed: the rows refused before any header (RowError: unreadable, unknown
    # or ambiguous file), the inputs' `annotation` their matched rows (`FileEvents`)
    table_errors: tuple[Any, ...] = ()
    stamps: tuple[tuple[str, int, float], ...] = ()  # (path, size, mtime) of every match
    fixed_classes: tuple[str, ...] | None = None  # --classes, parsed


class Handover:
    """A value handed over once: `take` returns it and forgets it (None once taken)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def take(self) -> Any:
        value, self._value = self._value, None
        return value


@dataclasses.dataclass(frozen=True)
class HeldTables:
    """The dataset an ``--append`` planned in the job adds to, as its plan step compares the
    listing with it (`pipelines.plan.held`): small, no per-file list.

    Attributes:
      dataset_dir: the dataset appended to.
      parts: ``(table name, file, {"num_bytes", "sha256"}, count, the count's field)`` of each
        of its files / errors table files, every commit's (`replay.tables.SourceTables.parts`).
      first_index: the first new file's `index` (the listing is numbered from it too).
      skip_changed: ``--append_changed skip``: a changed input is left out, not refused.
      input_pattern: the append's ``--input_pattern`` (the "nothing new" line names it).
      version: the version appended to (the "nothing new" line names it).
    """

    dataset_dir: str
    parts: tuple[tuple[str, str, Mapping[str, Any], int, str], ...]
    first_index: int
    skip_changed: bool
    input_pattern: str
    version: int


@dataclasses.dataclass(frozen=True)
class Continuation:
    """The dataset an ``--append`` run adds to (`pipelines.append`), as planning needs it."""

    first_index: int  # the first new file's `index`: after every index the dataset gave
    split_base: str  # the prefix the dataset's own paths were hashed into splits without
    known: frozenset[str]  # the inputs the dataset holds (files and errors): not planned
    # --append_transform refresh: the dataset's {feature: Moments}, in the new statistics
    prior_moments: Mapping[str, Any] | None = None
    # planned in the job: the dataset's tables, compared with the listing there (`known` empty)
    held: HeldTables | None = None
    # the (path, size, mtime) listing the append planned with, handed to `list_inputs` once
    # (None, or taken: listed again)
    stamps: Handover | None = dataclasses.field(default=None, compare=False, repr=False)
