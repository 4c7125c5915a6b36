"""The launcher's per-file steps (issue 42): seconds and RSS of each step from the listing to
``p.run()``, at 10^3, 10^4 and 10^5 clips, against ``FileSystems.match`` of the pattern alone.

    python -m benchmarks launcher                  # the three corpora below
    python -m benchmarks launcher --sizes 1024     # one of them
    python -m benchmarks launcher --pattern 'DIR/*/*.wav'   # any corpus

Corpora (under ``$AUDIORECORDS_BENCH_DIR``, default /tmp/audiorecords-bench): 1,024 and 102,400
hard links to `clips_bench`'s one-second clips in their word folders (``i42-links-<N>/clips/``)
and `clips_bench`'s 10,240 clips (``clips-2727-10240/clips/``); make them with `clips_bench`
first, then ``cp -al`` the clips into the link directories.

Each size runs in a fresh process (its RSS is its own): Beam, TensorFlow and TFT are imported
first, then `pipelines.job.run_job`'s launcher steps are called one by one with the record
options of the issue (``--label_source dirname --win_len 16000 --features log_mel``, the
in-memory DirectRunner), with `time.perf_counter` and ``/proc/self/status`` (VmRSS, VmHWM) after
each; the output goes to ``--out`` and is removed. Printed per size: each step's seconds and RSS
growth, the totals with and without the header reads, and their ratio to the listing alone
(best of three ``FileSystems.match``, in the same process before any step). The steps run inside
`runners.internals.collector_paused` as `run_job` runs them (when it does); one full collection
after them is timed too (about what the collector leaves to the job).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import options
from benchmarks.table import table

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(os.environ.get("AUDIORECORDS_BENCH_DIR", "/tmp/audiorecords-bench"))
CORPORA = {
    1024: BENCH_DIR / "i42-links-1024/clips/*/*.wav",
    10240: BENCH_DIR / "clips-2727-10240/clips/*/*.wav",
    102400: BENCH_DIR / "i42-links-102400/clips/*/*.wav",
}
RECORD_ARGS = ["--label_source", "dirname", "--win_len", "16000", "--features", "log_mel"]
HEADERS = "scan_headers (header reads)"
LISTING = "match_stamped (listing)"
IN_JOB_LISTING = "list_inputs (listing, labels)"
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}


def _memory() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process, in bytes."""
    fields = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def child(pattern: str, out: str) -> dict:
    """One launcher, step by step, in this process: {"steps": [[name, s, rss, hwm]], ...}."""
    import gc

    import apache_beam as beam
    import tensorflow  # noqa: F401 - imported before the steps, as the command does early
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    import runners
    import transforms.stages.publish  # noqa: F401 - TFT
    from pipelines import job, plan
    from pipelines.config import RecordConfig
    from pipelines.record import RecordOptions
    from pipelines.resume import fingerprint as fp
    from pipelines.resume.output_dir import start_output_dir
    from runners import internals
    from runners.internals import JobOptions
    from transforms.audio import labels

    collecting = {"s": 0.0, "since": 0.0}

    def collected(phase: str, _: dict) -> None:  # the cyclic collector's time, by step
        if phase == "start":
            collecting["since"] = time.perf_counter()
        else:
            collecting["s"] += time.perf_counter() - collecting["since"]

    gc.collect()
    gc.callbacks.append(collected)
    listing = []
    for _ in range(3):
        t = time.perf_counter()
        FileSystems.match([pattern])
        listing.append(time.perf_counter() - t)
    steps: list[list] = []
    clock = [time.perf_counter()]

    def step(name: str) -> None:
        now = time.perf_counter()
        steps.append([name, now - clock[0], *_memory(), collecting["s"]])
        collecting["s"] = 0.0
        clock[0] = time.perf_counter()

    step("start")
    paused = getattr(internals, "collector_paused", None)  # as run_job plans, if it does
    with paused() if paused is not None else contextlib.nullcontext():
        argv = ["--input_pattern", pattern, "--output_dir", out, *RECORD_ARGS, "--overwrite"]
        config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(RecordOptions))
        options = JobOptions(argv)
        FileSystems.set_options(options)
        step("options + RecordConfig")
        fixed = labels.parse_classes(config.classes, read_text=plan.read_classes_file)
        stamps = tuple(plan.match_stamped(config.input_pattern))
        step(LISTING)
        sharding = plan.Sharding(
            shard_by=config.shard_by,
            splits=config.split_weights,
            split_base=plan.pattern_base(config.input_pattern),
            elements_per_shard=config.elements_per_shard,
            max_elements=config.max_elements,
        )
        labelled = plan.label_inputs(
            stamps, config, csv_labels=None, fixed_classes=fixed, sharding=sharding
        )
        classes = labels.run_classes((f.label for f in labelled if f.error is None), fixed)
        step("label_inputs + run_classes")
        inputs = plan.scan_headers(labelled)
        step(HEADERS)
        dtype = plan.check_inputs(config, inputs)
        sharding = dataclasses.replace(
            sharding, classes=tuple(sorted({f.label for f in inputs if f.label}))
        )
        output_dir = config.output_dir.rstrip("/")
        plan.check_output_dir(config, output_dir, plan.output_dir_state(output_dir))
        scanned = plan.ScannedInputs(
            output_dir=output_dir,
            inputs=inputs,
            classes=classes,
            sharding=sharding,
            signal_dtype=dtype,
            stamps=stamps,
        )
        step("check_inputs (dtype) + output dir state")
        planned = plan.size_tasks(config, scanned, cpu_count=os.cpu_count() or 1)
        step("size_tasks")
        runners.configure(options, input_bytes=planned.input_bytes, argv=argv)
        planned = plan.one_task(planned)
        step("runners.configure + one_task")
        stamped = planned
        reused = start_output_dir(planned, resuming=False)
        step("start_output_dir (fingerprint, dir, file)")
        planned = dataclasses.replace(planned, input_stamps=())
        p = beam.Pipeline(options=options)
        staged = job.stage_plan(planned, reused.tasks)
        step("stage_plan (tasks + errors written)")
        job.build_pipeline(p, planned, staged=staged)
        step("build_pipeline")
    staged.release()
    t = time.perf_counter()  # what the collector left for the job: a full collection, about
    gc.collect()
    deferred = time.perf_counter() - t
    t = time.perf_counter()  # again, outside the steps: start_output_dir's share
    digest = getattr(fp, "plan_digest", None) or (lambda p: fp.derived(p))
    fp.fingerprint(stamped.params, stamped.input_stamps, derived=digest(stamped))
    fingerprint = time.perf_counter() - t
    return {
        "files": len(stamps),
        "rss0": steps[0][2],
        "steps": steps[1:],
        "match": min(listing),
        "fingerprint": fingerprint,
        "deferred": deferred,
    }


