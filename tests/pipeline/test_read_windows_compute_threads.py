"""``compute_threads``: the size of the features thread pool of one worker process.

The DirectRunner gives each process its share of the machine's cores (`runners.direct`); the
job puts that number in the read stage's configuration (`pipelines.job.run_job`), and the read stage
computes features in a pool of that many threads (`ReadTaskFn`). Pinned here without running a
pipeline: the rule as literals, the number the job hands to the read stage, and the threads the
read stage's feature computations really run in (its DoFn methods called directly on the sample
files, nothing of Beam or TensorFlow replaced).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

import runners
from pipelines import job, launch_in_job
from pipelines import record as _record  # noqa: F401 - registers the record flags with Beam
from pipelines.config import RecordConfig
from pipelines.plan import one_task, plan_record
from pipelines.resume import output_dir
from runners import direct
from tests.support import wavgen
from tests.support.record_helpers import SAMPLE_DIR
from transforms.audio import features
from transforms.stages.read_windows import ReadTaskFn

SAMPLE = str(SAMPLE_DIR / "*.wav")  # 6 files of 48000 frames
SAMPLE_WIN = 4000
# The read stage computes a chunk of ~8 MiB of samples per job (short files' chunks are packed
# into one job up to that size): windows of 2^20 samples make chunks of 2 windows, so two files
# of 3 windows each are 4 jobs (2 + 1 windows per file).
WIN = 1 << 20
FILE_WINDOWS = 3
JOBS = 4
# How long a feature computation waits for another one to run beside it. With a pool of 2 the
# second chunk is decoded and submitted in milliseconds; a pool of 1 never gets there.
MEET_S = 10


def _configure(*argv: str, input_bytes: int = 1000) -> PipelineOptions:
    args = ["--input_pattern", SAMPLE, "--output_dir", "/tmp/unused", *argv]
    return runners.configure(PipelineOptions(args), input_bytes=input_bytes, argv=args)


@pytest.mark.parametrize(
    ("cores", "argv", "threads"),
    [  # the rule, as literals: in memory one process gets every core; N processes cores // N
        (4, (), 4),
        (2, (), 2),
        (1, (), 1),
        (8, ("--direct_num_workers", "2"), 4),
        (8, ("--direct_num_workers", "3"), 2),
        (6, ("--direct_num_workers", "4"), 1),
        (8, ("--direct_running_mode", "multi_processing"), 1),  # one worker per core
        (8, ("--direct_running_mode", "in_memory"), 8),
        (8, ("--direct_running_mode", "multi_threading"), 1),  # bundles already in parallel
    ],
)
def test_compute_threads_is_the_process_share_of_the_cores(monkeypatch, cores, argv, threads):
    """Pins the features pool size the DirectRunner gives a process, for given cores and
    running mode / worker count."""
    monkeypatch.setattr(direct.os, "cpu_count", lambda: cores)
    assert runners.compute_threads(_configure(*argv)) == threads


class _Planned(Exception):
    """Stops `run_job` right after planning, carrying the plan it would run."""

    def __init__(self, plan):
        super().__init__("planned")
        self.plan = plan


@pytest.mark.parametrize(
    ("cores", "argv", "threads", "tasks"),
    [(3, (), 3, 1), (8, ("--direct_num_workers", "2"), 4, None)],
)
def test_run_job_hands_the_process_share_to_the_read_stage(
    monkeypatch, tmp_path, cores, argv, threads, tasks
):
    """Pins that the job's read stage gets the runner's `compute_threads` (3 of 3 cores in
    memory, in a single read task; 4 of 8 cores for each of 2 worker processes)."""
    monkeypatch.setattr(direct.os, "cpu_count", lambda: cores)

    def stop(plan):
        raise _Planned(plan)

    monkeypatch.setattr(launch_in_job, "prepare_output_dir", stop)  # planned in the job
    monkeypatch.setattr(output_dir, "prepare_output_dir", stop)  # planned in the launcher
    out = str(tmp_path / "out")
    config = RecordConfig(input_pattern=SAMPLE, output_dir=out, win_len=SAMPLE_WIN)
    with pytest.raises(_Planned) as planned:  # planned in the job: the stages' ReadWindowsConfig
        job.run_job(config, beam_argv=list(argv))
    assert planned.value.plan.read.compute_threads == threads
    with pytest.raises(_Planned) as planned:  # planned in the launcher: its tasks too
        job.run_job(config, beam_argv=list(argv), plan_in_job=False)
    plan = planned.value.plan
    assert plan.read.compute_threads == threads
    if tasks is not None:
        assert len(plan.tasks) == tasks
    else:
        assert len(plan.tasks) > 1  # worker processes read tasks side by side


def _feature_threads(tmp_path, monkeypatch, *, compute_threads: int, meet: int) -> tuple:
    """Runs the read stage's DoFn on two long files with `compute_threads`; returns (the
    thread name of every feature computation, whether the first `meet` computations ran at the
    same time). Each of those waits (at most MEET_S) until `meet` of them are running."""
    out = tmp_path / "out"
    for i in range(2):
        samples = wavgen.synth(FILE_WINDOWS * WIN, seed=i)
        wavgen.write_wav(tmp_path / f"f{i}_x.wav", samples, sample_rate=16000, subtype="PCM_16")
    pattern = str(tmp_path / "*.wav")
    config = RecordConfig(input_pattern=pattern, output_dir=str(out), win_len=WIN)
    plan = one_task(plan_record(config))
    (out / ".tmp").mkdir(parents=True)
    names, calls = [], itertools.count()
    barrier = threading.Barrier(meet, timeout=MEET_S) if meet > 1 else None
    met = threading.Event()
    compute = features.compute_features

    def observed(*args, **kwargs):
        names.append(threading.current_thread().name)
        if barrier is not None and next(calls) < meet:
            try:
                barrier.wait()
                met.set()
            except threading.BrokenBarrierError:
                pass
        return compute(*args, **kwargs)

    monkeypatch.setattr(features, "compute_features", observed)
    read = dataclasses.replace(plan.read, compute_threads=compute_threads)
    fn = ReadTaskFn(read, plan.sharding, classes=plan.classes, output_dir=str(out))
    fn.setup()
    try:
        (task,) = plan.tasks
        outputs = list(fn.process(task))
    finally:
        fn.teardown()
    assert outputs and len(names) == JOBS  # every chunk's windows were featurised, once
    return names, met.is_set()


@pytest.mark.parametrize("compute_threads", [2, 3])
def test_features_run_in_a_pool_of_compute_threads(tmp_path, monkeypatch, compute_threads):
    """Pins that with compute_threads > 1 features of different chunks are computed at the
    same time, in more than one thread of the features pool and in no more than
    compute_threads threads."""
    names, met = _feature_threads(tmp_path, monkeypatch, compute_threads=compute_threads, meet=2)
    assert met, f"no two feature computations ran at the same time: threads {sorted(set(names))}"
    assert 2 <= len(set(names)) <= compute_threads, names
    assert all(name.startswith("audiorecords-features") for name in names), names


def test_one_compute_thread_computes_features_in_one_thread(tmp_path, monkeypatch):
    """Pins the contrast: with compute_threads 1 every feature computation runs in one thread,
    outside any features pool."""
    names, _ = _feature_threads(tmp_path, monkeypatch, compute_threads=1, meet=1)
    assert len(set(names)) == 1, names
    assert not names[0].startswith("audiorecords-features"), names
