"""The engines and `configure`: what `runners` exports (see the package docstring)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions as _Standard

from runners import dataflow, direct, portable
from runners.support import RunnerError, given_flags, unknown_flags


@dataclasses.dataclass(frozen=True)
class Engine:
    """One supported runner: how to recognise it, check its flags and complete its options.

    Attributes:
      name: the name users pass to ``--runner`` (also accepted: lower case, without "Runner",
        or Beam's fully qualified class path).
      beam_runner: Beam's fully qualified runner class.
      check: (options, flags given) -> problems, static (no I/O).
      configure: (options, *, given, input_bytes) -> None: probes, then fills in options.
      aliases: other class paths that mean this engine.
    """

    name: str
    beam_runner: str
    check: Callable[[PipelineOptions, set[str]], list[str]]
    configure: Callable[..., None]
    aliases: tuple[str, ...] = ()


_PORTABLE = "apache_beam.runners.portability"
ENGINES: dict[str, Engine] = {
    e.name: e
    for e in (
        Engine(
            "DirectRunner",
            "apache_beam.runners.direct.direct_runner.DirectRunner",
            direct.check,
            direct.configure,
            aliases=(direct.LOCAL_RUNNER,),
        ),
        Engine(
            "PortableRunner",
            f"{_PORTABLE}.portable_runner.PortableRunner",
            portable.check_portable,
            portable.configure_portable,
        ),
        Engine(
            "FlinkRunner",
            f"{_PORTABLE}.flink_runner.FlinkRunner",
            portable.check_flink,
            portable.configure_flink,
        ),
        Engine(
            "SparkRunner",
            f"{_PORTABLE}.spark_runner.SparkRunner",
            portable.check_spark,
            portable.configure_spark,
        ),
        Engine(
            "DataflowRunner",
            "apache_beam.runners.dataflow.dataflow_runner.DataflowRunner",
            dataflow.check,
            dataflow.configure,
        ),
    )
}
KNOWN_RUNNERS = tuple(ENGINES)
# Runners tried and found unable to run the record job, with what breaks (checked on Beam 2.77).
UNSUPPORTED = {
    "DaskRunner": (
        "Beam's DaskRunner delivers every output of a multi-output ParDo (main and tagged) to "
        "each consumer, so ReadWindows' file summaries reach tensorflow-transform as if they "
        "were windows"
    ),
    "PrismRunner": "its binary is downloaded at run time; use DirectRunner or PortableRunner",
}


def engine_for(runner: object) -> Engine:
    """The engine a ``--runner`` value names (None: the DirectRunner).

    Raises:
      RunnerError: not one of `KNOWN_RUNNERS` (the message lists them).
    """
    if runner is None:
        return ENGINES["DirectRunner"]
    if not isinstance(runner, str):
        runner = runner.__name__ if isinstance(runner, type) else type(runner).__name__
    wanted = runner.strip()
    short = wanted.rsplit(".", 1)[-1].lower()
    for engine in ENGINES.values():
        paths = (engine.beam_runner, *engine.aliases)
        if wanted in paths or ("." not in wanted and short in _short_names(engine.name)):
            return engine
    for name, reason in UNSUPPORTED.items():
        if short in _short_names(name):
            raise RunnerError(
                f"{name} is not supported: {reason}; supported runners: {', '.join(KNOWN_RUNNERS)}"
            )
    raise RunnerError(f"unknown runner {runner!r}; known runners: {', '.join(KNOWN_RUNNERS)}")


def _short_names(name: str) -> tuple[str, str]:
    low = name.lower()
    return low, low.removesuffix("runner")


def runner_name(options: PipelineOptions) -> str:
    """The engine's name (DirectRunner when none was given); RunnerError if unknown."""
    return engine_for(options.view_as(_Standard).runner).name


def check(options: PipelineOptions, *, argv: list[str]) -> Engine:
    """Checks the runner and its flags without touching the network or the disk.

    Args:
      options: the parsed pipeline options.
      argv: the raw command line (to tell flags the user gave from defaults).

    Raises:
      RunnerError: unknown runner, unknown option, or flags that cannot work, in one line.
    """
    engine = engine_for(options.view_as(_Standard).runner)
    unknown = unknown_flags(argv)
    problems = [
        f"unknown option {flag} (not a record option nor a Beam option)" for flag in unknown
    ]
    problems += engine.check(options, given_flags(argv))
    if problems:
        raise RunnerError("; ".join(problems))
    return engine


def configure(options: PipelineOptions, *, input_bytes: int, argv: list[str]) -> PipelineOptions:
    """Checks the runner and fills in the defaults this project relies on.

    Args:
      options: the parsed pipeline options (modified in place and returned).
      input_bytes: total size of the matched input files.
      argv: the raw command line, to tell flags the user set from defaults.

    Raises:
      RunnerError: unknown runner (lists the known ones), unknown option, or a runner that
        cannot work as configured (unreachable endpoint, missing jar or file), in one line.
    """
    engine = check(options, argv=argv)
    engine.configure(options, given=given_flags(argv), input_bytes=input_bytes)
    if engine.name != "DirectRunner":
        options.view_as(_Standard).runner = engine.beam_runner
    return options


def compute_threads(options: PipelineOptions) -> int:
    """Threads a worker process may use for features (after `configure`).

    The DirectRunner's share of this machine's cores (`direct.compute_threads`); 1 elsewhere:
    Flink, Spark and Dataflow run one SDK worker (or more) per core, each with many DoFn threads.
    """
    if runner_name(options) == "DirectRunner":
        return direct.compute_threads(options)
    return 1


def sequential_tasks(options: PipelineOptions) -> bool:
    """True when the job's read tasks run one at a time in one thread (after `configure`): the
    in-memory DirectRunner (`direct.one_bundle_at_a_time`). Its parallelism is the features
    pool inside a task (`compute_threads`), so the job then plans a single read task."""
    return runner_name(options) == "DirectRunner" and direct.one_bundle_at_a_time(options)


def translation_only(options: PipelineOptions) -> bool:
    """True when running the pipeline only writes a job description (a Dataflow template).

    The launcher must then neither wait for results nor read the output.
    """
    return runner_name(options) == "DataflowRunner" and bool(
        options.view_as(GoogleCloudOptions).template_location
    )
