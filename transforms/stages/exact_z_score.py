"""``<feature>_norm``: tensorflow-transform's z-score with exact, order-independent statistics.

`scale_to_z_score` is ``tft.scale_to_z_score``'s graph (the same ops, names and var == 0 rule)
whose mean and variance come from `MeanVarAnalyzer`, a ``tft.experimental.ptransform_analyzer``:
TFT runs it in its analysis and puts its two outputs into the transform graph as constants, as it
does its own analyzers' (``transform_fn/`` is an ordinary TFT graph; `finalize` reads the two
constants back by their consumers' names in the ``z_score_<feature>`` scope).

The statistics are `transforms.stages.moments.Moments` totals: exact integers, so the result is
the same for any cut of the rows into batches, tasks and bundles and any merge order (in_memory
and multi_processing runners give the same bits). Where the moments come from:

- the record job (`transforms.stages.composites.Analyze`): the read stage computes each analysed
  row's moments as it reads and hands one ``{feature: Moments}`` per piece of a task (the
  ``stats`` output); a ``--resume``d run hands the committed pieces' stored moments, without
  reading their rows back. The analyzer then only merges them; the per-batch tensor TFT hands
  it is the batch's row count (nothing of the features crosses);
- anywhere else (no moments given): from the feature batches TFT hands the analyzer.
"""

from __future__ import annotations

import functools
from typing import Any

import apache_beam as beam
import numpy as np

from transforms.stages.moments import Moments


class _MergeMoments(beam.CombineFn):
    """Moments -> their exact sum (`Moments()` for none)."""

    def create_accumulator(self) -> Moments:
        return Moments()

    def add_input(self, accumulator: Moments, value: Moments) -> Moments:
        return accumulator + value

    def merge_accumulators(self, accumulators: Any) -> Moments:
        return functools.reduce(lambda a, b: a + b, accumulators, Moments())

    def extract_output(self, accumulator: Moments) -> Moments:
        return accumulator


def _pick(moments: dict[str, Moments], feature: str) -> Moments:
    return moments.get(feature, Moments())


class MeanVarAnalyzer(beam.PTransform):
    """TFT's per-batch input tuples -> (mean, var) PCollections, one float32 scalar each.

    Args:
      feature: the feature key (picks it from `moments`' dicts).
      moments: a PCollection of ``{feature: Moments}`` covering every analysed row once (the
        record job's); None: computed here from the batches TFT hands (its one input tensor
        being the feature).
    """

    def __init__(self, feature: str, moments: beam.PCollection | None = None) -> None:
        super().__init__()
        self._feature = feature
        self._moments = moments

    def expand(self, batches: beam.PCollection) -> tuple[beam.PCollection, beam.PCollection]:
        if self._moments is None:
            moments = batches | "Moments" >> beam.Map(lambda inputs: Moments.of_rows(inputs[0]))
        else:
            moments = self._moments | "Pick" >> beam.Map(_pick, self._feature)
        total = moments | "Merge" >> beam.CombineGlobally(_MergeMoments())
        return (
            total | "Mean" >> beam.Map(lambda m: np.asarray(m.mean_var()[0], np.float32)),
            total | "Var" >> beam.Map(lambda m: np.asarray(m.mean_var()[1], np.float32)),
        )


def scale_to_z_score(
    x: Any, *, feature: str, name: str, moments: beam.PCollection | None = None
) -> Any:
    """``tft.scale_to_z_score(x, name=name)`` for a dense float32 `x` (the feature `feature`),
    its statistics from `MeanVarAnalyzer` (`moments`: see there): ``(x - mean) / sqrt(var)``,
    or ``x - mean`` where ``sqrt(var)`` is 0, with TFT 1.21's ops and names (``<name>/sub``,
    ``<name>/Sqrt``)."""
    import tensorflow as tf
    import tensorflow_transform as tft

    with tf.compat.v1.name_scope(name):
        # the record job hands the moments: TFT's batches need carry only their row count
        fed = x if moments is None else tf.shape(x)[:1]
        mean, var = tft.experimental.ptransform_analyzer(
            [fed],
            MeanVarAnalyzer(feature, moments),
            output_dtypes=[tf.float32, tf.float32],
            output_shapes=[[], []],
            name="exact_mean_and_var",
        )
        # tensorflow_transform/mappers.py, _scale_to_z_score_internal (key None, dense x)
        numerator = tf.cast(x, mean.dtype) - mean
        denominator = tf.sqrt(var)
        cond = tf.not_equal(denominator, 0)
        cond = tf.cast(tf.zeros_like(numerator) + tf.cast(cond, numerator.dtype), dtype=tf.bool)
        return tf.where(cond, tf.divide(numerator, denominator), numerator)
