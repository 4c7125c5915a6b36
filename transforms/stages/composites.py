"""The record job's stages as named composite transforms (runner-agnostic).

`pipelines.build.build_pipeline` chains them; each ``expand`` says in a comment what its steps
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
from transforms.spec.compression import AUTO_SAMPLE_SIZE, choose_compression
from transforms.spec.layout import RecordLayout
from transforms.spec.types import ReadTask, ReadWindowsConfig, Sharding, ShardSpec
from transforms.stages import finalize, read_windows, staged, write_shards
from transforms.stages.arrow_coder import RecordBatchCoder
from transforms.stages.preprocessing import preprocessing_fn
from transforms.stages.task_coder import ReadTaskCoder


def register_coders() -> None:
    """Registers the record job's coders in Beam's process-wide coder registry (idempotent).

    PCollections typed pa.RecordBatch (the read stage's rows, and TFT's steps that keep the
    type) are sized by RecordBatch.nbytes, not by pickling each sampled batch (`arrow_coder`);
    the read tasks likewise, not every segment pickled to size a task (`task_coder`).
    `pipelines.build.build_pipeline` calls it first, and `ReadWindows` and `Analyze` when they
    expand, so a pipeline built from these stages alone has them too; importing this module
    registers nothing.
    """
    beam.coders.registry.register_coder(pa.RecordBatch, RecordBatchCoder)
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


def _count_refused(error: dict) -> dict:
    """A file refused by the job's plan step, counted in ``files_failed``."""
    beam.metrics.Metrics.counter("record", "files_failed").inc()
    return error


class PlannedErrors(beam.PTransform):
    """The errors found at planning (files refused, bad annotation rows) -> {"path", "reason"}
    dicts: staged by the launcher (`transforms.stages.staged`), or the files refused by the
    job's plan step (a PCollection of their dicts, `pipelines.plan.in_job`)."""

    def __init__(self, errors: staged.Staged | beam.PCollection) -> None:
        super().__init__()
        self._errors = errors

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        if isinstance(self._errors, beam.PCollection):
            return self._errors | "Count" >> beam.Map(_count_refused)  # {"path", "reason"}
        return (
            pbegin
            | "Staged" >> beam.Create([self._errors], reshuffle=False)
            | "Load" >> beam.FlatMap(planned_errors)  # {"path", "reason"}
        )


