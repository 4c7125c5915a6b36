"""runners.direct.LocalRunner runs bundles in this process with one BLAS thread
(`runners.threads.single_threaded`, threadpoolctl), and the process's own count is back after."""

from __future__ import annotations

import logging
import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from runners import direct, threads

# Once pipelines.record is imported (other tests), every pipeline's options are also parsed as
# RecordOptions, whose two required flags must then be present.
_ARGS = ["--input_pattern", "unused", "--output_dir", "unused"]


def _blas(_) -> tuple[int, ...]:
    """The thread counts of the BLAS libraries while the bundle that runs this runs."""
    return tuple(sorted(set(threads.blas_threads())))


def test_bundles_run_with_one_blas_thread_and_the_count_is_restored():
    import numpy  # noqa: F401 - loads numpy's OpenBLAS

    before = threads.blas_threads()
    if not before:
        pytest.skip("no BLAS library threadpoolctl can limit (numpy built against another BLAS)")
    with beam.Pipeline(runner=direct.LocalRunner(), options=PipelineOptions(_ARGS)) as p:
        counts = p | beam.Create([1, 2, 3]) | beam.Map(_blas)
        assert_that(counts, equal_to([(1,)] * 3))
    assert threads.blas_threads() == before


def test_overlapping_blocks_keep_the_limit_until_the_last_one_ends():
    import numpy  # noqa: F401

    before = threads.blas_threads()
    if not before:
        pytest.skip("no BLAS library threadpoolctl can limit")
    outer = threads.single_threaded()
    outer.__enter__()
    with threads.single_threaded():
        assert set(threads.blas_threads()) == {1}
    assert set(threads.blas_threads()) == {1}  # the outer block (another job) still runs
    outer.__exit__(None, None, None)
    assert threads.blas_threads() == before


class _NoBlas:
    """A threadpoolctl controller that finds no library (numpy on Apple's Accelerate, say)."""

    def select(self, **_):
        return []

    def limit(self, **_):
        return self

    def restore_original_limits(self):
        pass


def test_no_blas_to_limit_is_said_once(monkeypatch, caplog):
    monkeypatch.setattr(threads, "ThreadpoolController", _NoBlas)
    monkeypatch.setattr(threads, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="audiorecords"):
        assert threads.limit_blas_threads(1) == 0
        with threads.single_threaded():
            pass
    assert [r.getMessage() for r in caplog.records] == [threads.NO_BLAS_NOTICE]


def test_overlapping_environ_blocks_export_until_the_last_one_ends(monkeypatch):
    """Two jobs that start worker processes overlap: the environment stays exported until the
    last one ends (processes the second starts after the first ended still get one thread),
    then is what it was before either."""
    for var in threads.THREAD_ENV:
        monkeypatch.delenv(var, raising=False)
    first = threads.single_threaded(environ=True)
    first.__enter__()
    with threads.single_threaded(environ=True):
        first.__exit__(None, None, None)
        assert all(os.environ.get(v) == n for v, n in threads.THREAD_ENV.items())
    assert not [v for v in threads.THREAD_ENV if v in os.environ]
