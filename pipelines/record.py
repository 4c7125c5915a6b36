"""Record pipeline: audio files -> windows -> features -> tensorflow-transform -> sharded TFRecords.

Usage::

    python -m pipelines.record --input_pattern 'data/**/*.wav' --output_dir out/ \\
        [--win_len 32768] [--hop_len N] [--pad] [--features log_mel] ... [--runner ...]

``--help`` lists the record options (`pipelines.config.RecordConfig`); any Beam option may be
given beside them. The job itself: `pipelines.job` (planning in `pipelines.plan`, stages in
`transforms.stages.composites`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import job
from pipelines.config import RecordConfig, UsageError
from pipelines.result import RecordResult
from replay import format as fmt

EXIT_USAGE = 2  # bad arguments or inputs: nothing was done
EXIT_ALL_FAILED = 1  # the dataset was written, but every input file failed: it holds no window


class RecordOptions(PipelineOptions):
    """The record options as Beam PipelineOptions (argparse hook; any Beam option may follow)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        add_arguments(parser.add_argument)


def add_arguments(add: Callable[..., Any]) -> None:
    """Adds every `RecordConfig` option to a parser, given its ``add_argument``.

    No option is required here (the config checks that): Beam parses every PipelineOptions
    class for every pipeline in the process, so a required flag would break other pipelines.
    Choices are checked by the config as well, so a bad value gives the config's one line.
    """
    for f in dataclasses.fields(RecordConfig):
        meta: Mapping[str, Any] = f.metadata
        flag = meta["flag"] or f"--{f.name}"  # normalize: --no_normalize
        help_text = meta["help"]
        if f.default is dataclasses.MISSING:
            help_text += " (required)"
        elif f.default is not None and meta["parse"] is not bool:
            help_text += f" (default {f.default})"
        if meta["parse"] is bool:
            action = "store_false" if f.default else "store_true"
            add(flag, dest=f.name, action=action, help=help_text)
            continue
        kwargs: dict[str, Any] = {"help": help_text}
        if meta["parse"] is not str:
            kwargs["type"] = meta["parse"]
        if meta["choices"]:
            kwargs["metavar"] = "{" + ",".join(meta["choices"]) + "}"
        default = None if f.default is dataclasses.MISSING else f.default
        add(flag, dest=f.name, default=default, **kwargs)


def help_parser() -> argparse.ArgumentParser:
    """An argparse parser with every record option, for ``--help``."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.record",
        description=__doc__.splitlines()[0],
        epilog="Any Beam pipeline option (--runner, --direct_num_workers, --project, ...) may "
        "be given beside these; see docs/running-at-scale.md.",
    )
    add_arguments(parser.add_argument)
    return parser


def run(argv: list[str] | None = None, *, shard_func=None) -> RecordResult:
    """Parses `argv`, plans, runs the pipeline and returns what it produced.

    Args:
      argv: command-line arguments (default: sys.argv[1:]): record and Beam options.
      shard_func: optional element -> shard callable (Python API, see pipelines.api).

    Returns:
      The run's `RecordResult` (counts, errors, bytes, seconds, counters); nothing is printed.

    Raises:
      UsageError: invalid arguments or inputs (before any work).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    record_config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(RecordOptions))
    return job.run_job(record_config, beam_argv=argv, shard_func=shard_func)


def main(argv: list[str] | None = None) -> int:
    """The command: 0 when done, 2 on bad arguments, 1 when every input file failed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(argv):
        help_parser().print_help()
        return 0
    logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("audiorecords").setLevel(logging.INFO)
    try:
        result = run(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(summary_line(result))
    if result.num_examples == 0 and result.num_failed and not result.num_files:
        first = result.errors[0]
        print(
            f"error: every input file failed ({result.num_failed}), no window was recorded; "
            f"first: {first['path']}: {first['reason']} "
            f"(all in {result.output_dir}/{fmt.ERRORS_TABLE})",
            file=sys.stderr,
        )
        return EXIT_ALL_FAILED
    return 0


def summary_line(result: RecordResult) -> str:
    """The command's one line about a run; library callers print nothing."""
    if result.translated:
        return "wrote the job description (--template_location); no data was processed"
    if result.already_complete:
        return (
            f"{result.output_dir} is already a finished dataset ({result.num_examples} windows "
            f"from {result.num_files} files): left untouched (--resume)"
        )
    bad_rows = result.num_bad_rows
    reused = ""
    if result.reused_windows:
        reused = (
            f"; resumed: {result.reused_windows} windows reused ({result.reused_tasks} of "
            f"{result.total_tasks} read tasks whole)"
        )
    return (
        f"recorded {result.num_examples} windows from {result.num_files} files "
        f"({result.num_failed} failed{f', {bad_rows} bad annotation row(s)' if bad_rows else ''}) "
        f"into {result.num_shards} {result.compression} shards, "
        f"{result.num_bytes / 1e6:.1f} MB in {result.seconds:.1f} s "
        f"({result.audio_seconds_per_second} audio-s/s) -> {result.output_dir}{reused}"
        + (f" (dataset version {result.dataset_version})" if result.dataset_version > 1 else "")
    )


if __name__ == "__main__":
    from runners.internals import exit_now, load_one_keras
    from runners.quiet import quiet_tensorflow

    if not {"-h", "--help"} & set(sys.argv[1:]):  # the help text needs no TensorFlow
        load_one_keras()  # the command line's own speed-ups (runners.internals), not the API's
        quiet_tensorflow()  # after load_one_keras: TensorFlow is imported here
    exit_now(main())
