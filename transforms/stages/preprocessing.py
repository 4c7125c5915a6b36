"""The tensorflow-transform side: `preprocessing_fn` and the stored records' schema.

Only ``class`` and the raw features are tensors TFT sees (`transforms.spec.layout.RecordLayout`
fixes the columns and their shapes, `RecordLayout.analysis_schema` what the analysis receives):
the signal and the other keys never cross into it.

TFT computes, over the analysed splits (``--analyze_splits``; by default ``train`` when there are
splits, else everything):

- ``target``: the index of ``class`` in the run's class list, fixed at planning (sorted names or
  ``--classes``; see `transforms.audio.labels`), never TFT's frequency order; -1 for a label
  outside it. The list is TFT's own vocabulary file ``class`` (``transform_fn/assets/class``), so
  ``TFTransformOutput.vocabulary_file_by_name("class")`` and serving read the same ids;
  ``num_classes`` is its length;
- ``<feature>_norm``: ``tft.scale_to_z_score(<feature>)``'s graph (one mean/variance per feature
  key) when normalisation is on, its statistics exact and independent of batches, tasks and
  merge order (`transforms.stages.exact_z_score`, TFT's ``ptransform_analyzer``). The graph
  serves it; the records do not hold it (format version 2): the statistics go into the manifest
  and the reader computes it with the same ops.

The class vocabulary depends on no row: it is `classes` as reserved tokens, every label seen is
pruned by the infinite frequency threshold. So TFT's analysis needs the rows only to run; a
``--resume``d run hands it the rows it reads, not those it reuses (their moments are stored).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tensorflow_metadata.proto.v0 import schema_pb2

from replay import format as fmt
from transforms.stages import exact_z_score

CLASS_VOCABULARY = "class"  # vocab_filename of the class vocabulary in transform_fn/assets


def preprocessing_fn(
    inputs: dict,
    *,
    feature_names: tuple[str, ...],
    normalize: bool,
    classes: Sequence[str],
    moments: Any = None,
) -> dict:
    """TFT preprocessing: class -> target (fixed class list)/num_classes; z-scored features.

    The class vocabulary is TFT's (a vocabulary file written by the analysis, applied by a lookup
    table in the graph) with `classes` as its reserved tokens, in order, and nothing else: no
    label seen in the data passes an infinite frequency threshold. So ``target`` is the index in
    `classes` whatever the data holds, and a label outside it maps to -1 (TFT's default value).

    Args:
      inputs: {"class": string [batch], <feature>: float32 [batch, frames, bins]}.
      feature_names: the raw feature keys present in `inputs`.
      normalize: also emit ``<feature>_norm``.
      classes: the class list in ``target`` order (fixed at planning).
      moments: the record job's PCollection of ``{feature: Moments}`` covering every analysed
        row once (`transforms.stages.exact_z_score`); None: the statistics are computed from
        the feature batches TFT hands the analyzer.

    Returns:
      {"class", "target" int64 [batch], "num_classes" int64 [batch], <feature>,
      <feature>_norm}.
    """
    import tensorflow as tf
    import tensorflow_transform as tft

    labels = inputs[fmt.CLASS_KEY]
    target = tft.compute_and_apply_vocabulary(
        labels,
        vocab_filename=CLASS_VOCABULARY,
        reserved_tokens=list(classes),
        frequency_threshold=math.inf,
        default_value=-1,
    )
    # len(classes), not tft.experimental.get_vocabulary_size_by_name: with reserved tokens and
    # everything else pruned, TFT 1.21 counts one entry too many (4 for 3 classes, measured).
    num_classes = tf.constant(len(classes), tf.int64)
    outputs = {
        fmt.CLASS_KEY: labels,
        fmt.TARGET_KEY: target,
        fmt.NUM_CLASSES_KEY: tf.fill(tf.shape(target), num_classes),
    }
    for name in feature_names:
        outputs[name] = inputs[name]
        if normalize:
            scope = z_score_scope(name)  # names the statistics in the graph (finalize reads them)
            outputs[name + fmt.NORMALIZED_SUFFIX] = exact_z_score.scale_to_z_score(
                inputs[name], feature=name, name=scope, moments=moments
            )
    return outputs


def z_score_scope(feature: str) -> str:
    """The name scope of `feature`'s ``tft.scale_to_z_score`` in the transform graph."""
    return f"z_score_{feature}"


_TFMD_TYPES = {
    fmt.ENCODING_BYTES_LIST: schema_pb2.BYTES,
    fmt.ENCODING_RAW: schema_pb2.BYTES,
    fmt.ENCODING_INT64_LIST: schema_pb2.INT,
    fmt.ENCODING_FLOAT_LIST: schema_pb2.FLOAT,
}


def element_schema(specs: Mapping[str, fmt.ElementSpec]) -> schema_pb2.Schema:
    """A tensorflow_metadata Schema of the stored records, one feature per element key.

    Keys stored as raw little-endian bytes (``signal``, float tensors) are BYTES features of
    shape [1]; their decoded dtype and shape are in the annotation tags ``dtype:<name>`` and
    ``shape:<d0,d1>`` (and ``stored_dtype:<name>`` for float16 / bfloat16 bytes). Keys the
    reader computes (``z_score``) are not in the records, so not in this schema.
    """
    schema = schema_pb2.Schema()
    for key, spec in specs.items():
        if not spec.stored:
            continue
        feature = schema.feature.add(name=key, type=_TFMD_TYPES[spec.encoding])
        feature.presence.min_fraction = 1.0
        feature.presence.min_count = 1
        stored_shape = (1,) if spec.encoding == fmt.ENCODING_RAW else spec.shape
        feature.shape.SetInParent()  # an empty shape is a scalar
        for size in stored_shape:
            feature.shape.dim.add().size = size
        feature.annotation.tag.append(f"dtype:{spec.dtype}")
        feature.annotation.tag.append("shape:" + ",".join(str(d) for d in spec.shape))
        feature.annotation.tag.append(f"encoding:{spec.encoding}")
        if spec.stored_dtype:
            feature.annotation.tag.append(f"stored_dtype:{spec.stored_dtype}")
    return schema
