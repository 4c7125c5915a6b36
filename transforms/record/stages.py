"""The record job's stages as named composite transforms (runner-agnostic).

`pipelines.job.build_pipeline` chains them; each ``expand`` says in a comment what its steps
yield, in the style of tensorflow_datasets' ``core/writer.py``::

    ReadWindows -> Analyze -> WriteTransformFn
        \\-> GroupByShard -> WriteShards -> Finalize (manifest last)

Only small descriptions cross stage boundaries: windows go from ``ReadWindows`` to part files,
and ``WriteShards`` copies (or, for a shard that is one whole part, hard-links) them per shard.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa

from transforms.audio import features as feats
from transforms.planning.compression import AUTO_SAMPLE_SIZE, choose_compression
from transforms.planning.layout import RecordLayout
from transforms.planning.types import ReadConfig, ReadTask, Sharding, ShardSpec
from transforms.record import finalize, read_windows, staged, write_shards
from transforms.record.arrow_coder import RecordBatchCoder
from transforms.record.preprocessing import preprocessing_fn
from transforms.record.task_coder import ReadTaskCoder

# PCollections typed pa.RecordBatch (the read stage's rows, and TFT's steps that keep the type)
# are sized by RecordBatch.nbytes, not by pickling each sampled batch (see `arrow_coder`).
beam.coders.registry.register_coder(pa.RecordBatch, RecordBatchCoder)
# The read tasks likewise: not every segment pickled to size a task (see `task_coder`).
beam.coders.registry.register_coder(ReadTask, ReadTaskCoder)


def planned_errors(errors: staged.Staged) -> Iterator[dict]:
    """The errors planning found (staged (error, is a file) pairs) -> their {"path", "reason"}
    dicts; a file refused at planning counts in ``files_failed`` (as the read stage counts its
    own), a bad annotation row does not: it is not a file."""
    failed = beam.metrics.Metrics.counter("record", "files_failed")
    for error, is_file in staged.load(errors):
        if is_file:
            failed.inc()
        yield error


class PlannedErrors(beam.PTransform):
    """The errors found at planning (files refused, bad annotation rows), staged by the
    launcher (`transforms.record.staged`) -> {"path", "reason"} dicts."""

    def __init__(self, errors: staged.Staged) -> None:
        super().__init__()
        self._errors = errors

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            pbegin
            | "Staged" >> beam.Create([self._errors], reshuffle=False)
            | "Load" >> beam.FlatMap(planned_errors)  # {"path", "reason"}
        )


class ReadWindows(beam.PTransform):
    """Read tasks -> windows, features and their encoded records, streamed to per-shard part
    files (``target``: the index in `classes`, the planned class list). The tasks come
    staged by the launcher (`transforms.record.staged`): the job's size does not grow with them.

    Yields a dict of PCollections: ``rows`` (pa.RecordBatch of ``class`` and the features of
    the analysed splits' windows, for `Analyze`, joined into batches of 8 MiB or more),
    ``files`` (summaries as table lines), ``errors`` ({"path", "reason"} of the files that
    failed), ``parts`` (part file descriptions, for `GroupByShard`), ``samples`` (one row's
    signal + feature bytes of each of a task's first 64 file segments, to choose the
    compression) and ``stats`` (``{feature: Moments}`` of the analysed rows, one per piece of a
    task, for the z-score statistics). With ``--resume``, a task carries the records of what an
    earlier run committed of it (`ReadTask.resumed`): their outputs come from them and their
    parts, in this stage; their rows do not go to the analysis (their moments do).
    """

    def __init__(
        self,
        tasks: staged.Staged,
        config: ReadConfig,
        sharding: Sharding,
        *,
        classes: Sequence[str],
        output_dir: str,
        analyzed_splits: Sequence[str],
    ) -> None:
        super().__init__()
        self._tasks = tasks
        self._fn = read_windows.ReadTaskFn(
            config,
            sharding,
            classes=classes,
            output_dir=output_dir,
            analyzed_splits=analyzed_splits,
        )

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, beam.PCollection]:
        tasks = (
            pbegin
            # ReadTask, read back from the launcher's staged file (one reshuffle is enough)
            | "StagedTasks" >> beam.Create([self._tasks], reshuffle=False)
            | "ListTasks" >> beam.FlatMap(staged.load).with_output_types(ReadTask)
        )
        if self._tasks.count > 1:  # one task is not spread: not encoded, copied and held twice
            tasks = tasks | "SpreadTasks" >> beam.Reshuffle()  # ReadTask, spread over workers
        out = (
            tasks
            | "Read"  # RecordBatch (main: class + features), and tagged: dict (errors, parts),
            # bytes (files, samples); the main output's coder estimates sizes cheaply
            # (`arrow_coder`)
            >> beam.ParDo(self._fn)
            .with_output_types(pa.RecordBatch)
            .with_outputs(
                read_windows.FILES_TAG,
                read_windows.ERRORS_TAG,
                read_windows.PARTS_TAG,
                read_windows.SAMPLES_TAG,
                read_windows.STATS_TAG,
                main="rows",
            )
        )
        return {
            "rows": out.rows,
            "files": out[read_windows.FILES_TAG],
            "errors": out[read_windows.ERRORS_TAG],
            "parts": out[read_windows.PARTS_TAG],
            "samples": out[read_windows.SAMPLES_TAG],
            "stats": out[read_windows.STATS_TAG],
        }


class Analyze(beam.PTransform):
    """Windows -> tensorflow-transform's full pass (class vocabulary, z-score statistics).

    `moments`: the read stage's ``stats`` (``{feature: Moments}`` covering every analysed row
    once, reused ones included): the z-score statistics come from them
    (`transforms.record.exact_z_score`), not from the rows TFT is handed.
    """

    def __init__(
        self,
        layout: RecordLayout,
        *,
        classes: Sequence[str],
        temp_dir: str,
        moments: beam.PCollection | None = None,
    ) -> None:
        super().__init__()
        self._layout = layout
        self._classes = tuple(classes)
        self._temp_dir = temp_dir
        self._moments = moments

    def expand(self, rows: beam.PCollection) -> Any:
        import tensorflow_transform.beam as tft_beam
        from tfx_bsl.tfxio.tensor_adapter import TensorAdapterConfig

        layout = self._layout
        raw = (
            rows,
            TensorAdapterConfig(layout.analysis_schema(), layout.tensor_representations()),
        )
        fn = functools.partial(
            preprocessing_fn,
            feature_names=tuple(layout.feature_shapes),
            normalize=layout.normalize,
            classes=self._classes,
            moments=self._moments,
        )
        with tft_beam.Context(temp_dir=self._temp_dir):
            # TFT's transform_fn: (saved model path, metadata), one element each
            return raw | "AnalyzeDataset" >> tft_beam.AnalyzeDataset(fn)


class ChooseCompression(beam.PTransform):
    """Sampled serialized records -> the compression of every shard (one str)."""

    def __init__(self, requested: str) -> None:
        super().__init__()
        self._requested = requested

    def expand(self, samples: beam.PCollection) -> beam.PCollection:
        requested = self._requested
        return (
            samples
            # list[bytes], one element
            | "Sample" >> beam.combiners.Sample.FixedSizeGlobally(AUTO_SAMPLE_SIZE)
            # "NONE" | "GZIP" | "ZLIB", one element
            | "Choose" >> beam.Map(lambda s: choose_compression(requested, s))
        )


class GroupByShard(beam.PTransform):
    """Part file descriptions -> ((split, shard), [part, ...]), one element per shard."""

    def expand(self, parts: beam.PCollection) -> beam.PCollection:
        return (
            parts
            | "Key" >> beam.Map(lambda part: ((part["split"], part["shard"]), part))
            | "Group" >> beam.GroupByKey()  # ((split, shard), iterable of part dicts)
        )


class WriteShards(beam.PTransform):
    """Each shard's parts (encoded records) -> its TFRecord file.

    Side inputs: the compression and every error (their windows are dropped). The stage does not
    wait for TFT's analysis: only `Finalize` needs ``transform_fn/``.
    """

    def __init__(
        self,
        spec: ShardSpec,
        *,
        compute_threads: int,
        num_shards: Mapping[str, int],
        compression: beam.PCollection,
        errors: beam.PCollection,
    ) -> None:
        super().__init__()
        self._fn = write_shards.WriteShardFn(spec, compute_threads=compute_threads)
        self._num_shards = dict(num_shards)
        self._compression = compression
        self._errors = errors

    def expand(self, grouped: beam.PCollection) -> beam.PCollection:
        # dict per shard: split, shard, filename, num_examples, num_bytes, ...
        return grouped | "Write" >> beam.ParDo(
            self._fn,
            beam.pvalue.AsSingleton(self._compression),
            self._num_shards,
            beam.pvalue.AsList(self._errors),
        )


class Finalize(beam.PTransform):
    """The empty shards, schema.pbtxt, feature_fn/ and, last, manifest.json (one dict)."""

    def __init__(
        self,
        spec: ShardSpec,
        config: ReadConfig,
        *,
        params: Mapping[str, Any],
        num_shards: Mapping[str, int],
        classes: Sequence[str],
        analyzed_splits: Sequence[str],
        shards: beam.PCollection,
        files: beam.PCollection,
        errors: beam.PCollection,
        compression: beam.PCollection,
        transform_written: beam.PCollection,
        moments: beam.PCollection,
    ) -> None:
        super().__init__()
        self._spec = spec
        self._config = config
        self._static = {
            "params": params,
            "num_shards": dict(num_shards),
            "classes": classes,
            "analyzed_splits": analyzed_splits,
        }
        self._inputs = {
            "shards": beam.pvalue.AsList(shards),
            "files": beam.pvalue.AsList(files),
            "errors": beam.pvalue.AsList(errors),
            "compression": beam.pvalue.AsSingleton(compression),
            "transform_written": beam.pvalue.AsList(transform_written),
            "moments": beam.pvalue.AsSingleton(moments),
        }

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        feature_config: feats.FeatureConfig = self._config.features
        return (
            pbegin
            | "Start" >> beam.Create([None])
            # the manifest dict, once every shard and the transform_fn are written
            | "Write"
            >> beam.Map(
                finalize.finalize,
                spec=self._spec,
                layout=self._config.layout,
                feature_config=feature_config,
                win_len=self._config.window.win_len,
                signal_dtype=self._config.signal_dtype,
                **self._static,
                **self._inputs,
            )
        )
