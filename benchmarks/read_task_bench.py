"""The read stage's DoFn alone: `ReadTaskFn.process` on a corpus's one planned task, in process.

    python benchmarks/read_task_bench.py --input_pattern 'clips/*/*.wav' --runs 3
    PYTHONPATH=<tree> python benchmarks/read_task_bench.py ...   # another tree's ReadTaskFn

No Beam runner: the plan's read tasks merged into one (`pipelines.plan.one_task`, as the
in-memory job runs them), `compute_threads` 2 as the in-memory job sets it on 2 cores, the DoFn
set up, its outputs drained and counted, torn down. Prints, per run, microseconds a file of the
DoFn's thread CPU (`time.thread_time`), the process's CPU (`time.process_time`) and wall time,
and the number of outputs by tag; the host's free cores and load before the runs (a shared host's
figures are only comparable within one session, alternating trees).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
import tempfile
import time

import apache_beam as beam

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _measure import host_line  # noqa: E402

from pipelines.config import RecordConfig  # noqa: E402
from pipelines.plan import one_task, plan_record  # noqa: E402
from transforms.stages.read_windows import ReadTaskFn  # noqa: E402


def run_once(*, input_pattern: str, compute_threads: int, label_source: str) -> dict:
    """One drained `ReadTaskFn.process` over the corpus's one task; its figures."""
    with tempfile.TemporaryDirectory(prefix="read-task-bench-") as out:
        config = RecordConfig(
            input_pattern=input_pattern,
            output_dir=out,
            label_source=label_source,
            win_len=16000,
            features="log_mel",
            overwrite=True,
        )
        plan = one_task(plan_record(config))
        read = dataclasses.replace(plan.read, compute_threads=compute_threads)
        fn = ReadTaskFn(
            read,
            plan.sharding,
            classes=plan.classes,
            output_dir=out,
            analyzed_splits=plan.analyzed_splits,
        )
        fn.setup()
        tags: collections.Counter = collections.Counter()
        try:
            (task,) = plan.tasks
            wall, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
            for output in fn.process(task):
                tag = output.tag if isinstance(output, beam.pvalue.TaggedOutput) else "rows"
                tags[tag] += 1
            fn.finish_bundle()
            thread = time.thread_time() - thread
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        finally:
            fn.teardown()
        files = len(task.segments)
    us = 1e6 / files
    return {"files": files, "thread": thread * us, "cpu": cpu * us, "wall": wall * us, **tags}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input_pattern", required=True)
    parser.add_argument("--label_source", default="dirname")
    parser.add_argument("--compute_threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--label", default=os.environ.get("PYTHONPATH", "."), help="row name")
    args = parser.parse_args()
    print(host_line(), flush=True)
    for _ in range(args.runs):
        r = run_once(
            input_pattern=args.input_pattern,
            compute_threads=args.compute_threads,
            label_source=args.label_source,
        )
        outputs = ", ".join(f"{k} {v}" for k, v in sorted(r.items()) if isinstance(v, int))
        print(
            f"{args.label}: us a file: thread {r['thread']:.1f}, process {r['cpu']:.1f}, "
            f"wall {r['wall']:.1f} ({outputs})",
            flush=True,
        )


if __name__ == "__main__":
    main()
