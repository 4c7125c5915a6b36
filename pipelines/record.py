"""Record pipeline: WAV files -> windows -> features -> tensorflow-transform -> sharded TFRecords.

Usage::

    python -m pipelines.record --input_pattern 'data/**/*.wav' --output_dir out/ \\
        [--win_len 32768] [--hop_len N] [--pad] [--features log_mel] ... [--runner ...]

Stages (each a Beam step with its own counters), planned in `pipelines.plan`:

1. Planning (launcher): match files, read every WAV header (window counts, the signal dtype),
   assign files to splits and cut the rows into read tasks; bad files are listed up front.
2. ``ReadWindows``: decode, window and compute features per task; rows stream to per-shard part
   files, and feed ``Analyze`` (TFT full pass: class vocabulary, z-score statistics) in the same
   fused stage. Only small descriptions cross stage boundaries.
3. ``GroupByShard`` -> ``WriteShards``: each shard's parts -> TFT transform -> Examples -> file.
4. ``Finalize``: schema.pbtxt, feature_fn/, and last finalize.json.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import logging
import os
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

import runners
from pipelines.plan import RUN_MARKER, RecordPlan, UsageError, plan_record
from replay import format as fmt
from runners.options import JobOptions
from transforms.audio import dtypes, labels
from transforms.record import (
    annotation_job,
    file_rows,
    finalize,
    read_windows,
    shard_plan,
    write_shards,
)
from transforms.record.preprocessing import preprocessing_fn
from transforms.record.progress import ProgressReporter


class RecordOptions(PipelineOptions):
    """Options of the record job (any standard Beam option may be given beside them)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        add = parser.add_argument
        add("--input_pattern", required=True, help="glob of WAV files (local, gs://, s3://...)")
        add("--output_dir", required=True, help="dataset directory to write")
        add("--win_len", type=int, default=32768, help="window length in samples")
        add("--hop_len", type=int, default=None, help="hop between windows (default win_len)")
        add("--pad", action="store_true", help="zero-pad trailing partial windows")
        add("--max_windows_per_signal", type=int, default=None, help="keep the first N windows")
        add("--label_source", default="filename", help="filename | dirname | csv:PATH")
        add("--sample_rate", type=int, default=None, help="resample every file to this rate")
        add(
            "--channel_mode",
            default="first",
            choices=file_rows.CHANNEL_MODES,
            help="multi-channel files: first channel, mean of channels, or split (one element "
            "per channel, with a `channel` key)",
        )
        add(
            "--signal_dtype",
            default="auto",
            choices=dtypes.SIGNAL_DTYPES,
            help="dtype of `signal`; auto = the narrowest that holds every file exactly",
        )
        add("--features", default="log_mel", help="comma list of spectrogram,log_mel,mfcc or none")
        add(
            "--feature_dtype",
            default="float32",
            choices=fmt.FEATURE_DTYPES,
            help="how features are stored, read back as float32: float16 (relative error "
            "<= 2^-11, values beyond +-65504 refused) or bfloat16 (<= 2^-8) halve them",
        )
        add("--frame_length", type=int, default=400, help="feature frame length (samples)")
        add("--frame_step", type=int, default=160, help="feature frame step (samples)")
        add("--fft_length", type=int, default=512, help="FFT length")
        add("--num_mel_bins", type=int, default=64, help="mel bands of log_mel / mfcc")
        add("--lower_edge_hz", type=float, default=20.0, help="lowest mel band edge (Hz)")
        add("--upper_edge_hz", type=float, default=None, help="highest edge (default rate/2)")
        add("--num_mfccs", type=int, default=13, help="MFCC coefficients kept")
        add(
            "--no_normalize",
            dest="normalize",
            action="store_false",
            help="do not add TFT z-scored <feature>_norm keys",
        )
        add("--compression", default="AUTO", help="AUTO | GZIP | ZLIB | NONE")
        add("--num_shards", type=int, default=None, help="shard count (default: by size)")
        add("--dataset_name", default=fmt.DEFAULT_NAME, help="prefix of shard file names")
        add("--overwrite", action="store_true", help="replace an existing dataset directory")
        add("--strict", action="store_true", help="fail the job on the first bad input file")
        add(
            "--splits",
            default=None,
            help="e.g. train=80,validation=10,test=10: whole files per split by path hash",
        )
        add(
            "--shard_by",
            default="hash",
            choices=shard_plan.SHARD_BY,
            help="hash: spread windows; file: a file's windows in one shard; class: shard sets",
        )
        add(
            "--analyze_splits",
            default=None,
            help="comma list of the splits TFT's statistics (<feature>_norm) are computed on "
            "(default: train when --splits is given)",
        )
        add(
            "--classes",
            default=None,
            help="fixed class list in target order: a,b,c or @FILE (one per line); default: "
            "every label, sorted by name",
        )
        add(
            "--unknown_class",
            default="error",
            choices=labels.UNKNOWN_CLASS_MODES,
            help="a label outside --classes: error (the file is listed in errors) or keep "
            "(target -1)",
        )
        add(
            "--elements_per_shard",
            type=int,
            default=None,
            help="exactly N elements per shard (the last holds the rest), in file order",
        )
        add(
            "--max_elements",
            type=int,
            default=None,
            help="keep only the first N elements (in file order)",
        )
        annotation_job.add_options(add)  # --annotations and its rule, windows, background


