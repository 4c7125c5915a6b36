"""Does the launcher of a run planned in the job, fresh, ``--resume``d or ``--append``ed, grow
with the files?

    python -m benchmarks translate                         # 1,024 and 102,400 clips, 3 repeats
    python -m benchmarks translate --sizes 1024,10240 --repeats 2
    python -m benchmarks translate --append                # + 1,000 clips appended to each size
    python -m benchmarks translate --annotations           # + an --annotations run, one table
    python -m benchmarks translate --gcs --append --annotations  # gs:// on the GCS emulator

The record job translated for Dataflow offline (``--template_location``, ``--dataflow_endpoint``
pointing nowhere, ``--no_auth``: nothing submitted, the job description written), each a whole
process: a fresh run planned in the job (`run_job(plan_in_job=True)`) and ``--resume`` of an
unfinished run planned in the job (its run marker and resume record made from the listing, as
the killed run left them: the launcher reads no commit record, the job does, so how far the run
got does not change the launcher's work), against ``FileSystems.match`` of the same pattern in a
fresh process (best of three in it). Printed per size: each one's seconds (the median of the
repeats, and each repeat), then the growth from the smallest size to the largest against the
listing's growth, and the target: growth <= 1.2x the listing's + 2 s.

With ``--append``: ``--append`` onto a recorded dataset of the size's clips with ``--new`` more
clips beside them (`run_job(plan_in_job=True)`: the launcher reads the latest manifest and lists;
the dataset's tables are joined with the listing in the job), against ``FileSystems.match`` of
the pattern of both. Its corpus (``translate-append-<N>/``) is made once: the N clips, their
dataset recorded by a real record run (DirectRunner; long at 10^5), then the new clips.

With ``--annotations``: a fresh ``--annotations`` run planned in the job, its one CSV table
naming every clip (an event of 0.1 s each, labelled by its folder): the launcher reads the table
and matches its rows to the listing, the job reads the headers and fixes the windows.

With ``--gcs`` (`benchmarks/translate_gcs.py`): the same launchers with their inputs, outputs
and table in ``gs://`` on the test suite's GCS emulator, every request delayed ``--latency_ms``,
and the requests each of the two clients sent during each launcher counted.

Corpora: `--sizes` 0.25-s 16-kHz 16-bit clips in 10 class folders under ``--dir``
(``translate-<N>/clips/<class>/``), made on first use as plain PCM WAV bytes (the launcher reads
one header; the audio is not read).
"""

from __future__ import annotations

import json
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import options
from benchmarks.table import num, table

ROOT = Path(__file__).resolve().parents[1]
RATE = 16000
RECORD_ARGS = ["--label_source", "dirname", "--win_len", "4000", "--features", "log_mel"]
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}
CLASSES = 10

# a child process: `python -m benchmarks.translate_bench <mode> <pattern> <work>`
MODES = ("match", "fresh", "unfinished", "resume", "append", "annotated")
ANNOTATED_ARGS = ["--win_len", "4000", "--features", "log_mel"]  # the tables label the clips


def wav_bytes(index: int, *, seconds: float = 0.25) -> bytes:
    """A plain PCM WAV (mono, 16 kHz, 16-bit) of `seconds`, its samples a function of `index`."""
    frames = int(RATE * seconds)
    data = bytes([index % 251, (index * 7) % 253]) * frames
    header = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt "
    header += struct.pack("<IHHIIHH", 16, 1, 1, RATE, RATE * 2, 2, 16)
    return header + b"data" + struct.pack("<I", len(data)) + data


def corpus(root: Path, n: int) -> str:
    """`n` clips in `CLASSES` folders under ``root/translate-<n>/clips`` (made once): their
    pattern."""
    clips = root / f"translate-{n}" / "clips"
    done = clips.parent / "complete"
    if not done.exists():
        for c in range(CLASSES):
            (clips / f"class{c}").mkdir(parents=True, exist_ok=True)
        for i in range(n):
            (clips / f"class{i % CLASSES}" / f"c{i:07d}.wav").write_bytes(wav_bytes(i))
        done.write_text(str(n))
    return str(clips / "*" / "*.wav")


def annotation_table(root: Path, n: int) -> str:
    """The CSV table of `corpus(root, n)`'s clips (made once): a 0.1-s event in each, labelled
    by its folder; its path."""
    table = root / f"translate-{n}" / "events.csv"
    if not table.exists():
        rows = [f"class{i % CLASSES}/c{i:07d}.wav,0.05,0.15,class{i % CLASSES}\n" for i in range(n)]
        partial = table.with_suffix(".partial")
        partial.write_text("path,start_s,end_s,label\n" + "".join(rows))
        partial.rename(table)
    return str(table)