def child_in_job(pattern: str, out: str, *, match_only: bool = False) -> dict:
    """The launcher of a run planned in the job (`pipelines.launch_in_job.run_planned_in_job`),
    step by step, in this process, up to ``p.run()``: {"steps": [[name, s, rss, hwm, gc s]], ...}
    (`match_only`: only the three ``FileSystems.match``, {"match": [s, s, s]})."""
    import gc

    import apache_beam as beam
    import tensorflow  # noqa: F401 - imported before the steps, as the command does early
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    import transforms.stages.publish  # noqa: F401 - TFT
    from pipelines import job, plan
    from pipelines.config import RecordConfig
    from pipelines.plan.in_job import PlanInJob
    from pipelines.record import RecordOptions
    from pipelines.resume.output_dir import job_fingerprint, prepare_output_dir
    from runners import internals
    from runners.internals import JobOptions
    from transforms.stages import staged as staged_lists

    gc.collect()
    if "://" in pattern:  # Beam's GCS client is made on first use (credentials): not timed
        FileSystems.set_options(PipelineOptions(["--no_auth"]))
        FileSystems.match([pattern], limits=[1])
    listing = []
    for _ in range(3):
        t = time.perf_counter()
        FileSystems.match([pattern])
        listing.append(time.perf_counter() - t)
    if match_only:
        return {"match": listing}
    steps: list[list] = []
    clock = [time.perf_counter()]

    def step(name: str) -> None:
        now = time.perf_counter()
        steps.append([name, now - clock[0], *_memory(), 0.0])
        clock[0] = time.perf_counter()

    step("start")
    argv = ["--input_pattern", pattern, "--output_dir", out, *RECORD_ARGS, "--overwrite"]
    argv += ["--no_auth"] if "://" in pattern + out else []  # an emulator's store
    config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(RecordOptions))
    options = JobOptions(argv)
    FileSystems.set_options(options)
    step("options + RecordConfig")
    with internals.collector_paused():
        listed = plan.list_inputs(config)
        step(IN_JOB_LISTING)
        state = plan.output_dir_state(listed.output_dir)
        step("output_dir_state")
    with internals.collector_paused():
        planned, args = job.launcher_plan(config, listed, state, options=options, argv=argv)
        step("launcher_plan (one header, runner)")
        cut = {"cpu_count": args.cpu_count, "single_task": args.single_task}
        fingerprint = job_fingerprint(planned.params, listed, cut=cut)
        step("job_fingerprint")
        inputs, data = staged_lists.pickled(out, "inputs", listed.inputs)
        planning = PlanInJob(inputs, args)
        step("inputs pickled")
        prepare_output_dir(planned)
        step("prepare_output_dir")
        with job.written_while_built(out, fingerprint, inputs, data):  # as the job does
            p = beam.Pipeline(options=options)
            job.build_pipeline(p, planned, planning=planning)
            step("build_pipeline (files written meanwhile)")
        step("writes joined")
    staged_lists.release(inputs)
    return {
        "files": len(listed.inputs),
        "rss0": steps[0][2],
        "steps": steps[1:],
        "match": sorted(listing)[1],
        "in_job": True,
    }