def build_pipeline(p: beam.Pipeline, plan: RecordPlan) -> None:
    """Adds the record job's stages to `p` (runner-agnostic).

    ReadWindows (read tasks -> part files + rows) -> Analyze (TFT full pass over the rows,
    fused with the read) -> WriteTransformFn -> GroupByShard (part descriptions only) ->
    WriteShards (parts -> TFT transform -> Examples -> shard files) -> Finalize (manifest last).
    """
    import tensorflow_transform.beam as tft_beam
    from tfx_bsl.tfxio.tensor_adapter import TensorAdapterConfig

    layout = plan.read.layout
    read_out = (
        p
        | "ListTasks" >> beam.Create(plan.tasks, reshuffle=False)  # one reshuffle is enough
        | "SpreadTasks" >> beam.Reshuffle()
        | "ReadWindows"
        >> beam.ParDo(
            read_windows.ReadTaskFn(
                plan.read,
                plan.sharding,
                output_dir=plan.output_dir,
                analyze_splits=plan.analyze_splits,
            )
        ).with_outputs(
            read_windows.FILES_TAG,
            read_windows.ERRORS_TAG,
            read_windows.PARTS_TAG,
            read_windows.SAMPLES_TAG,
            main="rows",
        )
    )
    planned_errors = [{"path": f.path, "reason": f.error} for f in plan.inputs if f.error]
    planned_errors += plan.annotation_errors  # bad table rows, "<table>:<line>"
    errors = (
        read_out[read_windows.ERRORS_TAG],
        p | "PlannedErrors" >> beam.Create(planned_errors),
    ) | "AllErrors" >> beam.Flatten()
    raw = (
        read_out.rows,
        TensorAdapterConfig(layout.arrow_schema(), layout.tensor_representations()),
    )
    fn = functools.partial(
        preprocessing_fn,
        feature_names=tuple(layout.feature_shapes),
        normalize=layout.normalize,
        classes=plan.classes,
    )
    with tft_beam.Context(
        temp_dir=f"{plan.output_dir}/.tmp/tft", passthrough_keys=set(layout.passthrough_keys)
    ):
        transform_fn = raw | "Analyze" >> tft_beam.AnalyzeDataset(fn)
        transform_written = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(
            plan.output_dir
        )
    compression = (
        read_out[read_windows.SAMPLES_TAG]
        | "Sample" >> beam.combiners.Sample.FixedSizeGlobally(write_shards.AUTO_SAMPLE_SIZE)
        | "ChooseCompression"
        >> beam.Map(lambda s: write_shards.choose_compression(plan.compression, s))
    )
    spec = write_shards.ShardSpec(output_dir=plan.output_dir, name=plan.name)
    num_shards = dict(plan.sharding.num_shards)
    written = (
        read_out[read_windows.PARTS_TAG]
        | "KeyByShard" >> beam.Map(lambda part: ((part["split"], part["shard"]), part))
        | "GroupByShard" >> beam.GroupByKey()
        | "WriteShards"
        >> beam.ParDo(
            write_shards.WriteShardFn(spec, layout, compute_threads=plan.read.compute_threads),
            beam.pvalue.AsSingleton(compression),
            num_shards,
            beam.pvalue.AsList(errors),
            beam.pvalue.AsList(transform_written),
        )
    )
    _ = (
        p
        | "FinalizeStart" >> beam.Create([None])
        | "Finalize"
        >> beam.Map(
            finalize.finalize,
            spec=spec,
            layout=layout,
            feature_config=plan.read.features,
            win_len=plan.read.window.win_len,
            params=plan.params,
            shards=beam.pvalue.AsList(written),
            files=beam.pvalue.AsList(read_out[read_windows.FILES_TAG]),
            errors=beam.pvalue.AsList(errors),
            compression=beam.pvalue.AsSingleton(compression),
            signal_dtype=plan.read.signal_dtype,
            num_shards=num_shards,
            classes=plan.classes,
            analyzed_splits=plan.analyze_splits,
            transform_written=beam.pvalue.AsList(transform_written),
        )
    )