def append_corpus(root: Path, n: int, new: int) -> tuple[str, Path]:
    """`n` clips recorded into a dataset, then `new` clips beside them (numbered after, in every
    class folder), under ``root/translate-append-<n>-<new>`` (made once): (the pattern of all,
    the dataset)."""
    top = root / f"translate-append-{n}-{new}"
    clips, dataset, done = top / "clips", top / "dataset", top / "complete"
    pattern = str(clips / "*" / "*.wav")
    if not done.exists():
        subprocess.run(["rm", "-rf", str(top)], check=True)
        for i in range(n + new):
            if i == n:  # the first n recorded, then the new ones written
                record = ["--input_pattern", pattern, "--output_dir", str(dataset), *RECORD_ARGS]
                subprocess.run(
                    [sys.executable, "-m", "pipelines.record", *record],
                    cwd=ROOT,
                    env={**os.environ, **QUIET},
                    check=True,
                    capture_output=True,
                )
            folder = clips / f"class{i % CLASSES}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"c{i:07d}.wav").write_bytes(wav_bytes(i))
        done.write_text(f"{n} {new}")
    return pattern, dataset


def dataflow_args(work: Path) -> list[str]:
    """Beam's options of an offline Dataflow translation into `work`."""
    (work / "staging").mkdir(parents=True, exist_ok=True)
    return [
        "--runner", "DataflowRunner", "--project", "p", "--region", "europe-west1",
        "--dataflow_endpoint", "http://localhost:1", "--no_auth",
        "--temp_location", str(work / "tmp"), "--staging_location", str(work / "staging"),
        "--template_location", str(work / "job.json"),
    ]  # fmt: skip


def child(mode: str, pattern: str, work: Path, out: str = "", table: str = "") -> None:
    """One launcher step in this process (`MODES`); prints its JSON line. `out` (and `table`):
    the output directory (the dataset appended to, the annotation table) elsewhere than under
    `work`, which then holds only the job description and its staging (``--gcs``)."""
    if mode == "match":
        from apache_beam.io.filesystems import FileSystems

        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            n = len(FileSystems.match([pattern])[0].metadata_list)
            best = min(best, time.perf_counter() - start)
        print(json.dumps({"files": n, "seconds": best}))
        return
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines import job, record
    from pipelines.config import RecordConfig

    argv = ["--input_pattern", pattern, "--output_dir", out or str(work / "out"), *RECORD_ARGS]
    argv += dataflow_args(work)
    if mode == "append":  # `work`: the dataset appended to; its job description beside it
        dataset, described = (out, work) if out else (str(work), work.parent / "append-work")
        argv = ["--input_pattern", pattern, "--output_dir", dataset, *RECORD_ARGS, "--append"]
        argv += dataflow_args(described)
        config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(record.RecordOptions))
        result = job.run_job(config, beam_argv=argv, plan_in_job=True)
        print(json.dumps({"code": 0, "translated": result.translated}))
        return
    if mode == "annotated":  # `work`: the table's path beside the output's
        table, out = table or str(work / "events.csv"), out or str(work / "annotated")
        described = work if "://" in out else work / "annotated-work"
        argv = ["--input_pattern", pattern, "--output_dir", out, *ANNOTATED_ARGS]
        argv += ["--annotations", table, *dataflow_args(described)]
        config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(record.RecordOptions))
        result = job.run_job(config, beam_argv=argv, plan_in_job=True)
        print(json.dumps({"code": 0, "translated": result.translated}))
        return
    if mode == "resume":
        code = record.main([*argv, "--resume"])
        print(json.dumps({"code": code}))
        return
    config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(record.RecordOptions))
    if mode == "fresh":
        job.run_job(config, beam_argv=argv, plan_in_job=True)
        print(json.dumps({"code": 0}))
        return
    from apache_beam.io.filesystems import FileSystems

    from pipelines.plan import list_inputs
    from pipelines.plan.reads import RUN_MARKER
    from pipelines.resume import fingerprint as fp
    from transforms.stages import atomic

    FileSystems.set_options(PipelineOptions(argv))
    listed = list_inputs(config)  # an unfinished run planned in the job, as killed
    cut = {"cpu_count": os.cpu_count() or 1, "single_task": False}
    stored = job.job_fingerprint(json.loads(json.dumps(config.params())), listed, cut=cut)
    out = listed.output_dir
    if "://" not in out:
        os.makedirs(f"{out}/.tmp", exist_ok=True)  # a local output: its directories
    atomic.write_atomically(f"{out}/{RUN_MARKER}", [b"an audiorecords run writes here\n"])
    atomic.write_atomically(f"{out}/{fp.FINGERPRINT_FILE}", fp.json_pieces(stored))
    print(json.dumps({"files": len(listed.inputs)}))


