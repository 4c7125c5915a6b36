"""runners.internals: each internal's guard falls back to the library's stock behaviour and says
so once, the one opt-out turns them all off, and no Beam or CPython module-level name is replaced
while a record job runs (issue 31): other pipelines in the same process see Beam's own."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import DirectRunner
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.worker import statesampler
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core

from runners import direct, internals

ROOT = Path(__file__).resolve().parents[2]
STOCK_MS = statesampler.DEFAULT_SAMPLING_PERIOD_MS  # 200
OTHER_BEAM = "2.78.0"  # a version the internals were not tested with
# Once pipelines.record is imported (other tests), every pipeline's options are also parsed as
# RecordOptions (which requires no flag: RecordConfig checks them); these read like a job's.
_ARGS = ["--input_pattern", "unused", "--output_dir", "unused"]
_WAIT_S = 120  # only a safety net against a hang: the events below order the threads


@pytest.fixture(autouse=True)
def _fresh_notices(monkeypatch):
    """Each test starts in a process where no fallback was announced yet."""
    monkeypatch.setattr(internals, "_noticed", set())


def _notices(caplog) -> list[str]:
    """Our warnings (logger "audiorecords"), not Beam's: PipelineOptions warns once a process
    about unparseable args, so counting every logger's made the test depend on its order."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("audiorecords")
    ]


def _sampling_period(_) -> int:
    return statesampler.get_current_tracker().sampling_period_ms


def _plain_run_sees(period_ms: int) -> None:
    """Runs a plain pipeline on Beam's FnApiRunner; its bundles must sample every `period_ms`."""
    with beam.Pipeline(runner=fn_runner.FnApiRunner(), options=PipelineOptions(_ARGS)) as p:
        periods = p | beam.Create([1, 2]) | beam.Map(_sampling_period)
        assert_that(periods, equal_to([period_ms] * 2))


# The LocalRunner job and the checks beside it meet through these (module globals: the job's
# DoFn is pickled by reference and runs in this process).
_INSIDE, _BESIDE_DONE = threading.Event(), threading.Event()


def _hold(x: int) -> int:
    """Signals that the job is inside a bundle, then keeps it open until the other run is done."""
    _INSIDE.set()
    assert _BESIDE_DONE.wait(_WAIT_S)
    return _sampling_period(x)


def test_versions_other_than_the_tested_one_get_the_stock_behaviour_said_once(caplog):
    assert internals.local_runner_usable() and internals.fast_exit_usable()
    assert internals.view_cache_usable()
    for usable in (internals.local_runner_usable, internals.view_cache_usable):
        assert not usable(OTHER_BEAM), usable
        assert not usable("3.0.0"), usable
        assert usable("2.77.1"), usable  # a patch release is the tested major.minor
    assert not internals.fast_exit_usable("3.12.4")
    options = PipelineOptions(_ARGS)
    assert isinstance(internals.local_runner(options), fn_runner.FnApiRunner)
    assert _notices(caplog) == []
    with caplog.at_level(logging.WARNING, logger="audiorecords"):
        for _ in range(2):
            assert isinstance(internals.local_runner(options, version=OTHER_BEAM), DirectRunner)
    assert _notices(caplog) == [
        "local_runner: Beam 2.78.0 is not the tested 2.77; running Beam's DirectRunner, which "
        "first tries to download and start Prism (it needs the network, and ignores "
        "--direct_running_mode)"
    ]


def test_keras_choice_only_for_the_tested_tensorflow(monkeypatch, caplog):
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    with caplog.at_level(logging.WARNING, logger="audiorecords"):
        internals.load_one_keras(version="2.22.0")
        internals.load_one_keras(version="2.22.0")
    assert "TF_USE_LEGACY_KERAS" not in os.environ
    assert len(_notices(caplog)) == 1 and _notices(caplog)[0].startswith(
        "load_one_keras: TensorFlow 2.22.0 is not the tested 2.21; "
    )
    internals.load_one_keras(version="2.21.3")
    assert os.environ["TF_USE_LEGACY_KERAS"] == "1"