def prepare_output_dir(plan: RecordPlan) -> None:
    """Removes a previous dataset (only one of ours: checked in planning) and marks the dir.

    The marker is written first and the manifest deleted next, so a run killed while deleting
    leaves a directory that is still ours and incomplete: ``--overwrite`` recovers it.
    """
    import tensorflow as tf

    out = plan.output_dir
    tf.io.gfile.makedirs(out)
    with tf.io.gfile.GFile(f"{out}/{RUN_MARKER}", "w") as fh:
        fh.write("an audiorecords run writes here; finalize.json appears when it is complete\n")
    for name in sorted(tf.io.gfile.listdir(out), key=lambda n: n != fmt.MANIFEST_FILENAME):
        path = f"{out}/{name.rstrip('/')}"
        if name.rstrip("/") != RUN_MARKER:
            (tf.io.gfile.rmtree if tf.io.gfile.isdir(path) else tf.io.gfile.remove)(path)
    tf.io.gfile.makedirs(f"{out}/.tmp")


def run(argv: list[str] | None = None, *, shard_func=None) -> dict:
    """Parses `argv`, plans, runs the pipeline and returns the run summary.

    Args:
      argv: command-line arguments (default: sys.argv[1:]).
      shard_func: optional element -> shard callable (Python API, see pipelines.api).

    Returns:
      The summary dict (counts, bytes, seconds, counters, and the written "manifest").

    Raises:
      UsageError: invalid arguments or inputs (before any work).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    options = JobOptions(argv)  # PipelineOptions(argv) with each view built once
    opts = options.view_as(RecordOptions)
    plan = plan_record(opts, shard_func=shard_func)
    try:
        runners.configure(options, input_bytes=plan.input_bytes, argv=argv)
    except runners.RunnerError as e:
        raise UsageError(str(e)) from e
    threads = runners.compute_threads(options)
    plan = dataclasses.replace(plan, read=dataclasses.replace(plan.read, compute_threads=threads))
    if runners.translation_only(options):  # Dataflow template: write the job description only
        p = beam.Pipeline(options=options)
        build_pipeline(p, plan)
        p.run()
        print("wrote the job description (--template_location); no data was processed")
        return {"output_dir": plan.output_dir, "translated": True}
    prepare_output_dir(plan)
    start = time.monotonic()
    p = beam.Pipeline(options=options)
    build_pipeline(p, plan)
    with ProgressReporter(plan.output_dir, total_files=len(plan.inputs)):
        result = p.run()
        result.wait_until_finish()
    elapsed = time.monotonic() - start
    return summarize(plan, elapsed, counters=_counters(result))


def _counters(result: beam.runners.runner.PipelineResult) -> dict[str, int]:
    """The job's "record" counters (files_read, files_failed, windows, bytes_written, ...)."""
    try:
        query = result.metrics().query(beam.metrics.MetricsFilter().with_namespace("record"))
    except (NotImplementedError, AttributeError):  # some runners do not report metrics
        return {}
    totals: dict[str, int] = {}
    for counter in query["counters"]:
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + int(value or 0)
    return totals


