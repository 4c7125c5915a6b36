"""What ``--append`` costs: growing a finished 8-h dataset by 1% and 10% more audio.

    python -m benchmarks append [--minutes 480] [--fractions 0.01,0.1] [--repeats 3]
        [--work /tmp/audiorecords-bench/append] [--no_strace]

Issue 41's point: appending 1% and 10% more audio to the dataset of the 8-h corpus takes at most
1.2x the wall time of recording only those new files as a dataset of their own, and reads none
of the old shards' bytes. Every step is a whole ``python -m pipelines.record`` process timed end
to end (`_measure`), with record_bench's options (``--win_len 16000 --features log_mel``, the
rest default); an append gives only ``--input_pattern``, ``--output_dir`` and ``--append`` (the
dataset's own options are taken from it):

- the corpus: `benchmarks/corpus.py`'s 16 kHz 16-bit corpus of ``--minutes`` (cached under
  ``--dir``), recorded once into ``<work>/base`` (reused while its manifest names the same files;
  ``--rerecord`` records it again);
- the new audio: files of the same generator with another seed (``--seed``: other content, same
  format), in a folder of their own per fraction (``<work>/corpus-<seed>-...``: the first files
  adding up to the fraction of the corpus's audio seconds);
- per repeat and fraction: (a) append: ``cp -a`` of the base dataset (untimed), then
  ``--append`` of the new folder into the copy (timed; with ``--whole_pattern`` its pattern
  matches the corpus too, ``{<corpus>,<new>}/*.wav``, as a nightly append's would); (b) new
  only: the new folder recorded into a fresh directory (timed);
- per repeat, the fixed start of each kind of job: (a) on a dataset of one one-second file,
  appending another (``fixed_append``); (b) that one new file recorded alone (``fixed_record``);
- once per fraction after the repeats: the full re-record of base + new (one folder of symlinks
  to both), for scale.

Before the first repeat, untimed, every input is read once and the job runs once on the tiny
files (the page cache warm for every timed step); every timed step starts with the dirty pages
of the steps before it written to disk (`os.sync`, untimed: the ``cp -a`` of 1.6 GB above all).
Odd repeats run the steps in reverse order.

That no old shard byte is read is shown twice:

- during every timed append, every old shard file and its offsets file are ``chmod 000`` in the
  copy, and the timed commands run without the capabilities that let root ignore file modes
  (``setpriv --bounding-set -dac_override,-dac_read_search``, when run as root; the new-only and
  fixed runs the same way): an open of an old shard fails, so the append succeeding shows it
  opened none (the modes are restored afterwards);
- once per fraction after the repeats (untimed), the append runs under
  ``strace -f -e trace=open,openat,openat2``: every open of a path inside the dataset is listed,
  and the opens of an old shard or offsets path are counted (0 expected), with or without
  success.

After each append: the new version is 2 and holds every old file plus the new ones, the old
shards' and offsets files' SHA-256 equal the base dataset's, and the append recorded as many
windows as the new-only run. Prints per repeat the walls (and the jobs' own times from their
summary lines), the ratio append / new only, and the medians against the target 1.2.
`--json PATH` appends the rows to a file."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks import options
from benchmarks._measure import append_rows, host_line, run_measured
from benchmarks.corpus import DEFAULT_DIR, corpus, corpus_stats
from benchmarks.record_bench import QUIET, RECORD_ARGS
from benchmarks.table import num, spread, table

PY = sys.executable
TARGET = 1.2  # issue 41: append wall <= 1.2 x the new files recorded alone
EXTRA_SEED = 4141  # the new audio's generator seed (the corpus's: corpus.SEED)
# Root reads any file whatever its mode: the timed runs go without that capability, so that the
# chmod 000 of the old shards holds for them too.
NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
NO_DAC += ["--inh-caps", "-dac_override,-dac_read_search"]


def record_cmd(pattern: str, out: Path, *flags: str) -> list[str]:
    """A whole record process on `pattern` into `out`."""
    cmd = [PY, "-m", "pipelines.record", "--input_pattern", pattern, "--output_dir", str(out)]
    return [*cmd, *flags]


def new_cmd(folder: Path, out: Path) -> list[str]:
    """The new files recorded as a dataset of their own (the base's options)."""
    return record_cmd(f"{folder}/*.wav", out, *RECORD_ARGS)


def append_cmd(folder: Path, out: Path, pattern: str | None = None) -> list[str]:
    """The new files appended to the dataset in `out` (its own options); `pattern`: another
    ``--input_pattern`` than the new folder's (``--whole_pattern``)."""
    return record_cmd(pattern or f"{folder}/*.wav", out, "--append")


def guarded(cmd: list[str]) -> list[str]:
    """`cmd` without root's file-mode override (`NO_DAC`) when run as root."""
    return [*NO_DAC, *cmd] if os.geteuid() == 0 else cmd


def summary(stdout: str) -> str:
    """The record command's one summary line (its last line of output)."""
    lines = stdout.strip().splitlines()
    return lines[-1] if lines else ""


def job_seconds(line: str) -> float | None:
    """The job's own time from its summary line (``... MB in 7.0 s ...``)."""
    found = re.search(r" MB in ([0-9.]+) s ", line)
    return float(found.group(1)) if found else None


def timed(cmd: list[str]) -> tuple[float, str]:
    """(wall seconds, summary line) of one whole process, started settled (`os.sync`)."""
    os.sync()
    m = run_measured(guarded(cmd), env=QUIET)
    return m.wall, summary(m.stdout)


def manifest(dataset: Path) -> dict:
    return json.loads((dataset / "manifest.json").read_text())


def old_files(dataset: Path) -> list[str]:
    """The dataset's shard files and their offsets files, relative to it."""
    names = [s["filename"] for sp in manifest(dataset)["splits"].values() for s in sp["shards"]]
    return [*names, *(f"offsets/{name}.offsets" for name in names)]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def linked_folder(folder: Path, sources: dict[str, Path]) -> Path:
    """`folder` made of symlinks ``<prefix>-<name>`` to the WAV files of each source folder
    (names kept apart, the class word last as before); made once."""
    if not folder.exists():
        tmp = Path(f"{folder}.tmp{os.getpid()}")
        tmp.mkdir(parents=True)
        for prefix, source in sources.items():
            for path in sorted(source.glob("*.wav")):
                (tmp / f"{prefix}-{path.name}").symlink_to(os.path.realpath(path))
        os.replace(tmp, folder)
    return folder


def tiny_inputs(work: Path) -> tuple[Path, Path]:
    """Two folders of one one-second 16 kHz PCM_16 file each, of the same class (made once)."""
    import numpy as np
    import soundfile as sf

    folders = []
    for i, name in enumerate(("base", "new")):
        folder = work / "tiny" / name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"tiny{i}_noise.wav"
        if not path.exists():
            noise = np.random.default_rng(i).standard_normal(16000) * 3000
            sf.write(str(path), noise.astype(np.int16), 16000, subtype="PCM_16")
        folders.append(folder)
    return folders[0], folders[1]


def base_dataset(source: Path, out: Path, rerecord: bool) -> float | None:
    """Records `source` into `out` unless it holds that record already; its wall (None: kept)."""
    pattern = f"{source}/*.wav"
    if out.exists() and not rerecord:
        try:
            kept = manifest(out)
            files = len(list(source.glob("*.wav")))
            if kept["params"]["input_pattern"] == pattern and kept["num_files"] == files:
                return None
        except (OSError, ValueError, KeyError):
            pass
    if out.exists():
        shutil.rmtree(out)
    wall, line = timed(record_cmd(pattern, out, *RECORD_ARGS))
    print(f"base recorded: {wall:.1f} s | {line}", flush=True)
    return wall


def warm_up(folders: list[Path], tiny: Path, work: Path) -> None:
    """Untimed: every input read once and the job run once on a tiny file."""
    for folder in folders:
        for path in sorted(folder.glob("*.wav")):
            with open(path, "rb") as fh:
                while fh.read(1 << 24):
                    pass
    timed(new_cmd(tiny, work / "warm-up"))
    shutil.rmtree(work / "warm-up")


def appended(
    base: Path, copy: Path, folder: Path, hashes: dict[str, str], pattern: str | None = None
) -> tuple[float, str]:
    """(wall, summary) of the append of `folder` onto a copy of `base`, old shards unreadable;
    checks the new version and that the old files are unchanged (AssertionError if not)."""
    if copy.exists():
        shutil.rmtree(copy)
    subprocess.run(["cp", "-a", str(base), str(copy)], check=True)
    modes = {name: (copy / name).stat().st_mode & 0o7777 for name in hashes}
    for name in hashes:
        os.chmod(copy / name, 0)
    try:
        wall, line = timed(append_cmd(folder, copy, pattern))
    finally:
        for name, mode in modes.items():
            os.chmod(copy / name, mode)
    check_append(base, copy, folder, hashes)
    shutil.rmtree(copy)
    return wall, line


def check_append(base: Path, copy: Path, folder: Path, hashes: dict[str, str]) -> None:
    """The copy holds version 2: the base's files and `folder`'s; the old files unchanged."""
    got, was = manifest(copy), manifest(base)
    new = len(list(folder.glob("*.wav")))
    assert got["dataset_version"] == 2, f"version {got.get('dataset_version')}"
    assert got["num_files"] == was["num_files"] + new, (got["num_files"], was["num_files"], new)
    for name, digest in hashes.items():
        assert sha256(copy / name) == digest, f"old file {name} changed"


def new_only(folder: Path, out: Path) -> tuple[float, str, int]:
    """(wall, summary, windows) of `folder` recorded into a fresh `out`."""
    if out.exists():
        shutil.rmtree(out)
    wall, line = timed(new_cmd(folder, out))
    windows = manifest(out)["num_examples"]
    shutil.rmtree(out)
    return wall, line, windows


def added_windows(line: str) -> int:
    found = re.match(r"recorded (\d+) windows", line)
    return int(found.group(1)) if found else -1


def traced_append(base: Path, copy: Path, folder: Path, hashes: dict[str, str]) -> dict:
    """The append run once under strace (untimed), old shards unreadable as in the timed runs:
    the opens of paths inside the dataset, those of old shard or offsets paths counted."""
    if copy.exists():
        shutil.rmtree(copy)
    subprocess.run(["cp", "-a", str(base), str(copy)], check=True)
    for name in hashes:
        os.chmod(copy / name, 0)
    log = copy.parent / "strace.log"
    trace = ["strace", "-f", "-qq", "-e", "trace=open,openat,openat2", "-o", str(log)]
    run_measured([*trace, *guarded(append_cmd(folder, copy))], env=QUIET)
    for name in hashes:
        os.chmod(copy / name, (base / name).stat().st_mode & 0o7777)
    check_append(base, copy, folder, hashes)
    old = {str(copy / name) for name in hashes}
    basenames = {Path(name).name for name in hashes}
    opened: dict[str, int] = {}
    old_opens = relative = 0
    for line in log.read_text(errors="replace").splitlines():
        found = re.search(r'open(?:at2?)?\((?:[^,]*, )?"([^"]*)"', line)
        if not found:
            continue
        path = found.group(1)
        if path in old:
            old_opens += 1
        elif not path.startswith("/") and Path(path).name in basenames:
            relative += 1  # relative to some directory: a name an old shard has
        if path.startswith(f"{copy}/") and "/appends/" not in path and "/manifests/" not in path:
            key = re.sub(r"\.tmp-[0-9a-f]+$", ".tmp-*", path[len(str(copy)) + 1 :])
            key += " (write)" if re.search(r"O_WRONLY|O_RDWR", line) else ""
            opened[key] = opened.get(key, 0) + 1
    log.unlink()
    shutil.rmtree(copy)
    return {"old_shard_opens": old_opens, "relative_shard_name_opens": relative, "opened": opened}


def one_repeat(rep: int, setup: dict, args) -> list[dict]:
    """The timed steps of one repeat (reverse order on odd ones); a row per step."""
    work, base, hashes = setup["work"], setup["base"], setup["hashes"]
    rows: list[dict] = []

    def row(step: str, fraction: float | None, wall: float, line: str, **more) -> None:
        load = Path("/proc/loadavg").read_text().split()[0]  # the host is shared: note its load
        rows.append(
            {"repeat": rep, "step": step, "fraction": fraction, "wall": wall, "load": load,
             "job": job_seconds(line), "line": line, **more}
        )  # fmt: skip
        print(f"  {step} {fraction or ''}: {wall:.2f} s (load {load}) | {line}", flush=True)

    def fixed_append() -> None:
        tiny = setup["tiny_base"]
        wall, line = appended(tiny, work / "tiny-appended", setup["tiny_new"], setup["tiny_hashes"])
        row("fixed_append", None, wall, line)

    def fixed_record() -> None:
        wall, line, _ = new_only(setup["tiny_new"], work / "tiny-new-only")
        row("fixed_record", None, wall, line)

    def append_step(fraction: float) -> None:
        folder = setup["extras"][fraction]
        pattern = f"{{{setup['source']},{folder}}}/*.wav" if args.whole_pattern else None
        wall, line = appended(base, work / "appended", folder, hashes, pattern)
        row("append", fraction, wall, line, windows=added_windows(line))

    def new_step(fraction: float) -> None:
        wall, line, windows = new_only(setup["extras"][fraction], work / "new-only")
        row("new_only", fraction, wall, line, windows=windows)

    steps = [fixed_append, fixed_record]
    for fraction in args.fractions:
        steps += [lambda f=fraction: append_step(f), lambda f=fraction: new_step(f)]
    if rep % 2:
        steps.reverse()
    for step in steps:
        step()
    return rows


def report(rows: list[dict], setup: dict, traces: dict, fulls: dict) -> str:
    """The table (a row per repeat and fraction, then the medians), the checks and the verdict."""
    header = ("repeat", "fraction", "new files", "new windows", "append s (job)")
    header += ("new only s (job)", "append / new only")
    cells = []
    by = {(r["repeat"], r["step"], r["fraction"]): r for r in rows if "repeat" in r}
    repeats = sorted({r["repeat"] for r in rows if "repeat" in r})
    ratios: dict[float, list[float]] = {}
    for fraction in setup["fractions"]:
        files = setup["extra_stats"][fraction]["files"]
        for rep in repeats:
            a, n = by[(rep, "append", fraction)], by[(rep, "new_only", fraction)]
            ratios.setdefault(fraction, []).append(a["wall"] / n["wall"])
            same = "" if a["windows"] == n["windows"] else f" (append: {a['windows']}!)"
            cells.append(
                (rep, f"{fraction:.0%}", files, f"{n['windows']}{same}",
                 f"{a['wall']:.2f} ({num(a['job'])})", f"{n['wall']:.2f} ({num(n['job'])})",
                 num(ratios[fraction][-1]))
            )  # fmt: skip
        med_a = statistics.median(by[(r, "append", fraction)]["wall"] for r in repeats)
        med_n = statistics.median(by[(r, "new_only", fraction)]["wall"] for r in repeats)
        cells.append(
            ("median", f"{fraction:.0%}", files, "", f"{med_a:.2f}", f"{med_n:.2f}",
             f"{statistics.median(ratios[fraction]):.2f} (of medians {med_a / med_n:.2f})")
        )  # fmt: skip
    lines = [table(header, cells), ""]
    fixed = {
        step: [by[(r, step, None)]["wall"] for r in repeats]
        for step in ("fixed_append", "fixed_record")
    }
    for step, walls in fixed.items():
        lines.append(f"{step} (one 1-s file): {spread(walls, unit=' s')}")
    for fraction, (wall, line) in fulls.items():
        lines.append(f"full re-record, base + {fraction:.0%}: {wall:.2f} s | {line}")
    for fraction, trace in traces.items():
        others = ", ".join(f"{k} x{v}" for k, v in sorted(trace["opened"].items()))
        lines.append(
            f"strace of the {fraction:.0%} append: {trace['old_shard_opens']} opens of an old "
            f"shard or offsets path ({trace['relative_shard_name_opens']} relative opens of such "
            f"a name); dataset files opened outside appends/ and manifests/: {others}"
        )
    lines.append(
        "every timed append ran with the old shards and offsets files unreadable (chmod 000"
        + (", no CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH)" if os.geteuid() == 0 else ")")
        + " and left them byte-identical (SHA-256)"
    )
    for fraction, values in ratios.items():
        median = statistics.median(values)
        met = "met" if median <= TARGET else "not met"
        lines.append(
            f"{fraction:.0%}: append / new only median {median:.2f} "
            f"(per repeat {', '.join(f'{v:.2f}' for v in values)}; target <= {TARGET}: {met})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = options.common(options.parser(__doc__), minutes=480.0, repeats=3)
    parser.add_argument(
        "--fractions", default="0.01,0.1", help="new audio, as fractions of the corpus's"
    )
    parser.add_argument(
        "--work", default=os.path.join(DEFAULT_DIR, "append"), help="new audio and datasets"
    )
    parser.add_argument("--seed", type=int, default=EXTRA_SEED, help="the new audio's seed")
    parser.add_argument("--rerecord", action="store_true", help="record the base dataset again")
    parser.add_argument(
        "--whole_pattern",
        action="store_true",
        help="timed appends match the corpus and the new folder ('{corpus,new}/*.wav')",
    )
    parser.add_argument("--no_strace", action="store_true", help="skip the strace'd append")
    parser.add_argument("--no_full", action="store_true", help="skip the full re-records")
    args = parser.parse_args(argv)
    args.fractions = [float(f) for f in args.fractions.split(",")]
    if args.repeats < 1 or not all(0 < f <= 1 for f in args.fractions):
        parser.error("--repeats must be at least 1 and each fraction in (0, 1]")
    if not __debug__:
        parser.error("run without -O: the checks are assert statements")
    if not args.no_strace and not shutil.which("strace"):
        parser.error("strace not found: install it or pass --no_strace")

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    source = corpus(args.minutes, root=args.dir, pcm16=True)
    stats = corpus_stats(source)
    print(f"corpus {source}: {stats}", flush=True)
    extras, extra_stats = {}, {}
    for fraction in args.fractions:
        minutes = fraction * stats["audio_seconds"] / 60
        extras[fraction] = corpus(minutes, root=str(work), seed=args.seed, pcm16=True)
        extra_stats[fraction] = corpus_stats(extras[fraction])
        print(f"new {fraction:.0%}: {extras[fraction]}: {extra_stats[fraction]}", flush=True)
    tiny_base, tiny_new = tiny_inputs(work)
    print(host_line(), flush=True)
    base = work / "base"
    base_wall = base_dataset(source, base, args.rerecord)
    tiny_dataset = work / "tiny-dataset"
    if not tiny_dataset.exists():
        run_measured(record_cmd(f"{tiny_base}/*.wav", tiny_dataset, *RECORD_ARGS), env=QUIET)
    hashes = {name: sha256(base / name) for name in old_files(base)}
    print(f"base: {manifest(base)['num_examples']} windows, {len(hashes)} shard + offsets files, "
          f"{sum((base / n).stat().st_size for n in hashes) / 1e6:.0f} MB", flush=True)  # fmt: skip
    setup = {
        "work": work, "base": base, "source": source, "hashes": hashes, "extras": extras,
        "extra_stats": extra_stats, "fractions": args.fractions,
        "tiny_base": tiny_dataset, "tiny_new": tiny_new,
        "tiny_hashes": {name: sha256(tiny_dataset / name) for name in old_files(tiny_dataset)},
    }  # fmt: skip
    warm_up([source, *extras.values(), tiny_new], tiny_new, work)
    rows: list[dict] = []
    for rep in range(args.repeats):
        print(f"repeat {rep}:", flush=True)
        rows += one_repeat(rep, setup, args)
    fulls = {}
    if not args.no_full:
        for fraction in args.fractions:
            both = linked_folder(
                work / f"full-{fraction:g}", {"base": source, "new": extras[fraction]}
            )
            out = work / "full"
            fulls[fraction] = timed(new_cmd(both, out))
            shutil.rmtree(out)
            print(f"  full {fraction:.0%}: {fulls[fraction][0]:.2f} s", flush=True)
            wall, line = fulls[fraction]
            rows.append(
                {"step": "full", "fraction": fraction, "wall": wall, "job": job_seconds(line),
                 "line": line}
            )  # fmt: skip
    traces = {}
    if not args.no_strace:
        for fraction in args.fractions:
            traces[fraction] = traced_append(base, work / "traced", extras[fraction], hashes)
            print(f"  strace {fraction:.0%}: {traces[fraction]}", flush=True)
            rows.append({"step": "strace", "fraction": fraction, **traces[fraction]})
    if base_wall is not None:
        rows.append({"step": "base", "wall": base_wall})
    append_rows(args.json, rows)
    print(f"after the runs: {host_line()}")
    print(report(rows, setup, traces, fulls))


if __name__ == "__main__":
    main()
