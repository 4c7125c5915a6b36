"""The plain data a record run's plan is made of (frozen, picklable: shipped to workers).

`pipelines.plan` builds them before any work; the Beam stages (`transforms.stages`) read them.
No Beam here, and no logic beyond a derived property or two: the rules that fill them in are in
`pipelines.plan`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from replay import format as fmt
from transforms.audio import features as feats
from transforms.audio import wav
from transforms.audio.windows import WindowConfig
from transforms.spec.layout import RecordLayout

CHANNEL_MODES = ("first", "mean", "split")


@dataclasses.dataclass(frozen=True)
class FileAnnotation:
    """A file's planned windows and their label columns, rows in (window, channel) order.

    The row arrays may hold only rows [row_offset, row_offset + len(classes)) of the file: a
    read task carries its segment's rows (`pipelines.plan.annotated.segment_tasks`), not the
    whole file's, while `starts` always lists every window (8 bytes each).
    """

    starts: np.ndarray  # int64 [n] sorted, unique window starts (output-rate samples)
    channels: int  # rows per window
    classes: tuple[str, ...]  # [n * channels] the `class` string of each row
    labels: np.ndarray  # float32 [n * channels, num_classes]
    events: np.ndarray  # int64 [n * channels, max_events, 3]
    num_events: np.ndarray  # int64 [n * channels]
    summary: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # annotation_stats
    row_offset: int = 0  # file row of the first row held

    def rows(self, start: int, stop: int) -> FileAnnotation:
        """The same annotation holding only file rows [start, stop) (within those it holds)."""
        lo, hi = start - self.row_offset, stop - self.row_offset
        if lo < 0 or hi > len(self.classes) or hi < lo:
            raise ValueError(f"rows [{start}, {stop}) are not all held")
        return dataclasses.replace(
            self,
            classes=self.classes[lo:hi],
            labels=self.labels[lo:hi],
            events=self.events[lo:hi],
            num_events=self.num_events[lo:hi],
            row_offset=start,
        )

    @property
    def num_rows(self) -> int:
        return len(self.classes)


def _reduce_to_values(self: object) -> tuple:
    """Pickles a slotted dataclass as its class and field values, in order: compact and fast
    for the types planning makes one of per file (the read tasks ship them to the workers)."""
    return type(self), tuple(getattr(self, name) for name in self.__slots__)


@dataclasses.dataclass(frozen=True, slots=True)
class FileEvents:
    """A listed file's annotation table rows, before its header is read: what the launcher's
    match of the tables gives it (`pipelines.plan.annotated.match_tables`), turned into its
    `FileAnnotation` once the header is known (`pipelines.plan.annotated.annotate_file`)."""

    events: tuple[Any, ...]  # transforms.audio.annotations.Event, in table order

    __reduce__ = _reduce_to_values


@dataclasses.dataclass(frozen=True, slots=True)
class InputFile:
    """One matched input file, as planned. `info` is its header (None when `error` is set).

    Slotted (one per matched file, in the launcher and in every read task's segments).
    """

    index: int
    path: str
    size_bytes: int
    label: str | None = None
    split: str = fmt.ALL_SPLIT
    info: wav.WavInfo | None = None
    error: str | None = None  # the reason the file cannot be used (label or header problem)
    # --annotations: the file's planned windows and label columns (pipelines.plan.annotated);
    # before its header is read, its matched table rows (None: no row names it)
    annotation: FileAnnotation | FileEvents | None = dataclasses.field(
        default=None, compare=False, repr=False
    )
    modified: float = 0.0  # the listing's modification time (seconds since the epoch; 0: none)

    __reduce__ = _reduce_to_values


@dataclasses.dataclass(frozen=True)
class ReadWindowsConfig:
    """Everything the read stage `ReadWindows` needs (picklable, shipped to workers)."""

    window: WindowConfig
    layout: RecordLayout
    features: feats.FeatureConfig
    channel_mode: str = "first"
    sample_rate: int | None = None  # resample every file to this rate (scipy resample_poly)
    strict: bool = False
    signal_dtype: str = "int16"  # resolved at planning (`transforms.audio.dtypes.resolve`)
    compute_threads: int = 1  # threads per process for features (set from the runner)


@dataclasses.dataclass(frozen=True)
class Sharding:
    """How windows are assigned to splits and shards (picklable; shipped to workers).

    Attributes:
      shard_by: hash, file or class (ignored when `shard_func` is set).
      splits: ((name, fraction), ...) summing to 1; empty for the single split "all".
      split_base: prefix stripped from paths before hashing them into splits.
      classes: sorted class labels (``shard_by="class"``).
      elements_per_shard: exact shard size by element rank (None: count from planning).
      max_elements: keep only the first that many elements (by rank, over all splits).
      shard_func: user callable element dict -> int (Python API only).
      num_shards: shard count per split, fixed at planning.
    """

    shard_by: str = "hash"
    splits: tuple[tuple[str, float], ...] = ()
    split_base: str = ""
    classes: tuple[str, ...] = ()
    elements_per_shard: int | None = None
    max_elements: int | None = None
    shard_func: Callable[[dict], int] | None = None
    num_shards: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.splits) or (fmt.ALL_SPLIT,)


@dataclasses.dataclass(frozen=True, slots=True)
class Segment:
    """Rows [row_start, row_stop) of one file; `split_rank` is the split rank of its row 0."""

    file: InputFile
    row_start: int
    row_stop: int
    split_rank: int

    __reduce__ = _reduce_to_values


@dataclasses.dataclass(frozen=True)
class ReadTask:
    """A unit of parallel reading: consecutive segments in file-index order."""

    task_id: int
    segments: tuple[Segment, ...]
    # the planned task's segment `segments[0]` is (> 0: a task a resumed run continues, its
    # first `start` segments reused from the checkpoint records `resumed` of an earlier run)
    start: int = 0
    resumed: tuple = ()

    @property
    def rows(self) -> int:
        return sum(s.row_stop - s.row_start for s in self.segments)


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    """Where shards go: ``<output_dir>/<name>[-<split>].tfrecord-i-of-n``."""

    output_dir: str
    name: str