def summarize(plan: RecordPlan, elapsed: float, *, counters: dict[str, int]) -> dict:
    """Reads the written manifest, cleans temporary files, logs the final summary line."""
    import json

    import tensorflow as tf

    with tf.io.gfile.GFile(f"{plan.output_dir}/{fmt.MANIFEST_FILENAME}") as fh:
        m = json.load(fh)
    for leftover in (".tmp", "transform_tmp", RUN_MARKER):
        path = f"{plan.output_dir}/{leftover}"
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        elif tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    seconds = sum(f["num_frames"] / f["sample_rate"] for f in m["files"] if f["sample_rate"])
    num_bytes = sum(s["num_bytes"] for sp in m["splits"].values() for s in sp["shards"])
    bad_rows = len(plan.annotation_errors)  # --annotations: bad table rows, also in errors
    summary = {
        "output_dir": plan.output_dir,
        "files": len(m["files"]),
        "failed": len(m["errors"]) - bad_rows,
        "windows": m["num_examples"],
        "shards": sum(len(sp["shards"]) for sp in m["splits"].values()),
        "bytes": num_bytes,
        "compression": m["compression"],
        "seconds": round(elapsed, 2),
        "audio_seconds_per_second": round(seconds / elapsed, 1) if elapsed else 0.0,
        "counters": counters,
        "manifest": m,
    }
    logging.getLogger("audiorecords").info("record counters: %s", counters)
    print(
        f"recorded {summary['windows']} windows from {summary['files']} files "
        f"({summary['failed']} failed{f', {bad_rows} bad annotation row(s)' if bad_rows else ''}) "
        f"into {summary['shards']} {m['compression']} shards, "
        f"{num_bytes / 1e6:.1f} MB in {elapsed:.1f} s "
        f"({summary['audio_seconds_per_second']} audio-s/s) -> {plan.output_dir}"
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("audiorecords").setLevel(logging.INFO)
    try:
        run(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def load_one_keras() -> None:
    """Makes TensorFlow load Keras 2 (``tf_keras``, the one TFT uses) and not Keras 3 as well.

    TFT works only with Keras 2 and sets ``TF_USE_LEGACY_KERAS=1`` when it is imported, but by
    then TensorFlow's ``__init__`` has imported Keras 3 (eagerly, to register Keras optimizers
    for SavedModel loading; with matplotlib it pulls in). Set before TensorFlow is imported, the
    command loads one Keras instead of two: 0.45 s less TensorFlow import and 0.3 s less TFT
    import per run (60-min benchmark, 2 cores, 2026-11-21). A value the user set is kept.
    """
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def exit_now(code: int) -> None:
    """Ends the command without the interpreter's teardown (the job is done and closed).

    With TensorFlow, Beam and TFT loaded, tearing down modules and C++ libraries costs 1-2 s of
    CPU after the last file is closed (measured: ``import tensorflow_transform.beam`` then a
    normal exit vs `exit_now`, 8.5 vs 6.7 s, 2026-11-21). atexit handlers still run (Beam stops
    the job servers it started there); buffered output is flushed.
    """
    atexit._run_exitfuncs()  # CPython's own at-exit step, kept; only the teardown is skipped
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    from runners.quiet import quiet_tensorflow

    load_one_keras()
    quiet_tensorflow()  # after load_one_keras: TensorFlow is imported here
    exit_now(main())
