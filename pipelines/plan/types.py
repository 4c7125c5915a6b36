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
    max_events: int | None = None  # --annotations: most events in one window (None: no tables)
    annotation_errors: tuple[dict, ...] = ()  # --annotations: bad table rows
    stamps: tuple[tuple[str, int, float], ...] = ()  # (path, size, mtime) of every match
    fixed_classes: tuple[str, ...] | None = None  # --classes, parsed


@dataclasses.dataclass(frozen=True)
class Continuation:
    """The dataset an ``--append`` run adds to (`pipelines.append`), as planning needs it."""

    first_index: int  # the first new file's `index`: after every index the dataset gave
    split_base: str  # the prefix the dataset's own paths were hashed into splits without
    known: frozenset[str]  # the inputs the dataset holds (files and errors): not planned
    # --append_transform refresh: the dataset's {feature: Moments}, in the new statistics
    prior_moments: Mapping[str, Any] | None = None
