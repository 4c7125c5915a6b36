"""What writing the dataset to gs:// costs: local -> local against local -> gs:// (and gs -> gs).

    python -m benchmarks object_store --minutes 30 --pcm16 [--repeats 2] [--gs_inputs]

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

    python -m benchmarks object_store --launcher [--files 10000] [--latency_ms 40]

``--launcher`` times the launcher of a run planned in the job against ``FileSystems.match`` of
the same ``gs://`` pattern instead: `--files` one-second clips (the 10 word folders of
`clips_bench`'s corpus, ``$AUDIORECORDS_BENCH_DIR/clips-2727-10240/clips``) uploaded to the
emulator (untimed), then every request both clients send delayed by `--latency_ms` (the
emulator's fronts, `tests.support.tls_proxy.FaultPlan.latency_s`), and
`benchmarks/launcher_profile.py`'s in-job child run `--repeats` times (a fresh process each,
imports excluded, up to ``Pipeline.run``; a new ``gs://`` output directory each). Printed: each
step's seconds, the medians against the listing, and the requests each client was sent (the
launcher's: its total less its three ``FileSystems.match``, counted in a child that only
matches).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import options
from benchmarks._measure import ROOT, host_line, module_cmd, run_measured
from benchmarks.corpus import corpus, corpus_stats
from benchmarks.record_bench import tiny_corpus
from benchmarks.table import ratio, table
from tests.support.gcs_server import running_gcs_server

PY = sys.executable
RECORD_ARGS = ["--win_len", "16000", "--features", "log_mel", "--overwrite"]
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}


def record(inputs: str, output: str, env: dict[str, str]) -> tuple[float, str]:
    """(wall seconds, summary line) of one record run."""
    cmd = [PY, "-m", "pipelines.record", "--input_pattern", inputs, "--output_dir", output]
    extra = ["--no_auth"] if "gs://" in inputs + output else []
    m = run_measured([*cmd, *RECORD_ARGS, *extra], env={**QUIET, **env})
    return m.wall, m.stdout.strip().splitlines()[-1]


CLIPS = (
    Path(os.environ.get("AUDIORECORDS_BENCH_DIR", "/tmp/audiorecords-bench"))
    / "clips-2727-10240/clips"
)


def _child(gcs, pattern: str, out: str, *extra: str) -> tuple[dict, int, int]:
    """`launcher_profile.py`'s in-job child against the emulator: (its result, requests Beam's
    client sent, requests TensorFlow's sent)."""
    gcs.beam_faults.requests = gcs.tf_faults.requests = 0
    cmd = module_cmd(PY, "launcher_profile", "--child", "--in-job", "--pattern", pattern)
    env = {**os.environ, **gcs.env(), **QUIET, "PYTHONPATH": ROOT}
    done = subprocess.run(
        [*cmd, "--out", out, *extra], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode:
        sys.exit(f"the launcher failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result, gcs.beam_faults.requests, gcs.tf_faults.requests


def launcher(files: int, latency_ms: float, repeats: int) -> None:
    """The in-job launcher on `files` clips in ``gs://`` against ``FileSystems.match``."""
    from benchmarks.launcher_profile import report_in_job

    folders = sorted(p for p in CLIPS.glob("*") if p.is_dir())
    per_folder = -(-files // max(len(folders), 1))
    paths = sorted(p for f in folders for p in sorted(f.glob("*.wav"))[:per_folder])[:files]
    if len(paths) < files:
        made = "`python -m benchmarks clips` makes them"
        sys.exit(f"{CLIPS}: {len(paths)} clips, {files} asked; {made}")
    print(host_line())
    work = Path(tempfile.mkdtemp(prefix="object-store-launcher-"))
    pattern = "gs://clips/speech/*/*.wav"
    with running_gcs_server(work) as gcs:
        gcs.create_bucket("clips")
        gcs.create_bucket("out")
        t = time.perf_counter()
        for path in paths:
            name = f"speech/{path.parent.name}/{path.name}"
            gcs.upload_bytes("clips", name, path.read_bytes())
        folders = len({p.parent for p in paths})
        took = time.perf_counter() - t
        print(f"{files} clips in {folders} folders uploaded in {took:.0f} s")
        print(f"{latency_ms:g} ms added to every request of either client from now on")
        gcs.beam_faults.latency_s = gcs.tf_faults.latency_s = latency_ms / 1000
        matched, match_beam, match_tf = _child(gcs, pattern, "gs://out/unused", "--match-only")
        per_match = match_beam / len(matched["match"])  # a warm-up match (one result) and 3
        results, counts = [], []
        for n in range(repeats):
            result, beam_requests, tf_requests = _child(gcs, pattern, f"gs://out/launcher-{n}")
            results.append(result)
            counts.append((beam_requests, tf_requests))
    report_in_job(results)
    print(
        f"  a child that only matches (a warm-up match of one object, then three whole ones) "
        f"sent {match_beam} requests by Beam's client ({per_match:.1f} a match, the warm-up's "
        f"shared out), {match_tf} by TensorFlow's"
    )
    for n, (beam_requests, tf_requests) in enumerate(counts):
        launcher_beam = beam_requests - match_beam
        print(
            f"  run {n}: the launcher sent {launcher_beam} requests by Beam's client (its listing "
            f"included), {tf_requests} by TensorFlow's (the output directory)"
        )


def main(argv: list[str] | None = None) -> None:
    parser = options.parser(__doc__)
    options.common(parser, minutes=30.0, pcm16=True, repeats=2, json=False)
    parser.add_argument("--gs_inputs", action="store_true")
    parser.add_argument("--launcher", action="store_true", help="time the launcher (below)")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--latency_ms", type=float, default=40)
    args = parser.parse_args(argv)
    if args.launcher:
        launcher(args.files, args.latency_ms, args.repeats)
        return

    source = corpus(args.minutes, root=args.dir, pcm16=args.pcm16)
    stats = corpus_stats(source)
    tiny = tiny_corpus(Path(args.dir))
    print(host_line())
    print(f"corpus {source}: {stats}")
    work = Path(tempfile.mkdtemp(prefix="object-store-bench-", dir=args.dir))
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
    rows, cells = {}, []
    for name in targets:
        wall = statistics.median(times[name])
        fixed = statistics.median(times[f"{name} fixed"])
        rows[name] = {"wall": wall, "fixed": fixed, "work": wall - fixed}
        base = rows["local->local"]
        ratios = f"{ratio(wall, base['wall'])} wall, {ratio(wall - fixed, base['work'])} work"
        cells.append((name, f"{wall:.1f}", f"{fixed:.1f}", f"{wall - fixed:.1f}", ratios))
    header = ("target", "wall s (median)", "fixed s", "wall - fixed", "ratio to local->local")
    print("\n" + table(header, cells))
    print(json.dumps({"minutes": args.minutes, "rows": rows, "runs": times}))


if __name__ == "__main__":
    main()