def report(result: dict) -> None:
    """Prints one size's steps, totals and ratios."""
    match, mib = result["match"], 2**20
    print(f"\n{result['files']:,} files (FileSystems.match alone, best of 3: {match:.3f} s)")
    rss0, cells = result["rss0"], []
    for name, seconds, rss, hwm, gc_s in result["steps"]:
        grown, rss0 = (rss - rss0) / mib, rss
        cells.append(
            (name, f"{seconds:.3f}", f"{gc_s:.3f}", f"{rss / mib:.0f}", f"{grown:+.0f}",
             f"{hwm / mib:.0f}")
        )  # fmt: skip
    print(table(("step", "s", "of it gc", "RSS MiB", "+MiB", "HWM MiB"), cells))
    print(f"  (fp.fingerprint alone, again after the steps: {result['fingerprint']:.3f} s)")
    steps = result["steps"][1:]  # after the options
    total = sum(step[1] for step in steps)
    other = sum(step[1] for step in steps if step[0] != HEADERS)
    fixed = (HEADERS, LISTING, "runners.configure + one_task", "build_pipeline")
    per_file = sum(step[1] for step in steps if step[0] not in fixed)
    listing = sum(step[1] for step in steps if step[0] == LISTING)
    collected = sum(step[4] for step in steps)
    last = result["steps"][-1]
    print(f"  after the options, total {total:.3f} s: {total / match:.1f}x the listing")
    print(f"  without the header reads: {other:.3f} s: {other / match:.1f}x the listing")
    print(
        f"  the other per-file steps (the listing's own work over FileSystems.match "
        f"{listing - match:+.3f} s, labels, dtype, size_tasks, fingerprint, output dir, "
        f"stage_plan): {listing - match + per_file:.3f} s: "
        f"{(listing - match + per_file) / match:.2f}x the listing"
    )
    print(
        f"  the cyclic garbage collector in all the steps: {collected:.3f} s; a full collection "
        f"after them (gc.collect()): {result['deferred']:.3f} s"
    )
    print(
        f"  RSS at p.run() {last[2] / mib:.0f} MiB ({(last[2] - result['rss0']) / mib:+.0f} over "
        f"the imports), high-water {last[3] / mib:.0f} MiB"
    )


def report_in_job(results: list[dict]) -> None:
    """Prints a size's in-job launcher steps (each run's), and the medians against the listing."""
    mib = 2**20
    print(f"\n{results[0]['files']:,} files, planned in the job, {len(results)} run(s)")
    header = ("step", *(f"s (run {i + 1})" for i in range(len(results))), "RSS MiB")
    cells = [
        (name, *(f"{r['steps'][n][1]:.3f}" for r in results),
         f"{results[-1]['steps'][n][2] / mib:.0f}")
        for n, (name, *_rest) in enumerate(results[0]["steps"])
    ]  # fmt: skip
    print(table(header, cells))
    totals = sorted(sum(s[1] for s in r["steps"][1:]) for r in results)
    fixed = sorted(
        sum(s[1] for s in r["steps"][1:] if not s[0].startswith("build_pipeline")) for r in results
    )
    matches = sorted(r["match"] for r in results)
    total, per_file, match = (v[len(v) // 2] for v in (totals, fixed, matches))
    print(
        f"  median launcher (after the options) {total:.3f} s, without build_pipeline "
        f"{per_file:.3f} s; FileSystems.match (median of 3 a run, median of runs) {match:.3f} s"
    )
    print(f"  ratio {total / match:.2f}x, without build_pipeline {per_file / match:.2f}x")


def main(argv: list[str] | None = None) -> None:
    parser = options.parser(__doc__)
    parser.add_argument("--sizes", default=",".join(str(n) for n in CORPORA))
    parser.add_argument("--pattern", help="a corpus of your own instead of --sizes")
    parser.add_argument("--out", default=str(BENCH_DIR / "work/launcher_profile"))
    parser.add_argument(
        "--in-job", action="store_true", help="the launcher of a run planned in the job"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs a size (fresh processes)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--match-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.match_only:
            made = child_in_job(args.pattern, args.out, match_only=True)
        else:
            made = (child_in_job if args.in_job else child)(args.pattern, args.out)
        print(json.dumps(made))
        return
    patterns = (
        [args.pattern] if args.pattern else [str(CORPORA[int(n)]) for n in args.sizes.split(",")]
    )
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print(f"load average {load} ({time.strftime('%H:%M:%S')})")
    env = {**os.environ, **QUIET, "PYTHONPATH": str(ROOT)}
    for pattern in patterns:
        cmd = [sys.executable, __file__, "--child", "--pattern", pattern, "--out", args.out]
        results = []
        for _ in range(args.repeat):
            done = subprocess.run(
                cmd + (["--in-job"] if args.in_job else []),
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
            if done.returncode:
                sys.exit(f"{pattern}: the launcher failed:\n{done.stderr[-3000:]}")
            shutil.rmtree(args.out, ignore_errors=True)
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        if args.in_job:
            report_in_job(results)
        else:
            for result in results:
                report(result)
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print(f"\nload average {load} ({time.strftime('%H:%M:%S')})")


if __name__ == "__main__":
    main()