class ReadWindows(beam.PTransform):
    """Read tasks -> windows, features and their encoded records, streamed to per-shard part
    files (``target``: the index in `classes`, the planned class list). The tasks come
    staged by the launcher (`transforms.stages.staged`): the job's size does not grow with them.

    Yields a dict of PCollections: ``rows`` (pa.RecordBatch of ``class`` and the features of
    the analysed splits' windows, for `Analyze`, joined into batches of 8 MiB or more),
    ``files`` (summaries as table lines), ``errors`` ({"path", "reason"} of the files that
    failed), ``parts`` (part file descriptions, for `GroupByShard`), ``samples`` (one row's
    signal + feature bytes of each of a task's first 64 file segments, to choose the
    compression) and ``stats`` (``{feature: Moments}`` of the analysed rows, one per piece of a
    task, for the z-score statistics). With ``--resume``, a task carries the records of what an
    earlier run committed of it (`ReadTask.resumed`): their outputs come from them and their
    parts, in this stage; their rows do not go to the analysis (their moments do).

    Planned in the job (`pipelines.plan.in_job`), `tasks` is their PCollection and `planned` the
    plan step's (ReadWindowsConfig, Sharding) singleton: its signal dtype and the shard counts
    come from it, `config` and `sharding` give the rest (`spread`: more than one task).
    """

    def __init__(
        self,
        tasks: staged.Staged | beam.PCollection,
        config: ReadWindowsConfig,
        sharding: Sharding,
        *,
        classes: Sequence[str],
        output_dir: str,
        analyzed_splits: Sequence[str],
        planned: beam.PCollection | None = None,
        spread: bool = True,
    ) -> None:
        super().__init__()
        self._tasks = tasks
        self._planned = planned
        self._spread = spread
        self._fn = read_windows.ReadTaskFn(
            config,
            sharding,
            classes=classes,
            output_dir=output_dir,
            analyzed_splits=analyzed_splits,
        )

    def expand(self, pbegin: beam.pvalue.PBegin) -> dict[str, beam.PCollection]:
        register_coders()  # ReadTask and RecordBatch PCollections follow
        side = {}
        if isinstance(self._tasks, beam.PCollection):  # ReadTask, from the job's plan step
            tasks = self._tasks
            side["planned"] = beam.pvalue.AsSingleton(self._planned)
            spread = self._spread
        else:
            tasks = (
                pbegin
                # ReadTask, read back from the launcher's staged file (one reshuffle is enough)
                | "StagedTasks" >> beam.Create([self._tasks], reshuffle=False)
                | "ListTasks" >> beam.FlatMap(staged.load).with_output_types(ReadTask)
            )
            spread = self._tasks.count > 1
        if spread:  # one task is not spread: not encoded, copied and held twice
            tasks = tasks | "SpreadTasks" >> beam.Reshuffle()  # ReadTask, spread over workers
        out = (
            tasks
            | "Read"  # RecordBatch (main: class + features), and tagged: dict (errors, parts),
            # bytes (files, samples); the main output's coder estimates sizes cheaply
            # (`arrow_coder`)
            >> beam.ParDo(self._fn, **side)
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
    (`transforms.stages.exact_z_score`), not from the rows TFT is handed.
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

        register_coders()  # TFT's steps keep the rows' RecordBatch type
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

    Side inputs: the compression, every error (their windows are dropped) and, planned in the
    job, the shard counts (`num_shards`: a PCollection of one dict). The stage does not wait for
    TFT's analysis: only `Finalize` needs ``transform_fn/``.
    """

    def __init__(
        self,
        spec: ShardSpec,
        *,
        compute_threads: int,
        num_shards: Mapping[str, int] | beam.PCollection,
        compression: beam.PCollection,
        errors: beam.PCollection,
    ) -> None:
        super().__init__()
        self._fn = write_shards.WriteShardFn(spec, compute_threads=compute_threads)
        self._num_shards = num_shards
        self._compression = compression
        self._errors = errors

    def expand(self, grouped: beam.PCollection) -> beam.PCollection:
        num_shards = self._num_shards
        if isinstance(num_shards, beam.PCollection):
            num_shards = beam.pvalue.AsSingleton(num_shards)
        else:
            num_shards = dict(num_shards)
        # dict per shard: split, shard, filename, num_examples, num_bytes, ...
        return grouped | "Write" >> beam.ParDo(
            self._fn,
            beam.pvalue.AsSingleton(self._compression),
            num_shards,
            beam.pvalue.AsList(self._errors),
        )


class Finalize(beam.PTransform):
    """The empty shards, schema.pbtxt, feature_fn/ and, last, manifest.json (one dict).

    Planned in the job, `planned` is the plan step's (ReadWindowsConfig, Sharding) singleton: the
    signal dtype and the shard counts come from it (`num_shards` is then ignored).
    """

    def __init__(
        self,
        spec: ShardSpec,
        config: ReadWindowsConfig,
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
        planned: beam.PCollection | None = None,
    ) -> None:
        super().__init__()
        self._spec = spec
        self._config = config
        self._static = {
            "params": params,
            "classes": classes,
            "analyzed_splits": analyzed_splits,
        }
        self._planned = planned
        if planned is None:
            self._static["num_shards"] = dict(num_shards)
            self._static["signal_dtype"] = config.signal_dtype
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
        write, planned = finalize.finalize, {}
        if self._planned is not None:
            write, planned = _finalize_planned, {"planned": beam.pvalue.AsSingleton(self._planned)}
        return (
            pbegin
            | "Start" >> beam.Create([None])
            # the manifest dict, once every shard and the transform_fn are written
            | "Write"
            >> beam.Map(
                write,
                spec=self._spec,
                layout=self._config.layout,
                feature_config=feature_config,
                win_len=self._config.window.win_len,
                **self._static,
                **self._inputs,
                **planned,
            )
        )


def _finalize_planned(
    element: None, *, planned: tuple[ReadWindowsConfig, Sharding], **kwargs: Any
) -> dict[str, Any]:
    """`finalize.finalize` with the signal dtype, layout (``--annotations``: the `events`
    key's shape) and shard counts of the job's plan step."""
    config, sharding = planned
    return finalize.finalize(
        element,
        signal_dtype=config.signal_dtype,
        num_shards=dict(sharding.num_shards),
        **{**kwargs, "layout": config.layout},
    )
