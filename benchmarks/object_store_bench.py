"""What writing the dataset to gs:// costs: local -> local against local -> gs:// (and gs -> gs).

    python benchmarks/object_store_bench.py --minutes 30 --pcm16 [--repeats 2] [--gs_inputs]

The same record command (``--win_len 16000 --features log_mel``) on the corpus of
`benchmarks/corpus.py`, its output once on the local disk and once in a bucket of a GCS server
on 127.0.0.1 (fake-gcs-server, objects in memory, started as the tests start it:
`tests.support.gcs_server`, which also builds it with ``go install`` on first use), alternating,
each a whole process timed end to end. With ``--gs_inputs`` also gs:// -> gs:// (the corpus
uploaded to the server first, untimed). Each target also runs on 2 one-second files: the job's
fixed cost there (start-up; both GCS clients have the server's test credentials, as a user's
would have theirs: without any, Beam's credential lookup alone retries for 15-30 s), so the
table shows wall time, fixed cost, and the ratio of the rest: what every extra minute of audio
costs when it goes to an object store.

What this cannot show: a real store's latency (30-100 ms a request, here <1 ms) and bandwidth,
nor IAM; the emulator keeps objects in memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _measure import host_line, run_measured  # noqa: E402
from corpus import DEFAULT_DIR, corpus, corpus_stats  # noqa: E402
from record_bench import tiny_corpus  # noqa: E402

from tests.support.gcs_server import running_gcs_server  # noqa: E402

PY = sys.executable
RECORD_ARGS = ["--win_len", "16000", "--features", "log_mel", "--overwrite"]
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}


def record(inputs: str, output: str, env: dict[str, str]) -> tuple[float, str]:
    """(wall seconds, summary line) of one record run."""
    cmd = [PY, "-m", "pipelines.record", "--input_pattern", inputs, "--output_dir", output]
    extra = ["--no_auth"] if "gs://" in inputs + output else []
    m = run_measured([*cmd, *RECORD_ARGS, *extra], env={**QUIET, **env})
    return m.wall, m.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--pcm16", action="store_true")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--gs_inputs", action="store_true")
    parser.add_argument("--root", default=DEFAULT_DIR)
    args = parser.parse_args(argv)

    source = corpus(args.minutes, root=args.root, pcm16=args.pcm16)
    stats = corpus_stats(source)
    tiny = tiny_corpus(Path(args.root))
    print(host_line())
    print(f"corpus {source}: {stats}")
    work = Path(tempfile.mkdtemp(prefix="object-store-bench-", dir=args.root))
    times: dict[str, list[float]] = {}
    (work / "tls").mkdir()
    with running_gcs_server(work / "tls") as gcs:
        gcs.create_bucket("bench")
        env = gcs.env()
        targets = {
            "local->local": (f"{source}/*.wav", str(work / "out"), f"{tiny}/*.wav"),
            "local->gs": (f"{source}/*.wav", "gs://bench/out", f"{tiny}/*.wav"),
        }
        if args.gs_inputs:
            for path in sorted(source.glob("*.wav")):  # the files the symlinks point at
                gcs.upload_bytes("bench", f"corpus/{path.name}", path.read_bytes())
            for path in sorted(tiny.glob("*.wav")):
                gcs.upload_bytes("bench", f"tiny/{path.name}", path.read_bytes())
            targets["gs->gs"] = (
                "gs://bench/corpus/*.wav",
                "gs://bench/out",
                "gs://bench/tiny/*.wav",
            )
        for repeat in range(args.repeats):
            for name, (inputs, output, tiny_inputs) in targets.items():
                wall, line = record(inputs, output, env)
                fixed, _ = record(tiny_inputs, f"{output}-tiny", env)
                times.setdefault(name, []).append(wall)
                times.setdefault(f"{name} fixed", []).append(fixed)
                print(f"repeat {repeat} {name}: {wall:.1f} s (fixed {fixed:.1f} s) | {line}")
    rows = {}
    print("\n| target | wall s (median) | fixed s | wall - fixed | ratio to local->local |")
    print("| --- | --- | --- | --- | --- |")
    for name in targets:
        wall = statistics.median(times[name])
        fixed = statistics.median(times[f"{name} fixed"])
        rows[name] = {"wall": wall, "fixed": fixed, "work": wall - fixed}
        base = rows["local->local"]
        ratios = f"{wall / base['wall']:.2f}x wall, {(wall - fixed) / base['work']:.2f}x work"
        print(f"| {name} | {wall:.1f} | {fixed:.1f} | {wall - fixed:.1f} | {ratios} |")
    print(json.dumps({"minutes": args.minutes, "rows": rows, "runs": times}))


if __name__ == "__main__":
    main()