def test_exit_now_runs_atexit_handlers_and_its_fallback_is_sys_exit(caplog):
    with caplog.at_level(logging.WARNING, logger="audiorecords"), pytest.raises(SystemExit) as e:
        internals.exit_now(3, version="3.12.4")
    assert e.value.code == 3
    assert _notices(caplog) == [
        "exit_now: CPython 3.12.4 is not the tested 3.11; the command ends with sys.exit "
        "(the interpreter's teardown: ~0.7 s)"
    ]
    script = (
        "import atexit, sys\n"
        "from runners.internals import exit_now\n"
        "atexit.register(print, 'handler ran')\n"
        "print('buffered', end='')\n"
        "exit_now(3)\n"
    )
    for stock_env in ("0", "1"):
        proc = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, internals.STOCK_ENV: stock_env},
            timeout=_WAIT_S,
        )
        assert proc.returncode == 3, proc.stderr[-2000:]
        assert proc.stdout == "bufferedhandler ran\n"


def test_the_collector_is_paused_only_inside_the_block_and_only_where_tested(monkeypatch, caplog):
    import gc

    assert gc.isenabled() and internals.collector_pause_usable()
    with internals.collector_paused() as paused:
        assert paused and not gc.isenabled()
        with internals.collector_paused() as inner:  # nested (an --append's record job)
            assert inner and not gc.isenabled()
        assert not gc.isenabled()  # the outer block turns it on again, not the inner one
    assert gc.isenabled()
    with pytest.raises(RuntimeError), internals.collector_paused():
        raise RuntimeError("planning failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with internals.collector_paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()
    with caplog.at_level(logging.WARNING, logger="audiorecords"):
        for _ in range(2):
            with internals.collector_paused(version="3.12.4") as paused:
                assert not paused and gc.isenabled()
    assert _notices(caplog) == [
        "collector_paused: CPython 3.12.4 is not the tested 3.11; the garbage collector runs "
        "during planning (slower planning of many files)"
    ]
    monkeypatch.setenv(internals.STOCK_ENV, "1")
    with internals.collector_paused() as paused:
        assert not paused and gc.isenabled()


def test_the_opt_out_turns_every_internal_off_and_says_so(monkeypatch, caplog):
    monkeypatch.setenv(internals.STOCK_ENV, "1")
    assert not internals.local_runner_usable() and not internals.fast_exit_usable()
    assert not internals.view_cache_usable()
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    options = internals.JobOptions(_ARGS)
    with caplog.at_level(logging.WARNING, logger="audiorecords"):
        assert isinstance(internals.local_runner(options), DirectRunner)
        internals.load_one_keras()
        assert options.view_as(StandardOptions) is not options.view_as(StandardOptions)
    assert "TF_USE_LEGACY_KERAS" not in os.environ
    reason = f"{internals.STOCK_ENV} is set"
    assert [n.split(";")[0] for n in _notices(caplog)] == [
        f"local_runner: {reason}",
        f"load_one_keras: {reason}",
        f"JobOptions: {reason}",
    ]
    monkeypatch.setenv(internals.STOCK_ENV, "0")
    assert internals.local_runner_usable() and internals.view_cache_usable()
    assert options.view_as(StandardOptions) is options.view_as(StandardOptions)


def test_no_beam_name_is_replaced_beside_or_after_a_local_run():
    """A LocalRunner job (the record job's runner) holds a bundle open while this thread looks
    at Beam's module-level names and runs a plain pipeline: both see Beam's own, during the job
    and after it (issue 31: the sampler class and DoFn introspection are no longer swapped)."""
    beams = (statesampler.StateSampler, core.get_function_args_defaults)
    _INSIDE.clear()
    _BESIDE_DONE.clear()
    failures: list[BaseException] = []

    def local_job() -> None:
        try:
            with beam.Pipeline(runner=direct.LocalRunner(), options=PipelineOptions(_ARGS)) as p:
                periods = p | beam.Create([1]) | beam.Map(_hold)
                assert_that(periods, equal_to([STOCK_MS]))  # Beam's period in the job too
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(e)
            _INSIDE.set()

    job = threading.Thread(target=local_job)
    job.start()
    try:
        assert _INSIDE.wait(_WAIT_S)
        assert not failures, failures
        assert (statesampler.StateSampler, core.get_function_args_defaults) == beams
        _plain_run_sees(STOCK_MS)  # beside the job
    finally:
        _BESIDE_DONE.set()
        job.join(_WAIT_S)
    assert not failures, failures
    assert (statesampler.StateSampler, core.get_function_args_defaults) == beams


def test_thread_env_keeps_a_value_the_user_set_and_is_restored(monkeypatch):
    from runners import threads

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    saved = threads.export_thread_env()
    assert os.environ["OMP_NUM_THREADS"] == "3" and os.environ["MKL_NUM_THREADS"] == "1"
    threads.restore_env(saved)
    assert os.environ["OMP_NUM_THREADS"] == "3" and "MKL_NUM_THREADS" not in os.environ
