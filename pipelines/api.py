"""The record job from Python: `record_dataset(...)`, keyword arguments mirroring the CLI.

For notebooks and orchestration code (Airflow / Kubeflow tasks)::

    from pipelines import record_dataset

    result = record_dataset(input_pattern="data/**/*.wav", output_dir="out/", win_len=16000,
                            features=["log_mel"], splits="train=80,validation=10,test=10",
                            shard_func=lambda e: e["index"] % 4)
    print(result.num_examples, result.errors)

Every CLI option is a keyword (``--win_len 16000`` -> ``win_len=16000``; flags take booleans;
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

__all__ = ["RecordResult", "record_dataset"]


def record_dataset(
    *,
    input_pattern: str,
    output_dir: str,
    shard_func: Callable[[dict], int] | None = None,
    beam_args: Sequence[str] = (),
    **options: Any,
) -> RecordResult:
    """Runs the record pipeline (same code as ``python -m pipelines.record``).

    Args:
      input_pattern: glob of WAV files.
      output_dir: dataset directory.
      shard_func: optional element -> shard index callable (snapshot's ``shard_func``).
      beam_args: extra Beam pipeline options, e.g. ``["--runner", "DataflowRunner"]``.
      **options: any other record option by its CLI name without dashes.

    Returns:
      A `RecordResult` with counts, errors and throughput (nothing is printed).

    Raises:
      TypeError: an unknown option name.
      pipelines.config.UsageError: invalid option values or inputs (before any work).
    """
    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:
        raise TypeError(f"record_dataset() got an unknown option {unknown[0]!r}")
    config = RecordConfig(input_pattern=input_pattern, output_dir=output_dir, **options)
    return job.run_job(config, beam_argv=list(beam_args), shard_func=shard_func)
