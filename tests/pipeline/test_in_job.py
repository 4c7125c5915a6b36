"""A plain record run is planned in the job (`pipelines.plan.in_job`, issue 42): the same bytes as
the launcher's plan, and the launcher's one-line refusals.

- Both paths (`pipelines.job.run_job` with ``plan_in_job`` True / False) write the same files:
  every shard, the schemas, the source tables, the offsets, ``transform_fn/`` and
  ``feature_fn/`` (SavedModels: each path in its own process to the same directory, as their
  graphs name the run's temporary directory and number their functions per process; only
  ``fingerprint.pb`` differs run to run) and the manifest apart from its times. Clips of one
  second with a few bad and non-WAV files, ``--splits`` and ``--classes`` refusing a folder.
- A check that needs the headers (``--strict`` and a bad file, ``--signal_dtype`` that cannot
  hold a file) fails the job's plan step: the command prints the launcher's line, exits 2, and
  leaves no output directory behind.
- The fingerprint of a run planned in the job holds no header-derived part and is marked.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from pipelines import record
from pipelines.resume import fingerprint as fp
from tests.support.forked import Forker
from tests.support.record_helpers import dataset_digests

ROOT = Path(__file__).resolve().parents[2]
RATE = 16000
RUN = """
import sys
from apache_beam.options.pipeline_options import PipelineOptions
from pipelines import job
from pipelines.config import RecordConfig
from pipelines.record import RecordOptions
argv = sys.argv[2:]
config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(RecordOptions))
result = job.run_job(config, beam_argv=argv, plan_in_job=sys.argv[1] == "job")
print(result.num_examples, result.num_files, result.num_failed)
"""


def _clips(root: Path, n: int) -> Path:
    """`n` one-second 16-bit clips in 4 folders (``odd`` outside ``--classes``), 3 broken WAVs
    and a file that is not a WAV."""
    rng = np.random.default_rng(42)
    for i in range(n):
        folder = root / ("yes", "no", "up", "odd")[i % 4]
        folder.mkdir(parents=True, exist_ok=True)
        x = rng.integers(-20000, 20000, size=RATE, dtype=np.int16)
        sf.write(folder / f"c{i:05d}.wav", x, RATE, "PCM_16")
    for i in range(3):
        (root / "yes" / f"bad{i}.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk" * (i + 1))
    (root / "no" / "notes.wav").write_bytes(b"hello, not audio")
    return root


def _args(clips: Path, out: Path) -> list[str]:
    return [
        "--input_pattern",
        f"{clips}/*/*.wav",
        "--output_dir",
        str(out),
        "--label_source",
        "dirname",
        "--win_len",
        "8000",
        "--features",
        "log_mel",
        "--splits",
        "train=0.8,test=0.2",
        "--classes",
        "yes,no,up",
    ]


def _run(forker: Forker, mode: str, argv: list[str]) -> str:
    """`RUN` in a process of its own (forked: `forker`), planned in `mode`: its summary line."""
    done = forker.run(["-c", RUN, mode, *argv], timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # two jobs of 2,000 clips in subprocesses
def test_planned_in_the_job_or_the_launcher_the_outputs_are_byte_identical(forker, tmp_path):
    clips = _clips(tmp_path / "clips", 2000)
    out = tmp_path / "ds"
    digests, counts = {}, {}
    for mode in ("launcher", "job"):
        counts[mode] = _run(forker, mode, _args(clips, out))
        digests[mode] = dataset_digests(out)
        out.rename(tmp_path / f"ds-{mode}")
    assert counts["job"] == counts["launcher"] == "3000 1500 504"  # 500 odd + 4 bad refused
    assert {"manifest.json", "transform_fn/saved_model.pb"} <= set(digests["job"])
    assert any(name.endswith(".tfrecord") or "-of-" in name for name in digests["job"])
    different = sorted(
        name
        for name in set(digests["job"]) | set(digests["launcher"])
        if digests["job"].get(name) != digests["launcher"].get(name)
    )
    assert different == []


def test_a_fail_fast_check_in_the_plan_step_is_the_launchers_one_line(tmp_path, capsys):
    clips = _clips(tmp_path / "clips", 8)
    sf.write(clips / "up" / "deep.wav", np.zeros(RATE, np.int32), RATE, "PCM_24")
    out = tmp_path / "ds"
    cases = {
        "--strict": "error: --strict: ",
        "--signal_dtype=int16": "error: --signal_dtype int16 would round the samples of 1 file(s)",
    }
    for flag, start in cases.items():
        code = record.main([*_args(clips, out), flag])
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == record.EXIT_USAGE, err
        assert len(lines) == 1 and lines[0].startswith(start), err
        assert "while running" not in lines[0] and "Traceback" not in err, err
        assert not out.exists()  # the run made it: removed, as the launcher left nothing


def test_the_fingerprint_of_a_run_planned_in_the_job_has_no_header_part(tmp_path):
    from pipelines.config import RecordConfig
    from pipelines.plan import list_inputs, plan_record

    clips = _clips(tmp_path / "clips", 8)
    config = RecordConfig(
        input_pattern=f"{clips}/*/*.wav",
        output_dir=str(tmp_path / "ds"),
        win_len=8000,
        label_source="dirname",
        classes="yes,no,up",
    )
    listed = list_inputs(config)
    assert all(f.info is None for f in listed.inputs)
    cut = {"cpu_count": 2, "single_task": True}
    made = fp.fingerprint(
        config.params(),
        listed.stamps,
        derived=fp.listing_digest(listed, cut=cut),
        planned_in_job=True,
    )
    assert fp.planned_in_job(made)
    # the header's refusals are not in it: the same digest whatever the headers hold
    plan = plan_record(config)
    assert any(f.error and f.info is None and "bad" in f.path for f in plan.inputs)
    assert made["plan"] == fp.listing_digest(list_inputs(config), cut=cut)
    assert made["plan"] != fp.listing_digest(listed, cut={**cut, "single_task": False})
    launcher = fp.fingerprint(config.params(), listed.stamps, derived=fp.plan_digest(plan))
    assert fp.first_difference(launcher, made) is not None
    # stored (JSON), then made again by a resumed run after the headers were read: the same
    relisted = list_inputs(config)
    again = fp.fingerprint(
        config.params(),
        relisted.stamps,
        derived=fp.listing_digest(relisted, cut=cut),
        planned_in_job=True,
    )
    assert fp.first_difference(json.loads(json.dumps(made)), again) is None
    assert fp.first_difference(json.loads(json.dumps(made)), launcher) is not None


def test_the_plan_step_refuses_feature_shapes_other_than_the_launchers(tmp_path):
    """TFT's analysis is built with the launcher's feature shapes: a plan step whose headers give
    others (the first file changed in between) fails with one line instead of writing records
    of another layout."""
    import dataclasses

    from pipelines.config import RecordConfig, UsageError
    from pipelines.plan import TaskCut, launcher_windows_config, list_inputs
    from pipelines.plan.in_job import PlanArgs, plan_step, summarize
    from pipelines.plan.reads import scan_headers

    clips = _clips(tmp_path / "clips", 8)
    config = RecordConfig(
        input_pattern=f"{clips}/*/*.wav",
        output_dir=str(tmp_path / "ds"),
        win_len=8000,
        features=["log_mel"],
        label_source="dirname",
        classes="yes,no,up",
    )
    listed = list_inputs(config)
    read = launcher_windows_config(config, listed)
    args = PlanArgs(
        config=config,
        listed=listed,
        cpu_count=2,
        single_task=True,
        compute_threads=1,
        feature_shapes=dict(read.layout.feature_shapes),
    )
    summary = summarize(list(scan_headers(list(listed.inputs))), args)
    assert any(isinstance(out, TaskCut) for out in plan_step(summary, args))  # the same: planned
    changed = dataclasses.replace(args, feature_shapes={"log_mel": (1, 64)})
    with pytest.raises(UsageError, match="the input files changed after the job started"):
        list(plan_step(summary, changed))


def test_the_job_runs_with_the_garbage_collector_on(tmp_path):
    """The launcher plans with CPython's cyclic collector paused (`runners.internals`); the job
    that follows, in this process with the default runner, runs with it on again."""
    import gc

    collections = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    clips = _clips(tmp_path / "clips", 8)
    gc.callbacks.append(count)
    try:
        assert record.main(_args(clips, tmp_path / "ds")) == 0
    finally:
        gc.callbacks.remove(count)
    assert gc.isenabled() and len(collections) > 10, collections


def _mixed(root: Path) -> Path:
    """30 files of 0.05-4.5 s (some shorter than a window: no row), 16- and 24-bit, in 4
    folders (``odd`` outside ``--classes``) and 2 broken WAVs."""
    rng = np.random.default_rng(7)
    for i in range(30):
        folder = root / ("yes", "no", "up", "odd")[i % 4]
        folder.mkdir(parents=True, exist_ok=True)
        frames = int(RATE * rng.choice([0.05, 0.5, 1.0, 2.5, 4.5]))
        deep = i % 5 == 3
        x = rng.integers(-20000, 20000, size=frames, dtype=np.int32 if deep else np.int16)
        sf.write(folder / f"m{i:03d}.wav", x, RATE, "PCM_24" if deep else "PCM_16")
    for i in range(2):
        (root / "no" / f"bad{i}.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")
    return root


def _headed(clips: Path, out: Path, **options: Any) -> tuple[Any, Any, list]:
    """The config of `options` on `clips` (``--label_source dirname``, windows of 1,000
    frames), its listing (`list_inputs`) and its files with their headers (`scan_headers`)."""
    from pipelines.config import RecordConfig
    from pipelines.plan import list_inputs
    from pipelines.plan.reads import scan_headers

    config = RecordConfig(
        input_pattern=f"{clips}/*/*.wav",
        output_dir=str(out),
        win_len=1000,
        label_source="dirname",
        **options,
    )
    listed = list_inputs(config)
    return config, listed, scan_headers(list(listed.inputs))


def _batch_wise(config, listed, headed, *, size, single_task):
    """`plan_headers`' result made as the job's plan step makes it: batches of `size` files
    summarised and merged in reverse order, then each batch cut on its own."""
    from pipelines import plan as planning

    batches = [headed[i : i + size] for i in range(0, len(headed), size)]
    summaries = [planning.summarize_headers(config, listed, b) for b in batches]
    summary = planning.merge_summaries(reversed(summaries))
    cut = planning.plan_summary(config, listed, summary, cpu_count=2, single_task=single_task)
    pieces: dict[int, list] = {}
    for b in reversed(batches):
        for task_id, seg in planning.cut_batch(config, listed, b, cut):
            pieces.setdefault(task_id, []).append(seg)
    tasks = tuple(planning.read_task(t, segs) for t, segs in sorted(pieces.items()))
    return cut, tasks, [f.path for b in batches for f in b if f.error]


@pytest.mark.parametrize("single_task", [False, True])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"splits": "train=0.5,test=0.5", "max_elements": 150},
        {"splits": "train=0.7,test=0.3", "elements_per_shard": 40, "hop_len": 500},
        {"max_elements": 1, "features": "none"},
    ],
)
def test_planned_batch_by_batch_the_tasks_are_the_launchers(tmp_path, options, single_task):
    """Batches of 4 files: tasks spanning batches, files cut across tasks, files without rows,
    ``--max_elements`` cutting inside a batch, splits: the same read config, shard counts,
    read tasks (ids and segments) and refused files as `plan_headers` on every file."""
    from pipelines.plan import plan_headers

    clips = _mixed(tmp_path / "clips")
    config, listed, headed = _headed(
        clips, tmp_path / "ds", classes="yes,no,up", signal_dtype="auto", **options
    )
    plan = plan_headers(config, listed, headed, cpu_count=2, single_task=single_task)
    if not (single_task or options.get("max_elements") == 1):  # files cut across tasks
        assert len(plan.tasks) >= 3
        assert len({seg.file.index for t in plan.tasks for seg in t.segments}) < sum(
            len(t.segments) for t in plan.tasks
        )
    for size in (1, 4, 256):
        cut, tasks, refused = _batch_wise(
            config, listed, headed, size=size, single_task=single_task
        )
        assert (cut.read, cut.sharding) == (plan.read, plan.sharding)
        assert tasks == plan.tasks
        assert refused == [f.path for f in plan.inputs if f.error]


@pytest.mark.parametrize("rates", [(8000, 16000, 22050), (16000, 8000, 22050)])
def test_planned_batch_by_batch_the_first_header_is_the_lowest_indexs(tmp_path, rates):
    """Files of three sample rates after a broken first file, batches summarised and merged in
    reverse order, as a runner may merge them: the first header is the lowest index's, whose
    rate checks the feature parameters (``--upper_edge_hz 6000``: over 8 kHz files' Nyquist
    frequency), so the job refuses the launcher's refusal in its words and plans its plan."""
    from pipelines.config import UsageError
    from pipelines.plan import merge_summaries, plan_headers, summarize_headers

    root = tmp_path / "clips"
    rng = np.random.default_rng(3)
    for folder, rate in zip(("no", "up", "yes"), rates, strict=True):  # listed in this order
        (root / folder).mkdir(parents=True)
        for i in range(4):
            x = rng.integers(-20000, 20000, size=rate // 2 + 100 * i, dtype=np.int16)
            sf.write(root / folder / f"r{i}.wav", x, rate, "PCM_16")
    (root / "no" / "a_bad.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")  # index 0
    config, listed, headed = _headed(
        root, tmp_path / "ds", classes="yes,no,up", features="log_mel", upper_edge_hz=6000.0
    )
    first = next(f for f in headed if f.info is not None)
    assert (first.index, first.info.sample_rate) == (1, rates[0])
    for size in (1, 2, 5):
        summaries = [summarize_headers(config, listed, headed[i : i + size])
                     for i in range(0, len(headed), size)]  # fmt: skip
        assert merge_summaries(reversed(summaries)).first_header == (1, first.info)
        if rates[0] == 8000:
            with pytest.raises(UsageError) as launcher:
                plan_headers(config, listed, headed, cpu_count=2, single_task=False)
            with pytest.raises(UsageError) as job:
                _batch_wise(config, listed, headed, size=size, single_task=False)
            assert str(job.value) == str(launcher.value)
            assert "upper_edge_hz=6000.0 outside" in str(job.value)
            continue
        plan = plan_headers(config, listed, headed, cpu_count=2, single_task=False)
        cut, tasks, _ = _batch_wise(config, listed, headed, size=size, single_task=False)
        assert (cut.read, cut.sharding, tasks) == (plan.read, plan.sharding, plan.tasks)


def test_planned_batch_by_batch_a_refusal_is_the_launchers_line(tmp_path):
    """``--signal_dtype int16`` on 24-bit files spread over batches, ``--strict`` with bad files
    in later batches: the same one line (the first files named, the others counted)."""
    from pipelines.config import UsageError
    from pipelines.plan import plan_headers

    clips = _mixed(tmp_path / "clips")
    for options in ({"signal_dtype": "int16"}, {"strict": True}):
        config, listed, headed = _headed(clips, tmp_path / "ds", classes="yes,no,up", **options)
        with pytest.raises(UsageError) as launcher:
            plan_headers(config, listed, headed, cpu_count=2, single_task=False)
        with pytest.raises(UsageError) as job:
            _batch_wise(config, listed, headed, size=3, single_task=False)
        assert str(job.value) == str(launcher.value)
        assert "and 1 more" in str(job.value) or options.get("strict")


def test_a_batch_summary_holds_one_entry_a_format_whatever_the_lengths(tmp_path):
    """30 files of 5 lengths in two formats (16- and 24-bit): each summary, and their merge,
    holds one header entry a format, not one a length (a corpus of arbitrary lengths would
    otherwise give one a file), with every file counted."""
    from pipelines.plan import merge_summaries, summarize_headers

    config, listed, headed = _headed(_mixed(tmp_path / "clips"), tmp_path / "ds")
    assert len({f.info for f in headed if f.info}) > 2  # lengths make more distinct headers
    summary = merge_summaries(summarize_headers(config, listed, headed[i : i + 4]) for i in (0, 4))
    whole = merge_summaries(
        [summarize_headers(config, listed, headed[i : i + 4]) for i in range(0, len(headed), 4)]
    )
    assert len(summary.headers) <= 2
    assert sorted(h[0].subtype for h in whole.headers) == ["PCM_16", "PCM_24"]
    assert sum(count for _, count, _ in whole.headers) == sum(f.info is not None for f in headed)


def test_merged_accumulators_of_batch_summaries_are_every_batchs(tmp_path):
    """`MergeSummaries` as a runner uses it with several bundles: each accumulator adds some
    batches' summaries, the accumulators are merged (in any order), the output is the summary of
    every batch (`merge_summaries`), which plans the launcher's tasks."""
    from pipelines.plan import merge_summaries, plan_headers, plan_summary, summarize_headers
    from pipelines.plan.in_job import MergeSummaries

    config, listed, headed = _headed(
        _mixed(tmp_path / "clips"), tmp_path / "ds", classes="yes,no,up", signal_dtype="auto"
    )
    summaries = [
        summarize_headers(config, listed, headed[i : i + 3]) for i in range(0, len(headed), 3)
    ]
    fn = MergeSummaries()
    accumulators = []
    for group in (summaries[0:4], summaries[4:5], summaries[5:]):
        acc = fn.create_accumulator()
        for summary in group:
            acc = fn.add_input(acc, summary)
        accumulators.append(acc)
    plan = plan_headers(config, listed, headed, cpu_count=2, single_task=False)
    for order in (accumulators, accumulators[::-1]):
        merged = fn.extract_output(fn.merge_accumulators(iter(order)))
        assert merged == merge_summaries(summaries)
        cut = plan_summary(config, listed, merged, cpu_count=2, single_task=False)
        assert (cut.read, cut.sharding) == (plan.read, plan.sharding)
    again = fn.merge_accumulators([fn.merge_accumulators(accumulators[:2]), accumulators[2]])
    assert fn.extract_output(again) == merge_summaries(summaries)


@pytest.mark.parametrize(
    "runner", [(), ("--direct_num_workers=2", "--direct_running_mode=multi_threading")]
)
def test_the_plan_step_with_small_header_batches_gives_the_launchers_tasks(tmp_path, runner):
    """`PlanInJob` in a Beam pipeline with batches of 3 files: the read tasks, the refused files
    and the (ReadWindowsConfig, Sharding) are `plan_headers`' own; also on a DirectRunner of
    two workers, whose bundles' summaries are merged accumulators."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from pipelines.plan import plan_headers
    from pipelines.plan.in_job import PlanArgs, PlanInJob
    from runners.direct import LocalRunner
    from transforms.stages import staged

    config, listed, headed = _headed(
        _mixed(tmp_path / "clips"),
        tmp_path / "ds",
        features="none",
        classes="yes,no,up",
        splits="train=0.5,test=0.5",
    )
    plan = plan_headers(config, listed, headed, cpu_count=2, single_task=False)
    assert len(plan.tasks) > 3
    args = PlanArgs(config=config, listed=listed, cpu_count=2, single_task=False, compute_threads=1)
    inputs = staged.stage(str(tmp_path / "ds"), "inputs", listed.inputs)
    try:
        pipeline = (
            TestPipeline(runner=LocalRunner(), options=PipelineOptions(list(runner)))
            if runner
            else TestPipeline()
        )
        with pipeline as p:
            out = p | PlanInJob(inputs, args, batch_size=3)
            assert_that(out["tasks"], equal_to(list(plan.tasks)), label="tasks")
            refused = [{"path": f.path, "reason": f.error} for f in plan.inputs if f.error]
            assert_that(out["errors"], equal_to(refused), label="errors")
            planned = out["planned"] | beam.MapTuple(lambda read, sharding: (read, sharding))
            assert_that(planned, equal_to([(plan.read, plan.sharding)]), label="planned")
    finally:
        staged.release(inputs)


def test_a_version_1_record_of_a_run_planned_in_the_job_still_resumes(tmp_path):
    """An unfinished run planned in the job whose resume record version 1 wrote (the inputs a
    list of [path, size, time], the listing digested file by file) is resumed: the launcher
    digests the listing as version 1 did to compare, then gives a version-2 record to write; a
    changed label is still refused, in one line."""
    import dataclasses

    from pipelines import job
    from pipelines.config import RecordConfig, UsageError
    from pipelines.plan import list_inputs, one_task, plan_record
    from pipelines.plan.reads import RUN_MARKER

    clips = _clips(tmp_path / "clips", 8)
    out = tmp_path / "ds"
    config = RecordConfig(
        input_pattern=f"{clips}/*/*.wav",
        output_dir=str(out),
        win_len=8000,
        label_source="dirname",
        classes="yes,no,up",
        resume=True,
    )
    listed = list_inputs(config)
    plan = one_task(plan_record(config))
    cut = {"cpu_count": os.cpu_count() or 1, "single_task": True}

    def unfinished(listing) -> None:
        (out / ".tmp").mkdir(parents=True, exist_ok=True)
        (out / RUN_MARKER).write_text("ours\n")
        version_1 = {
            "fingerprint_version": 1,
            "package": fp.package_version(),
            "options": fp.json_values(plan.params),
            "inputs": [list(stamp) for stamp in listing.stamps],
            "plan": fp.listing_digest(listing, cut=cut, version=1),
            "planned_in": "job",
        }
        (out / fp.FINGERPRINT_FILE).write_text(json.dumps(version_1, indent=1))

    unfinished(listed)
    fingerprint, reusable = job.resume_in_job(plan, listed, fp.read_fingerprint(str(out)), cut=cut)
    assert reusable and fingerprint["fingerprint_version"] == 2 and fp.planned_in_job(fingerprint)
    assert fingerprint["plan"] == fp.listing_digest(listed, cut=cut)
    (out / fp.FINGERPRINT_FILE).write_text(json.dumps(fingerprint))  # as the job writes it
    assert job.resume_in_job(plan, listed, fp.read_fingerprint(str(out)), cut=cut)[1]
    first, *rest = listed.inputs
    relabelled = dataclasses.replace(
        listed, inputs=(dataclasses.replace(first, label="other"), *rest)
    )
    unfinished(relabelled)
    with pytest.raises(UsageError, match=r"--resume: .* another plan: the plan changed"):
        job.resume_in_job(plan, listed, fp.read_fingerprint(str(out)), cut=cut)


def test_a_resume_planned_in_the_job_refuses_a_changed_input_naming_it(tmp_path, monkeypatch):
    """``--resume`` of an unfinished run planned in the job is compared in the launcher from the
    listing (the launcher's reader of every header fails if called): a file
    that changed since the run started is refused in one line naming it, and the committed work
    is left as it was."""
    from pipelines import job
    from pipelines.config import RecordConfig, UsageError
    from pipelines.plan import list_inputs, plan_record
    from pipelines.plan.reads import RUN_MARKER
    from pipelines.resume import reuse

    clips = _clips(tmp_path / "clips", 8)
    out = tmp_path / "ds"
    options = dict(input_pattern=f"{clips}/*/*.wav", output_dir=str(out), win_len=8000)
    config = RecordConfig(**options, label_source="dirname", classes="yes,no,up", resume=True)
    listed = list_inputs(config)
    cut = {"cpu_count": os.cpu_count() or 1, "single_task": True}  # the in-memory DirectRunner
    (out / reuse.COMMITS_DIR).mkdir(parents=True)
    (out / RUN_MARKER).write_text("ours\n")
    record = out / reuse.COMMITS_DIR / "000000-0-3.json"
    record.write_text("{}")
    stored = job.job_fingerprint(plan_record(config).params, listed, cut=cut)
    (out / fp.FINGERPRINT_FILE).write_text(json.dumps(stored))

    def no_header_read(*args, **kwargs):
        raise AssertionError("the launcher read headers")

    monkeypatch.setattr(job, "read_headers", no_header_read)
    changed = clips / "up" / "c00002.wav"
    changed.write_bytes(changed.read_bytes() + b"\0\0")
    with pytest.raises(UsageError, match=rf"--resume: .* input changed: {changed} \(size"):
        job.run_job(config, plan_in_job=True)
    assert record.read_text() == "{}" and (out / fp.FINGERPRINT_FILE).exists()


def test_a_task_resumed_in_the_job_drops_its_stale_records_even_if_already_gone(tmp_path):
    """The job's reuse step (`in_job.reuse_committed`): a task's records it does not reuse (here
    one unreadable, one of another version) are deleted; one listed but already gone (a
    retried bundle removed it first) is no error; the task is read from its start."""
    from pipelines.plan import in_job
    from pipelines.resume import reuse
    from transforms.spec.types import ReadTask

    commits = tmp_path / reuse.COMMITS_DIR
    commits.mkdir(parents=True)
    unreadable, old = commits / "000007-0-1.json", commits / "000007-0-2.json"
    unreadable.write_text("{not json")
    old.write_text(json.dumps({"version": reuse.COMMIT_VERSION - 1, "task": 7}))
    gone = commits / "000007-1-2.json"
    paths = reuse.record_paths(str(tmp_path))
    paths[7].append(str(gone))
    task = ReadTask(7, ("segment a", "segment b"))
    resume = in_job.ResumeArgs(output_dir=str(tmp_path), checkpoints=True)
    again = in_job.reuse_committed(task, paths, resume)
    assert again == task and again.start == 0 and again.resumed == ()
    assert not unreadable.exists() and not old.exists()
    assert in_job.reuse_committed(task, paths, resume) == task  # retried: all gone, no error


def _annotated(root: Path) -> tuple[Path, Path]:
    """Six 8 kHz files (one stereo, one broken) and a CSV table: overlapping events in the last
    file only (the run's most events a window, found in the last batch), a row past its file's
    end whose label no other row has, a channel-1 row on a mono file, a row on the broken file,
    one on an unknown file."""
    rng = np.random.default_rng(5)
    audio = root / "audio"
    audio.mkdir(parents=True)
    for i in range(5):
        shape = (8000 * (3 + i), 2) if i == 2 else 8000 * (3 + i)
        sf.write(audio / f"f{i}.wav", rng.integers(-9000, 9000, shape, np.int16), 8000, "PCM_16")
    (audio / "f5.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")
    rows = [
        "f0.wav,0.5,1.5,tug,",
        "f1.wav,3.5,4.5,seal,",  # past the end of a 4 s file: "seal" stays a class
        "f1.wav,1.0,2.0,tug,1",  # channel 1 of a mono file
        "f2.wav,1.0,2.0,whale,1",
        "f2.wav,2.0,3.0,tug,",
        "f4.wav,1.0,4.0,whale,",
        "f4.wav,1.5,2.5,tug,",
        "f4.wav,1.8,2.2,grunt,",
        "f5.wav,0.0,1.0,orca,",  # the broken file
        "nowhere.wav,0.0,1.0,tug,",
    ]
    table = root / "events.csv"
    table.write_text("path,start_s,end_s,label,channel\n" + "\n".join(rows) + "\n")
    return audio, table


@pytest.mark.parametrize("strict", [False, True])
def test_the_plan_step_of_an_annotated_run_gives_the_launchers_plan_and_bad_rows(tmp_path, strict):
    """``--annotations`` planned in the job: the plan step (batches of 2 files) annotates each
    batch's files, finds the most events a window in the last batch, and gives `plan_headers`'
    read config (the ``events`` shape), sharding, read tasks (each segment's rows, compared by
    digest: an `InputFile`'s equality leaves its annotation out) and bad rows; with
    ``--strict``, the launcher's one line naming the first bad row."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from pipelines.config import RecordConfig, UsageError
    from pipelines.plan import list_inputs, plan_headers, read_headers
    from pipelines.plan.in_job import PlanArgs, PlanInJob
    from transforms.stages import staged

    audio, table = _annotated(tmp_path)
    if strict:  # else the broken file is refused first
        (audio / "f5.wav").unlink()
    config = RecordConfig(
        input_pattern=f"{audio}/*.wav",
        output_dir=str(tmp_path / "ds"),
        win_len=1000,
        features="none",
        annotations=str(table),
        channel_mode="split",
        splits="train=0.5,test=0.5",
        strict=strict,
    )
    listed = list_inputs(config)  # the launcher's: the tables matched, no header read
    orca = () if strict else ("orca",)  # the broken file's row: matched, so a class
    assert listed.classes == ("background", "grunt", *orca, "seal", "tug", "whale")
    assert all(f.info is None for f in listed.inputs)
    args = PlanArgs(config=config, listed=listed, cpu_count=2, single_task=False, compute_threads=1)
    inputs = staged.stage(str(tmp_path / "staged"), "inputs", listed.inputs)
    try:
        if strict:
            with pytest.raises(UsageError) as launcher:
                read_headers(config, listed)
            with pytest.raises(Exception) as job, TestPipeline() as p:
                _ = p | PlanInJob(inputs, args, batch_size=2)
            assert (
                str(launcher.value)
                == f"--strict: {table}:3: ends at 4.5 s, beyond the file's duration (4 s)"
            )
            assert str(launcher.value) in str(job.value)
            return
        scanned = read_headers(config, listed)
        plan = plan_headers(config, scanned, scanned.inputs, cpu_count=2, single_task=False)
        assert plan.read.layout.max_events == 3 and len(plan.tasks) > 2
        with TestPipeline() as p:
            out = p | PlanInJob(inputs, args, batch_size=2)
            assert_that(
                out["tasks"] | beam.Map(_task_rows),
                equal_to([_task_rows(t) for t in plan.tasks]),
                label="tasks",
            )
            planned = out["planned"] | beam.MapTuple(lambda read, sharding: (read, sharding))
            assert_that(planned, equal_to([(plan.read, plan.sharding)]), label="planned")
            assert_that(out["bad_rows"], equal_to(list(scanned.annotation_errors)), label="rows")
    finally:
        staged.release(inputs)
    reasons = {e["path"].rsplit(":", 1)[-1]: e["reason"] for e in scanned.annotation_errors}
    assert reasons == {
        "3": "ends at 4.5 s, beyond the file's duration (4 s)",
        "4": "channel 1 (0-based) but the file has 1 channel(s)",
        "10": f"audio file {audio}/f5.wav is refused: " + scanned.inputs[5].error,
        "11": "audio file 'nowhere.wav' matches no input file",
    }


def _task_rows(task) -> tuple:
    """A read task as its id and each segment's file, rows and annotation digest."""
    from pipelines.resume.fingerprint import annotation_digest

    segments = task.segments
    return task.task_id, tuple(
        (
            seg.file.index,
            seg.row_start,
            seg.row_stop,
            seg.split_rank,
            annotation_digest(seg.file.annotation),
        )
        for seg in segments
    )
