"""Record benchmark: our record job against a plain tf.data script, Dataset.save and the limit.

    python -m benchmarks record --minutes 60 [--scales 1,2,4] [--repeats 1]
    python -m benchmarks record --minutes 5                     # quick run

On the corpus of `benchmarks/corpus.py` (generated on first use into $AUDIORECORDS_BENCH_DIR,
default /tmp/audiorecords-bench), each system runs as its own command, one after the other in
this run (order rotated between repeats), and is timed end to end (wall time of the command,
imports included) while its whole process tree's memory is sampled (`_measure`):

- ours:     ``python -m pipelines.record --win_len 16000 --features log_mel`` (defaults: the
            DirectRunner in one process, or one worker process per core with 4+ cores and
            1 GiB+ of input (`runners.direct.auto_running_mode`), AUTO compression, TFT
            normalisation: writes log_mel and log_mel_norm);
- tfdata:   `baselines.py tfdata` (a): tf.data + TFRecordWriter, writes log_mel only;
- seed:     `baselines.py seed`: the seed-style script (serialize_tensor per key, uncompressed);
- save:     `baselines.py save` (b): ``tf.data.Dataset.save(compression="GZIP")``;
- limit:    `baselines.py limit` (c): the log-mel computation alone on all cores (its own timer:
            the windows are decoded into memory first, untimed);
- floor:    ``python -c "import tensorflow_transform.beam"``: what our job pays before any work;
- tft_min:  `baselines.py tft_min`: the smallest TFT job (2 rows, the same analysis,
            WriteTransformFn, ended as our job ends): what any job that runs a TFT analysis
            pays at least;
- ours_tiny: our job on 2 one-second files (2 windows): our own fixed cost.

Prints a table (audio-seconds per wall second, windows/s, MB written, bytes per window, peak PSS
of the process tree, peak RSS of the launcher process) and our ratios against each peer (best
of the repeats, and per repeat); at several `--scales` (1x, 2x, 4x the corpus) also the scaling
of our wall time and memory. `--pcm16`: the corpus without the 24-bit file (int16 signals).
`--json PATH` saves the rows.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from benchmarks import options
from benchmarks._measure import (
    Measured,
    append_rows,
    host_line,
    last_json,
    mib,
    module_cmd,
    run_measured,
)
from benchmarks.corpus import corpus, corpus_stats
from benchmarks.table import ratio, spread, table

PY = sys.executable
RECORD_ARGS = ["--win_len", "16000", "--features", "log_mel"]
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}
# Variants of our job: extra flags (``--systems ours,ours_none,...`` to compare them).
OURS = {"ours": [], "ours_none": ["--compression", "NONE"], "ours_gzip": ["--compression", "GZIP"]}
PEERS = ("tfdata", "seed", "save")  # what a user would write instead; "best peer": the fastest
FLOOR = [PY, "-c", "import tensorflow_transform.beam"]
FIXED = ("floor", "tft_min", "ours_tiny")  # fixed-cost runs: their time only


def run_ours(input_dir: Path, out: Path, extra: list[str]) -> tuple[Measured, dict]:
    cmd = [PY, "-m", "pipelines.record", "--input_pattern", f"{input_dir}/*.wav"]
    cmd += ["--output_dir", str(out), "--overwrite", *RECORD_ARGS, *extra]
    m = run_measured(cmd, env=QUIET)
    manifest = json.loads((out / "manifest.json").read_text())
    size = sum(s["num_bytes"] for sp in manifest["splits"].values() for s in sp["shards"])
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return m, {"windows": manifest["num_examples"], "bytes": size, "seconds": None,
               "bytes_dir": total}  # fmt: skip


def tiny_corpus(work: Path) -> Path:
    """Two one-second 16 kHz PCM_16 files of two classes (made once)."""
    import numpy as np
    import soundfile as sf

    tiny = work / "tiny-corpus"
    tiny.mkdir(parents=True, exist_ok=True)
    for i, label in enumerate(("a", "b")):
        path = tiny / f"tiny_{label}.wav"
        if not path.exists():
            noise = np.random.default_rng(i).standard_normal(16000) * 3000
            sf.write(str(path), noise.astype(np.int16), 16000, subtype="PCM_16")
    return tiny


def run_baseline(mode: str, input_dir: Path, out: Path | None) -> tuple[Measured, dict]:
    cmd = module_cmd(PY, "baselines", mode, "--input_dir", str(input_dir))
    if out is not None:
        if out.exists():
            shutil.rmtree(out)
        cmd += ["--output_dir", str(out)]
    m = run_measured(cmd, env=QUIET)
    return m, last_json(m.stdout)


def measure(system: str, scale: int, input_dir: Path, work: Path, extra: list[str]) -> dict:
    """One measured run of `system` on `input_dir`; a result row."""
    out = work / f"{system}-{scale}x"
    load = Path("/proc/loadavg").read_text().split()[0]  # the machine is shared: note its load
    if system in OURS:
        m, res = run_ours(input_dir, out, extra + OURS[system])
    elif system == "ours_tiny":
        m, res = run_ours(tiny_corpus(work), out, extra)
    elif system == "floor":
        m, res = run_measured(FLOOR, env=QUIET), {"windows": 0, "bytes": 0, "seconds": None}
    elif system == "tft_min":
        m = run_measured(module_cmd(PY, "baselines", "tft_min"), env=QUIET)
        res = last_json(m.stdout)
    else:
        m, res = run_baseline(system, input_dir, None if system == "limit" else out)
    if out.exists():
        shutil.rmtree(out)
    seconds = res["seconds"] if system == "limit" else m.wall
    return {
        "system": system,
        "scale": scale,
        "wall": m.wall,
        "seconds": seconds,
        "windows": res["windows"],
        "bytes": res["bytes"],
        "peak_pss_tree": m.peak_pss_tree,
        "peak_rss_tree": m.peak_rss_tree,
        "peak_rss_root": m.peak_rss_root,
        "processes": m.peak_processes,
        "load": float(load),
        "extra": {k: v for k, v in res.items() if k not in ("windows", "bytes", "seconds")},
    }


def best(rows: list[dict], system: str, scale: int) -> dict | None:
    """The fastest repeat of `system` at `scale` (memory: the max over repeats)."""
    mine = [r for r in rows if r["system"] == system and r["scale"] == scale]
    if not mine:
        return None
    row = dict(min(mine, key=lambda r: r["seconds"]))
    for key in ("peak_pss_tree", "peak_rss_tree", "peak_rss_root"):
        row[key] = max(r[key] for r in mine)
    return row


def paired_times(rows: list[dict], a: str, b: str, scale: int) -> list[tuple[float, float]]:
    """(a's, b's) wall time of each repeat in which both ran at `scale`, in repeat order."""
    times = {(r["system"], r["repeat"]): r["seconds"] for r in rows if r["scale"] == scale}
    repeats = sorted({rep for system, rep in times if system == a})
    return [(times[a, rep], times[b, rep]) for rep in repeats if (b, rep) in times]


def per_repeat(rows: list[dict], ours: str, other: str, scale: int) -> list[float]:
    """other / ours wall-time ratio of each repeat in which both ran at `scale`."""
    return [theirs / mine for mine, theirs in paired_times(rows, ours, other, scale)]


def per_repeat_diff(rows: list[dict], a: str, b: str, scale: int) -> list[float]:
    """a - b wall-time difference (s) of each repeat in which both ran at `scale`."""
    return [x - y for x, y in paired_times(rows, a, b, scale)]


def report(rows: list[dict], audio: dict[int, float]) -> str:
    """The results table and ratios as text."""
    header = ("system", "scale", "seconds", "audio-s/s", "windows/s", "MB out", "KB/window")
    header += ("PSS tree MiB", "RSS launcher MiB", "procs")
    cells = []
    systems = (*OURS, *PEERS, "limit", *FIXED)
    for scale in sorted(audio):
        for system in systems:
            r = best(rows, system, scale)
            if r is None:
                continue
            per_window = r["bytes"] / r["windows"] / 1e3 if r["windows"] and r["bytes"] else 0
            if system in FIXED:  # fixed cost: its time only
                cells.append((system, f"{scale}x", f"{r['seconds']:.2f}", *[None] * 7))
                continue
            cells.append(
                (system, f"{scale}x", f"{r['seconds']:.2f}", f"{audio[scale] / r['seconds']:.0f}",
                 f"{r['windows'] / r['seconds']:.0f}", f"{r['bytes'] / 1e6:.0f}",
                 f"{per_window:.1f}", mib(r["peak_pss_tree"]), mib(r["peak_rss_root"]),
                 r["processes"])
            )  # fmt: skip
    lines = [table(header, cells), ""]
    baselines = [r for r in (best(rows, s, 1) for s in PEERS) if r]
    limit, floor = best(rows, "limit", 1), best(rows, "floor", 1)
    for variant in OURS:
        ours = best(rows, variant, 1)
        if ours is None:
            continue
        for other in [*baselines, limit]:
            if other:
                shown = ratio(other["seconds"], ours["seconds"])
                lines.append(f"{variant} / {other['system']}: {shown} (>1: {variant} faster)")
                pairs = per_repeat(rows, variant, other["system"], 1)
                if len(pairs) > 1:  # best-of ratios follow the luckiest run; show every pair
                    lines.append(f"  per repeat: {spread(pairs, unit='x')}")
        if baselines:
            f = min(baselines, key=lambda r: r["seconds"])
            shown = ratio(f["seconds"], ours["seconds"])
            lines.append(f"{variant} / best peer [{f['system']}]: {shown}")
            for other in baselines:
                if other["bytes"] and ours["bytes"]:
                    shown = ratio(
                        ours["bytes"] / ours["windows"], other["bytes"] / other["windows"]
                    )
                    lines.append(f"{variant} bytes/window / {other['system']}'s: {shown}")
        if floor:
            lines.append(
                f"{variant} - floor (import tensorflow_transform.beam, {floor['seconds']:.2f} s): "
                f"{ours['seconds'] - floor['seconds']:.2f} s"
            )
    # the fixed cost, per repeat (run back to back: the machine's drift cancels)
    for a, b in (("tft_min", "floor"), ("ours_tiny", "floor"), ("ours", "floor"),
                 ("ours", "tft_min")):  # fmt: skip
        diffs = per_repeat_diff(rows, a, b, 1)
        if diffs:
            lines.append(f"{a} - {b}: {spread(diffs, unit=' s')}")
    for scale in sorted(audio)[1:]:
        r, a = best(rows, "ours", scale), best(rows, "tfdata", scale)
        if r and a:
            lines.append(f"ours / tfdata at {scale}x: {ratio(a['seconds'], r['seconds'])}")
    ours = best(rows, "ours", min(audio))
    for scale in sorted(audio)[1:]:
        r = best(rows, "ours", scale)
        if ours and r:
            lines.append(
                f"scaling {scale}x: wall {r['seconds'] / ours['seconds']:.2f}x "
                f"(efficiency {scale * ours['seconds'] / r['seconds']:.2f}), peak PSS "
                f"{r['peak_pss_tree'] / ours['peak_pss_tree']:.2f}x, launcher RSS "
                f"{r['peak_rss_root'] / ours['peak_rss_root']:.2f}x of {min(audio)}x"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = options.parser(__doc__)
    options.common(parser, minutes=60.0, pcm16=True, repeats=1)
    parser.add_argument("--scales", default="1", help="comma list of corpus multiples")
    parser.add_argument(
        "--systems",
        default="ours,tfdata,seed,save,limit,floor",
        help="systems run at 1x (others: ours)",
    )
    parser.add_argument(
        "--every_scale", default="", help="systems also run at every other scale (e.g. tfdata)"
    )
    parser.add_argument("--ours_args", default="", help="extra flags for pipelines.record")
    args = parser.parse_args(argv)
    scales = [int(s) for s in args.scales.split(",")]
    work = Path(args.dir) / "work"
    work.mkdir(parents=True, exist_ok=True)
    dirs = {s: corpus(args.minutes * s, root=args.dir, pcm16=args.pcm16) for s in scales}
    stats = {s: corpus_stats(d) for s, d in dirs.items()}
    for s, st in stats.items():
        print(f"corpus {s}x: {dirs[s]} {st}", flush=True)
    print(host_line(), flush=True)  # before and after: wall-time ratios depend on free cores
    plan = []
    for s in scales:
        others = args.every_scale.split(",")
        names = args.systems.split(",") if s == scales[0] else ["ours", *others]
        plan += [(name, s) for name in names if name]
    rows = []
    for rep in range(args.repeats):
        order = plan[rep % len(plan) :] + plan[: rep % len(plan)]
        for system, scale in order:
            row = measure(system, scale, dirs[scale], work, args.ours_args.split())
            row["repeat"] = rep
            rows.append(row)
            print(json.dumps(row), flush=True)
    append_rows(args.json, rows)
    print(f"after the runs: {host_line()}")
    print(report(rows, {s: st["audio_seconds"] for s, st in stats.items()}))


if __name__ == "__main__":
    main()
