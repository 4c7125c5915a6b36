"""Many short clips (issue 27): our record job on N one-second files against the same audio in 10
long files, the seed-style script and Hugging Face `datasets`.

    python -m benchmarks clips [--clips 10240] [--repeats 2]
    python -m benchmarks clips --clips 2560 --repeats 1                  # quick run
    python -m benchmarks clips --systems ours,ours_long                  # ours only
    python -m benchmarks clips --hf_python /tmp/hf-venv/bin/python       # hf's venv
    python -m benchmarks clips --systems ours --plan_in job              # plan in the job

Workload (made once into $AUDIORECORDS_BENCH_DIR, default /tmp/audiorecords-bench,
``clips-<seed>-<N>/``): N one-second 16 kHz 16-bit mono clips ``clips/<class>/clipNNNNN.wav`` in
10 class folders (clip i: class i mod 10, speech-like audio of `corpus.voice` in coloured noise,
a function of the seed and i only), and the same audio joined into 10 long files
``long/<class>.wav`` (a class's clips in index order). Each system runs as its own command, one
after the other (order rotated between repeats), timed end to end while its whole process tree's
memory is sampled (`_measure`):

- ours:      ``python -m pipelines.record --input_pattern 'clips/*/*.wav' --label_source dirname
             --win_len 16000 --features log_mel --overwrite`` (otherwise defaults: AUTO
             compression, TFT normalisation: writes log_mel and log_mel_norm);
             ``--plan_in job`` / ``launcher`` runs the same options through `pipelines.job.run_job`
             with ``plan_in_job`` True / False (where the run plans; default: its own rule);
- ours_long: the same on ``long/*.wav`` with ``--label_source filename`` (the class is the file
             name: the last ``_``-separated word of ``<class>.wav``): the same windows;
- seed:      ``baselines.py seed --label_source dirname`` on the clips: the seed-style script;
- hf:        ``hf_baseline.py`` on the clips: ``load_dataset("audiofolder")`` -> batched
             ``map(num_proc=2)`` computing log-mel with librosa -> ``save_to_disk``, run offline
             with a fresh HF_HOME each run by ``--hf_python`` (default: this interpreter), an
             interpreter with datasets 3.x + librosa: benchmarks/requirements-hf.txt says why
             that is a virtualenv of its own and how to make it. Before the runs, untimed, that
             interpreter computes one log-mel (librosa's numba functions compile and cache once).

Prints a markdown table, a row per system (best of `--repeats`: the fastest run, memory the max
over runs): wall s, windows, windows/s, output MB, peak PSS of the process tree, peak RSS of the
tree and of the launched process, processes; then the ratios, per repeat with their median: ours
against the faster of seed and hf (target >= 2x) and ours / ours_long in windows per second
(target >= 0.7). `host: X of 2 cores free` before and after the runs. `--json PATH` appends the
raw rows to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks import options
from benchmarks._measure import (
    ROOT,
    Measured,
    append_rows,
    host_line,
    last_json,
    mib,
    module_cmd,
    run_measured,
)
from benchmarks.corpus import DEFAULT_DIR, RATE, coloured_noise, voice
from benchmarks.table import ratio, spread, table

PY = sys.executable
CLASSES = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
SEED = 2727
SYSTEMS = ("ours", "ours_long", "seed", "hf")
PEERS = ("seed", "hf")  # what a user would write instead: "best peer" is the faster
RECORD_ARGS = ["--win_len", "16000", "--features", "log_mel", "--overwrite"]
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}
HF_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
HF_ENV["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"


def make_clip(index: int, seed: int = SEED) -> np.ndarray:
    """int16 [RATE] samples of clip `index`: a speech-like voice in coloured noise."""
    rng = np.random.default_rng([seed, index])
    x = voice(rng, RATE) + coloured_noise(rng, RATE) * 10 ** (-rng.uniform(10, 30) / 20)
    x *= rng.uniform(0.05, 0.3) / (np.sqrt(np.mean(x**2)) + 1e-12)  # RMS -26..-10 dBFS
    return np.clip(np.rint(x * 32768), -32768, 32767).astype(np.int16)


def _write_clips(args: tuple[int, int, int, str]) -> list[np.ndarray]:
    """Writes clips lo..hi-1 under `clips`; returns their samples."""
    import soundfile as sf

    lo, hi, seed, clips = args
    out = []
    for i in range(lo, hi):
        samples = make_clip(i, seed)
        path = Path(clips) / CLASSES[i % len(CLASSES)] / f"clip{i:05d}.wav"
        sf.write(str(path), samples, RATE, subtype="PCM_16", format="WAV")
        out.append(samples)
    return out


def clips_corpus(n: int, *, root: str = DEFAULT_DIR, seed: int = SEED, workers: int = 0) -> Path:
    """``<root>/clips-<seed>-<n>``: ``clips/<class>/clipNNNNN.wav`` and ``long/<class>.wav``.

    Made once (in a temporary directory renamed into place), `workers` processes (0: one a core).
    """
    import soundfile as sf

    out = Path(root) / f"clips-{seed}-{n}"
    if out.exists():
        return out
    tmp = Path(f"{out}.tmp{os.getpid()}")
    for name in CLASSES:
        (tmp / "clips" / name).mkdir(parents=True)
    (tmp / "long").mkdir()
    chunks = [(lo, min(lo + 256, n), seed, str(tmp / "clips")) for lo in range(0, n, 256)]
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count()) as ex:
        samples = [s for chunk in ex.map(_write_clips, chunks) for s in chunk]
    for c, name in enumerate(CLASSES):
        joined = np.concatenate(samples[c :: len(CLASSES)] or [np.zeros(0, np.int16)])
        sf.write(str(tmp / "long" / f"{name}.wav"), joined, RATE, subtype="PCM_16", format="WAV")
    os.replace(tmp, out)
    return out


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# `pipelines.record`'s command with `run_job(plan_in_job=...)` forced ("job" or "launcher")
PLANNED_IN = """
import sys
from apache_beam.options.pipeline_options import PipelineOptions
from pipelines import job
from pipelines.config import RecordConfig
from pipelines.record import RecordOptions
argv = sys.argv[2:]
config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(RecordOptions))
job.run_job(config, beam_argv=argv, plan_in_job=sys.argv[1] == "job")
"""


def run_ours(
    pattern: str, label_source: str, out: Path, extra: list[str], *, plan_in: str = "default"
) -> tuple[Measured, dict]:
    """`pipelines.record` on `pattern`; `plan_in` "job" / "launcher" forces where it plans
    (`pipelines.job.run_job`'s ``plan_in_job``), "default" leaves it to `run_job`'s rule."""
    cmd = [PY, "-m", "pipelines.record"]
    if plan_in != "default":
        cmd = [PY, "-c", PLANNED_IN, plan_in]
    cmd += ["--input_pattern", pattern, "--output_dir", str(out)]
    cmd += ["--label_source", label_source, *RECORD_ARGS, *extra]
    m = run_measured(cmd, env=QUIET)
    manifest = json.loads((out / "manifest.json").read_text())
    return m, {"windows": manifest["num_examples"], "classes": len(manifest["classes"])}


def run_seed(clips: Path, out: Path) -> tuple[Measured, dict]:
    cmd = module_cmd(PY, "baselines", "seed", "--input_dir", str(clips))
    cmd += ["--output_dir", str(out), "--label_source", "dirname"]
    m = run_measured(cmd, env=QUIET)
    return m, last_json(m.stdout)


def check_hf(hf_python: str) -> None:
    """Fails early when `hf_python` lacks datasets or librosa; warms librosa's numba cache."""
    code = "import datasets, librosa, numpy as np\n"
    code += "librosa.feature.melspectrogram(y=np.zeros(16000, np.float32), sr=16000)"
    done = subprocess.run([hf_python, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(
            f"--hf_python {hf_python}: {done.stderr.strip().splitlines()[-1]}\n"
            "make an interpreter for `hf` as benchmarks/requirements-hf.txt says, or leave hf out "
            "of --systems"
        )


def run_hf(clips: Path, out: Path, hf_python: str, hf_home: Path) -> tuple[Measured, dict]:
    """hf_baseline.py with a fresh HF_HOME (no cached Arrow files from an earlier run)."""
    shutil.rmtree(hf_home, ignore_errors=True)
    env = {**QUIET, **HF_ENV, "HF_HOME": str(hf_home)}
    env["HF_DATASETS_CACHE"] = str(hf_home / "datasets")
    cmd = module_cmd(hf_python, "hf_baseline", "--data_dir", str(clips))
    cmd += ["--output_dir", str(out), "--num_proc", "2"]
    try:
        m = run_measured(cmd, env=env)
    finally:
        cache = _du(hf_home) if hf_home.exists() else 0
        shutil.rmtree(hf_home, ignore_errors=True)
    return m, {**last_json(m.stdout), "cache_bytes": cache}


def measure(system: str, corpus_dir: Path, work: Path, args: argparse.Namespace) -> dict:
    """One measured run of `system`; a result row."""
    out = work / system
    shutil.rmtree(out, ignore_errors=True)
    load = float(Path("/proc/loadavg").read_text().split()[0])  # the machine is shared
    clips, extra = corpus_dir / "clips", args.ours_args.split()
    if system == "ours":
        m, res = run_ours(f"{clips}/*/*.wav", "dirname", out, extra, plan_in=args.plan_in)
    elif system == "ours_long":
        m, res = run_ours(f"{corpus_dir}/long/*.wav", "filename", out, extra, plan_in=args.plan_in)
    elif system == "seed":
        m, res = run_seed(clips, out)
    else:
        m, res = run_hf(clips, out, args.hf_python, work / "hf-home")
    size = _du(out) if out.exists() else 0
    shutil.rmtree(out, ignore_errors=True)
    return {
        "system": system,
        "wall": m.wall,
        "windows": res["windows"],
        "bytes": size,
        "peak_pss_tree": m.peak_pss_tree,
        "peak_rss_tree": m.peak_rss_tree,
        "peak_rss_root": m.peak_rss_root,
        "processes": m.peak_processes,
        "load": load,
        "extra": {k: v for k, v in res.items() if k not in ("windows", "bytes")},
    }


def best(rows: list[dict], system: str) -> dict | None:
    """The fastest repeat of `system` (memory: the max over repeats)."""
    mine = [r for r in rows if r["system"] == system]
    if not mine:
        return None
    row = dict(min(mine, key=lambda r: r["wall"]))
    for key in ("peak_pss_tree", "peak_rss_tree", "peak_rss_root", "processes"):
        row[key] = max(r[key] for r in mine)
    return row


def rate(row: dict) -> float:
    """Windows per wall second."""
    return row["windows"] / row["wall"]


def per_repeat(rows: list[dict], a: str, b: str) -> list[float]:
    """a's windows/s over b's, for each repeat in which both ran (repeat order)."""
    by = {(r["system"], r["repeat"]): r for r in rows}
    reps = sorted({rep for system, rep in by if system == a})
    return [rate(by[a, rep]) / rate(by[b, rep]) for rep in reps if (b, rep) in by]


def best_table(rows: list[dict]) -> str:
    """The markdown table of the best run of each system."""
    header = ("system", "wall s", "windows", "windows/s", "MB out", "PSS tree MiB")
    header += ("RSS tree MiB", "RSS launcher MiB", "procs")
    cells = []
    for system in SYSTEMS:
        r = best(rows, system)
        if r is not None:
            cells.append(
                (system, f"{r['wall']:.1f}", r["windows"], f"{rate(r):.0f}",
                 f"{r['bytes'] / 1e6:.0f}", mib(r["peak_pss_tree"]), mib(r["peak_rss_tree"]),
                 mib(r["peak_rss_root"]), r["processes"])
            )  # fmt: skip
    return table(header, cells)


def ratio_line(rows: list[dict], a: str, b: str, what: str) -> list[str]:
    """`a` / `b` in windows per second: best of repeats, and per repeat with the median."""
    ra, rb = best(rows, a), best(rows, b)
    if ra is None or rb is None:
        return []
    lines = [f"{a} / {b} windows/s: {ratio(rate(ra), rate(rb))} ({what})"]
    pairs = per_repeat(rows, a, b)
    if len(pairs) > 1:  # best-of ratios follow the luckiest run: show every pair
        lines.append(f"  per repeat: {spread(pairs, unit='x')}")
    return lines


def report(rows: list[dict]) -> str:
    """The table and the ratios as text."""
    lines = [best_table(rows), ""]
    peers = [r for r in (best(rows, s) for s in PEERS) if r]
    if peers:
        faster = max(peers, key=rate)["system"]
        lines += ratio_line(rows, "ours", faster, "best peer; target >= 2x")
        for peer in PEERS:
            if peer != faster:
                lines += ratio_line(rows, "ours", peer, "the other peer")
    lines += ratio_line(rows, "ours", "ours_long", "clips vs long files; target >= 0.7")
    hf = best(rows, "hf")
    if hf:
        extra = hf["extra"]
        lines.append(f"hf: datasets {extra['datasets']}, librosa {extra['librosa']}")
    return "\n".join(lines)


def code_line() -> str:
    """The commit measured and the project's files changed in the work tree (uncommitted)."""
    git = ["git", "-C", ROOT]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        [*git, "status", "--short", "--", "pipelines", "transforms", "runners", "replay"],
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    changed = [line[3:] for line in dirty if line.strip()]
    return f"code: {head.stdout.strip()}" + (
        f" + uncommitted {', '.join(changed)}" if changed else ""
    )


def main(argv: list[str] | None = None) -> None:
    parser = options.parser(__doc__)
    options.common(parser, repeats=1)
    parser.add_argument("--clips", type=int, default=10240, help="one-second clips")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="comma list of " + ", ".join(SYSTEMS)
    )
    parser.add_argument("--hf_python", default=PY, help="interpreter that has datasets + librosa")
    parser.add_argument("--ours_args", default="", help="extra flags for pipelines.record")
    parser.add_argument(
        "--plan_in",
        choices=("default", "job", "launcher"),
        default="default",
        help="where ours and ours_long plan (run_job's plan_in_job); default: run_job's rule",
    )
    args = parser.parse_args(argv)
    plan = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(plan) - set(SYSTEMS))
    if unknown:
        parser.error(f"unknown systems {unknown}: choose from {', '.join(SYSTEMS)}")
    if "hf" in plan:
        check_hf(args.hf_python)
    corpus_dir = clips_corpus(args.clips, root=args.dir)
    work = Path(args.dir) / "work" / "clips"
    work.mkdir(parents=True, exist_ok=True)
    print(f"corpus: {corpus_dir} ({args.clips} clips of 1 s, {len(CLASSES)} classes)", flush=True)
    print(code_line(), f"(ours plans: {args.plan_in})", flush=True)
    print(host_line(), flush=True)  # before and after: wall-time ratios depend on free cores
    rows = []
    for rep in range(args.repeats):
        for system in plan[rep % len(plan) :] + plan[: rep % len(plan)]:
            row = {**measure(system, corpus_dir, work, args), "repeat": rep}
            rows.append(row)
            print(json.dumps(row), flush=True)
    append_rows(args.json, rows)
    print(f"after the runs: {host_line()}")
    print(report(rows))


if __name__ == "__main__":
    main()
