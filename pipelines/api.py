"""The record job from Python: `record_dataset(...)`, a `RecordConfig` or keyword arguments
mirroring the CLI.

For notebooks and orchestration code (Airflow / Kubeflow tasks)::

    from pipelines import RecordConfig, record_dataset

    config = RecordConfig(input_pattern="data/**/*.wav", output_dir="out/", win_len=16000,
                          features=["log_mel"], splits="train=80,validation=10,test=10")
    result = record_dataset(config, shard_func=lambda e: e["index"] % 4)
    print(result.num_examples, result.errors)

The same run with keywords: ``record_dataset(input_pattern="data/**/*.wav", output_dir="out/",
win_len=16000, ...)``. A `RecordConfig` is checked where it is made (a type checker sees its
fields; a bad value raises there) and can be kept, compared and reused; keywords build the same
one. Every CLI option is a keyword (``--win_len 16000`` -> ``win_len=16000``; flags take booleans;
lists are joined with commas; ``normalize=False`` is ``--no_normalize``): they build the same
`pipelines.config.RecordConfig` the command line builds, without a command line in between.
Beam options go in `beam_args` (``["--runner", "DataflowRunner", ...]``). `shard_func` is the
`tf.data.experimental.snapshot` contract: a callable from an element (a dict of the element's
keys, scalars as Python values, arrays as numpy) to a shard index (taken modulo the split's
shard count); it must be picklable to run on remote workers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pipelines import job
from pipelines.config import OPTION_NAMES, RecordConfig
from pipelines.result import RecordResult

__all__ = ["RecordConfig", "RecordResult", "record_dataset"]


def record_dataset(
    config: RecordConfig | None = None,
    /,
    *,
    input_pattern: str | None = None,
    output_dir: str | None = None,
    shard_func: Callable[[dict], int] | None = None,
    beam_args: Sequence[str] = (),
    **options: Any,
) -> RecordResult:
    """Runs the record pipeline (same code as ``python -m pipelines.record``).

    Args:
      config: the run's options as one `RecordConfig`; None: the keywords make one.
      input_pattern: without `config`: glob of the audio files (required).
      output_dir: without `config`: dataset directory (required).
      shard_func: optional element -> shard index callable (snapshot's ``shard_func``).
      beam_args: extra Beam pipeline options, e.g. ``["--runner", "DataflowRunner"]``.
      **options: without `config`: any other record option by its CLI name without dashes.

    Returns:
      A `RecordResult` with counts, errors and throughput (nothing is printed).

    Raises:
      TypeError: an unknown option name, `config` not a `RecordConfig`, or `config` and option
        keywords both given.
      pipelines.config.UsageError: invalid option values or inputs (before any work).
    """
    named = {"input_pattern": input_pattern, "output_dir": output_dir}
    if config is None:
        unknown = sorted(set(options) - OPTION_NAMES)
        if unknown:
            raise TypeError(f"record_dataset() got an unknown option {unknown[0]!r}")
        missing = [name for name, value in named.items() if value is None]
        if missing:
            raise TypeError(f"record_dataset() needs {' and '.join(missing)} (or a RecordConfig)")
        config = RecordConfig(**named, **options)
    elif not isinstance(config, RecordConfig):
        raise TypeError(
            f"record_dataset() config must be a RecordConfig, not {type(config).__name__}"
        )
    elif options or any(value is not None for value in named.values()):
        given = sorted([*options, *(name for name, value in named.items() if value is not None)])
        raise TypeError(
            f"record_dataset() got a RecordConfig and option keywords ({', '.join(given)}): "
            "give the options in the config (dataclasses.replace(config, ...)) or as keywords"
        )
    return job.run_job(config, beam_argv=list(beam_args), shard_func=shard_func)
