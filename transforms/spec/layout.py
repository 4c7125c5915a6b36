"""`RecordLayout`: which keys a run's elements carry, and the shapes of its features.

Raw windows travel through the read stage as Arrow RecordBatches (one batch per chunk of a file's
windows, no per-window Python dicts), where they are encoded into records. Only ``class`` and the
raw features are tensors TFT sees, and only those columns go on to TFT's analysis (TFXIO path,
`RecordLayout.analysis_schema`): the signal and the other keys never cross into it. Planning
fixes the layout (`pipelines.plan`); the TFT side is `transforms.stages.preprocessing`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pyarrow as pa
from tensorflow_metadata.proto.v0 import schema_pb2

from replay import format as fmt

# Columns TFT never sees and their Arrow types (one value per row).
_UNANALYSED_TYPES = {
    fmt.FILEPATH_KEY: pa.list_(pa.binary()),
    fmt.INDEX_KEY: pa.list_(pa.int64()),
    fmt.WIN_START_KEY: pa.list_(pa.int64()),
    fmt.SAMPLE_RATE_KEY: pa.list_(pa.int64()),
    fmt.CHANNEL_KEY: pa.list_(pa.int64()),
    fmt.SIGNAL_KEY: pa.list_(pa.binary()),
}


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """Which keys a run's windows carry, and the shapes of its features.

    Attributes:
      feature_shapes: {feature name: (frames, bins)} in the requested order.
      normalize: add ``<feature>_norm``: TFT's z-score (computed by the reader from the
        statistics in the manifest; not stored).
      with_channel: carry the ``channel`` key (``--channel_mode split``).
      num_label_classes: ``--annotations``: length of the multi-hot ``labels`` (0: no
        annotation keys; see `pipelines.plan.annotated`).
      max_events: ``--annotations``: rows of ``events`` [max_events, 3].
      feature_dtype: how features are stored (``--feature_dtype``): float32, float16 or
        bfloat16 raw bytes, read back as float32.
    """

    feature_shapes: Mapping[str, tuple[int, ...]]
    normalize: bool = True
    with_channel: bool = False
    num_label_classes: int = 0
    max_events: int = 0
    feature_dtype: str = "float32"

    @property
    def unanalysed_keys(self) -> tuple[str, ...]:
        """The raw columns besides ``class`` and the features (stored, never analysed)."""
        keys = [k for k in _UNANALYSED_TYPES if k != fmt.CHANNEL_KEY or self.with_channel]
        return tuple(keys)

    def arrow_schema(self) -> pa.Schema:
        """Schema of the raw RecordBatches the read stage builds and encodes."""
        fields = [pa.field(fmt.CLASS_KEY, pa.list_(pa.binary()))]
        fields += [pa.field(k, _UNANALYSED_TYPES[k]) for k in self.unanalysed_keys]
        fields += [pa.field(name, pa.list_(pa.float32())) for name in self.feature_shapes]
        if self.num_label_classes:  # annotation keys (no tensor TFT sees)
            fields += [pa.field(fmt.LABELS_KEY, pa.list_(pa.float32()))]
            fields += [
                pa.field(k, pa.list_(pa.int64())) for k in (fmt.EVENTS_KEY, fmt.NUM_EVENTS_KEY)
            ]
        return pa.schema(fields)

    @property
    def analysis_keys(self) -> tuple[str, ...]:
        """The columns TFT's analysis reads: ``class`` and each feature."""
        return (fmt.CLASS_KEY, *self.feature_shapes)

    def analysis_schema(self) -> pa.Schema:
        """Schema of the RecordBatches the analysis receives: `arrow_schema` cut to
        `analysis_keys` (``RecordBatch.select``: no copy). The signal and the other columns are
        stored by the read stage and never cross into TFT."""
        schema = self.arrow_schema()
        return pa.schema([schema.field(k) for k in self.analysis_keys])

    def tensor_representations(self) -> dict[str, schema_pb2.TensorRepresentation]:
        """What TFT's preprocessing_fn sees: ``class`` [batch] and each feature [batch, *shape]."""
        reps = {fmt.CLASS_KEY: _dense(fmt.CLASS_KEY, ())}
        for name, shape in self.feature_shapes.items():
            reps[name] = _dense(name, shape)
        return reps

    def element_specs(
        self,
        *,
        signal_dtype: str,
        win_len: int,
        statistics: Mapping[str, tuple[float, float]] | None = None,
    ) -> dict[str, fmt.ElementSpec]:
        """The manifest's ``elements``: every key of a replayed element (format version 2).

        Args:
          signal_dtype: the stored dtype of ``signal``.
          win_len: samples per window.
          statistics: {feature: (mean, var)} of TFT's analysis, for the ``<feature>_norm`` keys
            the reader computes (`read_z_score_statistics`); None: leave them out (the stored
            keys only, as the write stage and the raw schema need).
        """
        int64 = fmt.stored_spec("int64", ())
        string = fmt.stored_spec("string", ())
        specs = {
            fmt.CLASS_KEY: string,
            fmt.TARGET_KEY: int64,
            fmt.NUM_CLASSES_KEY: int64,
            fmt.FILEPATH_KEY: string,
            fmt.INDEX_KEY: int64,
            fmt.WIN_START_KEY: int64,
            fmt.SAMPLE_RATE_KEY: int64,
        }
        if self.with_channel:
            specs[fmt.CHANNEL_KEY] = int64
        specs[fmt.SIGNAL_KEY] = fmt.stored_spec(signal_dtype, (win_len,))
        for name, shape in self.feature_shapes.items():
            specs[name] = fmt.stored_spec("float32", shape, stored_dtype=self.feature_dtype)
            if self.normalize and statistics is not None:
                mean, var = statistics[name]
                specs[name + fmt.NORMALIZED_SUFFIX] = fmt.z_score_spec(
                    name, specs[name], mean=mean, var=var
                )
        if self.num_label_classes:
            specs[fmt.LABELS_KEY] = fmt.stored_spec("float32", (self.num_label_classes,))
            specs[fmt.EVENTS_KEY] = fmt.stored_spec("int64", (self.max_events, 3))
            specs[fmt.NUM_EVENTS_KEY] = int64
        return specs


def _dense(column: str, shape: tuple[int, ...]) -> schema_pb2.TensorRepresentation:
    rep = schema_pb2.TensorRepresentation()
    rep.dense_tensor.column_name = column
    for size in shape:
        rep.dense_tensor.shape.dim.add().size = size
    return rep
