"""A bounded sample of a dataset's elements for the report: example windows and feature stats.

Reads at most `max_elements` elements through `replay.replay_dataset` (imports TensorFlow, never
Beam), in batches, keeping only running sums per feature and a few example windows per class, so
memory does not grow with the dataset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from pipelines.tools import report_annotations
from pipelines.tools.report import display_feature, image_features
from replay import DatasetInfo
from replay import format as fmt

DEFAULT_MAX_ELEMENTS = 2000
DEFAULT_EXAMPLES_PER_CLASS = 3
DEFAULT_MAX_CLASSES = 12
_BATCH = 32
_FULL_SCALE = {"int16": 2.0**15, "int32": 2.0**31, "float32": 1.0}


@dataclasses.dataclass
class FeatureStats:
    """Running mean / std of one [frames, bins] feature, per bin and per frame.

    Attributes:
      key: the feature key.
      count: elements seen.
      bin_sum / bin_sumsq: sums over elements and frames, one value per bin.
      frame_sum / frame_sumsq: sums over elements and bins, one value per frame.
    """

    key: str
    count: int
    bin_sum: np.ndarray
    bin_sumsq: np.ndarray
    frame_sum: np.ndarray
    frame_sumsq: np.ndarray

    @classmethod
    def empty(cls, key: str, shape: tuple[int, ...]) -> FeatureStats:
        frames, bins = shape
        zeros = np.zeros
        return cls(key, 0, zeros(bins), zeros(bins), zeros(frames), zeros(frames))

    def update(self, batch: np.ndarray) -> None:
        """Adds a [batch, frames, bins] array."""
        x = batch.astype(np.float64)
        self.count += x.shape[0]
        self.bin_sum += x.sum(axis=(0, 1))
        self.bin_sumsq += np.square(x).sum(axis=(0, 1))
        self.frame_sum += x.sum(axis=(0, 2))
        self.frame_sumsq += np.square(x).sum(axis=(0, 2))

    @staticmethod
    def _mean_std(total: np.ndarray, sumsq: np.ndarray, n: float) -> tuple[np.ndarray, np.ndarray]:
        n = max(n, 1.0)
        mean = total / n
        return mean, np.sqrt(np.maximum(sumsq / n - np.square(mean), 0.0))

    def per_bin(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std) of each bin over sampled elements and time frames."""
        return self._mean_std(self.bin_sum, self.bin_sumsq, self.count * len(self.frame_sum))

    def per_frame(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std) of each time frame over sampled elements and bins."""
        return self._mean_std(self.frame_sum, self.frame_sumsq, self.count * len(self.bin_sum))

    def overall(self) -> tuple[float, float]:
        """(mean, std) over every value seen."""
        n = self.count * len(self.frame_sum) * len(self.bin_sum)
        mean, std = self._mean_std(self.bin_sum.sum(), self.bin_sumsq.sum(), n)
        return float(mean), float(std)


@dataclasses.dataclass(frozen=True)
class Example:
    """One example window for the grid.

    Attributes:
      label: its class.
      filepath: its source file.
      win_start: offset of the window in the file, in samples.
      sample_rate: samples per second.
      waveform: the samples scaled to [-1, 1] (signal / full scale), float32.
      image: the display feature, [frames, bins], or None when no feature was recorded.
      events: ``--annotations``: (start, end, class id) of the events overlapping the window,
        in samples from its start.
    """

    label: str
    filepath: str
    win_start: int
    sample_rate: int
    waveform: np.ndarray
    image: np.ndarray | None
    events: tuple[tuple[int, int, int], ...] = ()


@dataclasses.dataclass
class Sample:
    """What the report draws from element contents.

    Attributes:
      num_elements: elements read.
      image_key: the feature drawn beside the waveforms (None: waveform only).
      classes: the classes of the example grid, in `target` order (at most max_classes).
      examples: class -> its example windows.
      stats: feature key -> its running statistics.
    """

    num_elements: int
    image_key: str | None
    classes: list[str]
    examples: dict[str, list[Example]]
    stats: dict[str, FeatureStats]


def _full_scales(info: DatasetInfo) -> dict[int, float]:
    """Source file index -> the full scale its features were computed on."""
    return {int(f["index"]): float(f.get("full_scale") or 1.0) for f in info.files}


def _get(batch: Mapping[str, np.ndarray], key: str, i: int, default: object) -> object:
    return batch[key][i] if key in batch else default


def _example(
    batch: Mapping[str, np.ndarray],
    i: int,
    *,
    label: str,
    filepath: str,
    image_key: str | None,
    scale: float,
) -> Example:
    return Example(
        label=label,
        filepath=filepath,
        win_start=int(_get(batch, fmt.WIN_START_KEY, i, 0)),
        sample_rate=int(_get(batch, fmt.SAMPLE_RATE_KEY, i, 0)),
        waveform=batch[fmt.SIGNAL_KEY][i].astype(np.float32) / scale,  # a copy, not a view
        image=None if image_key is None else np.array(batch[image_key][i], dtype=np.float32),
        events=report_annotations.example_events(batch, i),
    )


def _keep_examples(
    sample: Sample,
    spares: dict[str, list[Example]],
    batch: Mapping[str, np.ndarray],
    *,
    per_class: int,
    full_scales: Mapping[int, float],
    default_scale: float,
) -> None:
    """Keeps windows of new source files first; windows of already-shown files become spares."""
    for i, raw_label in enumerate(batch[fmt.CLASS_KEY]):
        label = raw_label.decode("utf-8", "replace")
        kept = sample.examples.get(label)
        if kept is None or len(kept) >= per_class:
            continue
        filepath = _get(batch, fmt.FILEPATH_KEY, i, b"").decode("utf-8", "replace")
        repeat = any(ex.filepath == filepath for ex in kept)
        target = spares.setdefault(label, []) if repeat else kept
        if len(target) >= per_class:
            continue
        scale = full_scales.get(int(_get(batch, fmt.INDEX_KEY, i, -1)), default_scale)
        target.append(
            _example(
                batch, i, label=label, filepath=filepath, image_key=sample.image_key, scale=scale
            )
        )


def _fill_from_spares(sample: Sample, spares: Mapping[str, list[Example]], per_class: int) -> None:
    """Tops up classes with fewer distinct source files than `per_class` from their spares."""
    for label, kept in sample.examples.items():
        extra = spares.get(label, [])[: max(per_class - len(kept), 0)]
        kept.extend(extra)
        kept.sort(key=lambda ex: (ex.filepath, ex.win_start))


def sample_elements(
    info: DatasetInfo,
    *,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    examples_per_class: int = DEFAULT_EXAMPLES_PER_CLASS,
    max_classes: int = DEFAULT_MAX_CLASSES,
    seed: int = 0,
) -> Sample:
    """Reads up to `max_elements` elements (shards in a seeded random order).

    Args:
      info: the dataset's info (`replay.load_info`).
      max_elements: elements read at most; memory holds one batch plus the examples.
      examples_per_class: example windows kept per class.
      max_classes: classes in the example grid (the first ones in `target` order).
      seed: shard shuffle seed (the same seed reads the same elements).

    Returns:
      The sample.
    """
    import tensorflow as tf

    from replay import CorruptShardError, replay_dataset

    features = image_features(info)
    sample = Sample(
        num_elements=0,
        image_key=display_feature(info),
        classes=list(info.classes[:max_classes]),
        examples={c: [] for c in info.classes[:max_classes]},
        stats={k: FeatureStats.empty(k, info.elements[k].shape) for k in features},
    )
    if max_elements <= 0 or info.num_examples() == 0:
        return sample
    keys = [
        fmt.CLASS_KEY,
        fmt.FILEPATH_KEY,
        fmt.INDEX_KEY,
        fmt.WIN_START_KEY,
        fmt.SAMPLE_RATE_KEY,
        fmt.SIGNAL_KEY,
        "events",  # --annotations: drawn over the example waveforms
        "num_events",
        *features,
    ]
    keys = [k for k in keys if k in info.elements]
    ds = replay_dataset(
        info.path,
        features=keys,
        shuffle_shards=True,
        seed=seed,
        cycle_length=min(4, len(info.shard_list())),
        batch_size=_BATCH,
        prefetch=1,
    ).take(-(-max_elements // _BATCH))
    full_scales = _full_scales(info)
    default_scale = _FULL_SCALE.get(info.elements[fmt.SIGNAL_KEY].dtype, 1.0)
    spares: dict[str, list[Example]] = {}
    try:
        for batch in ds.as_numpy_iterator():
            n = min(len(batch[fmt.CLASS_KEY]), max_elements - sample.num_elements)
            batch = {k: v[:n] for k, v in batch.items()}
            sample.num_elements += n
            for key, stats in sample.stats.items():
                stats.update(batch[key])
            _keep_examples(
                sample,
                spares,
                batch,
                per_class=examples_per_class,
                full_scales=full_scales,
                default_scale=default_scale,
            )
    except tf.errors.OpError as e:  # e.g. a shard corrupted in place (the message names it)
        raise CorruptShardError(" ".join(e.message.split())) from e
    _fill_from_spares(sample, spares, examples_per_class)
    return sample