def _timed(
    mode: str, pattern: str, work: Path, *where: str, env: dict[str, str] | None = None
) -> tuple[float, dict]:
    """`child(mode, pattern, work, *where)` in a fresh process (`env` added to its environment):
    (wall seconds, its JSON line)."""
    command = [sys.executable, "-m", "benchmarks.translate_bench", mode, pattern, str(work)]
    start = time.monotonic()
    done = subprocess.run(
        [*command, *where],
        cwd=ROOT,
        env={**os.environ, **(env or {}), **QUIET},
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - start
    if done.returncode:
        raise SystemExit(f"{mode} on {pattern} failed:\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])


def _appended(root: Path, n: int, new: int, runs: dict[str, list[float]]) -> None:
    """One repeat of the ``--append`` case: the listing matched, the append translated (its
    leftovers in the dataset removed after)."""
    pattern, dataset = append_corpus(root, n, new)
    work = dataset.parent / "append-work"
    runs["append match"].append(_timed("match", pattern, work)[1]["seconds"])
    seconds, line = _timed("append", pattern, dataset)
    if not line.get("translated"):
        raise SystemExit(f"--append on {pattern} was not translated only: {line}")
    runs["append"].append(seconds)
    subprocess.run(["rm", "-rf", str(work), str(dataset / "appends")], check=True)


def _annotated(root: Path, n: int, work: Path, runs: dict[str, list[float]]) -> None:
    """One repeat of the ``--annotations`` case: the run translated (`work` removed after)."""
    pattern, table = corpus(root, n), Path(annotation_table(root, n))
    work.mkdir(parents=True, exist_ok=True)
    (work / "events.csv").symlink_to(table)
    seconds, line = _timed("annotated", pattern, work)
    if not line.get("translated"):
        raise SystemExit(f"--annotations on {pattern} was not translated only: {line}")
    runs["annotated"].append(seconds)
    subprocess.run(["rm", "-rf", str(work)], check=True)


def main(argv: list[str] | None = None) -> None:
    if argv and argv[0] in MODES:  # a child process
        child(argv[0], argv[1], Path(argv[2]), *argv[3:])
        return
    parser = options.common(options.parser(__doc__), repeats=3, json=False)
    parser.add_argument(
        "--sizes", default=None, help="comma list of clip counts (1024,102400; --gcs: 1024,10240)"
    )
    parser.add_argument("--append", action="store_true", help="time --append too")
    parser.add_argument("--new", type=int, default=1000, help="clips appended (--append)")
    parser.add_argument("--annotations", action="store_true", help="time an annotated run too")
    parser.add_argument("--gcs", action="store_true", help="inputs and outputs on the emulator")
    parser.add_argument("--latency_ms", type=float, default=40, help="a request's delay (--gcs)")
    parser.add_argument(
        "--page", type=int, default=1000, help="objects a gs:// listing page holds, as GCS (--gcs)"
    )
    args = parser.parse_args(argv)
    root = Path(args.dir)
    default = "1024,10240" if args.gcs else "1024,102400"
    sizes = sorted(int(s) for s in (args.sizes or default).split(","))
    if args.gcs:
        from benchmarks import translate_gcs

        translate_gcs.run(args, root, sizes)
        return
    rows, seconds = [], {}
    for n in sizes:
        pattern = corpus(root, n)
        runs: dict[str, list[float]] = {"match": [], "fresh": [], "resume": []}
        if args.append:
            runs.update({"append match": [], "append": []})
        if args.annotations:
            runs["annotated"] = []
        for r in range(args.repeats):
            work = root / "translate-work" / f"{n}-{r}"
            subprocess.run(["rm", "-rf", str(work)], check=True)
            runs["match"].append(_timed("match", pattern, work)[1]["seconds"])
            runs["fresh"].append(_timed("fresh", pattern, work / "fresh")[0])
            _timed("unfinished", pattern, work / "resume")
            runs["resume"].append(_timed("resume", pattern, work / "resume")[0])
            subprocess.run(["rm", "-rf", str(work)], check=True)
            if args.append:
                _appended(root, n, args.new, runs)
            if args.annotations:
                _annotated(root, n, work, runs)
        seconds[n] = {k: statistics.median(v) for k, v in runs.items()}
        for kind, values in runs.items():
            shown = ", ".join(num(v) for v in values)
            rows.append([f"{n:,}", kind, num(seconds[n][kind]), shown])
        print(f"{n:,} clips: {seconds[n]}", flush=True)
    print(table(["clips", "launcher", "median s", "each repeat s"], rows, align="lllr"))
    kinds = ["fresh", "resume", *(["append"] if args.append else [])]
    print()
    print(growth_table(seconds, kinds + (["annotated"] if args.annotations else [])))


def growth_table(seconds: dict[int, dict[str, float]], kinds: list[str]) -> str:
    """Each launcher's growth from the smallest size to the largest against the target (<= 1.2x
    its listing's growth + 2 s), as a table; `seconds`: {size: {launcher: median seconds}}, the
    listings under ``match`` (an append's pattern: ``append match``)."""
    small, large = min(seconds), max(seconds)
    growth = []
    for kind in kinds:
        matched = "append match" if kind == "append" else "match"  # the listing of its pattern
        listing = seconds[large][matched] - seconds[small][matched]
        grew = seconds[large][kind] - seconds[small][kind]
        bound = 1.2 * listing + 2.0
        growth.append([kind, num(grew), num(listing), num(bound), "yes" if grew <= bound else "no"])
    header = [f"{small:,} -> {large:,} clips", "growth s", "listing growth s", "bound s", "met"]
    return table(header, growth)


if __name__ == "__main__":
    main(sys.argv[1:])
