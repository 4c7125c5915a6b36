"""A record run with ``--annotations`` planned in the job (`pipelines.plan.annotated`'s in-job
path, `pipelines.plan.in_job`): the launcher lists the inputs, reads the tables and matches their
rows, the job's plan step reads the headers, checks every file's events and fixes the windows.

- Planned in the job or in the launcher (`pipelines.job.run_job` with ``plan_in_job`` True /
  False, each run a process of its own forked from one that imported Beam and TensorFlow once,
  `tests.support.forked`: SavedModels number their functions per process), the dataset is byte
  for byte the same (every file but the SavedModels' ``fingerprint.pb``, the manifest apart from
  its times) and so are the result's counts; a few long 8 kHz files (one stereo, one of junk
  bytes named .wav) annotated in a Raven table, an Audacity label track and a CSV with bad rows
  (past a file's end, an unknown file, a non-number, a row on the broken WAV, a channel-1 event
  on a mono file): grid windows with ``--splits``, centred event windows with seeded background
  (``--features log_mel``: TFT's analysis), ``--channel_mode split``, ``--classes`` refusing a
  label. The class list is the background class and every label of a row matched to a listed
  file, even a row refused for its file's duration or channels or because its file is refused.
- Planned in the job, the launcher reads no WAV header but the first (the feature shapes); the
  job's plan step reads each once (``headers_read``).
- ``--strict`` and a bad row: the same one line from both plans (the first bad row in (table,
  line) order, here one only the job's headers can find), exit 2, no output directory left.
- A run planned in the job killed once a read task committed resumes in the job to the
  uninterrupted dataset; a table edited in between is refused in one line (slow).
"""

from __future__ import annotations

import functools
import json
import os
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.support import reliability
from tests.support.annotation_tables import audacity_table, raven_table
from tests.support.forked import Forker
from tests.support.record_helpers import dataset_digests, load_manifest

ROOT = Path(__file__).resolve().parents[2]
RATE = 8000
SECONDS = {"site1/long_a.wav": 20, "site1/long_b.wav": 15, "site2/long_c.wav": 12}
STEREO = "site2/long_c.wav"
JUNK = "site3/junk.wav"  # junk bytes named .wav: refused for its header
WAV_INPUTS = len(SECONDS) + 1
TIMEOUT_S = 600

# The CLI (`pipelines.record.main`) with the record job planned in the launcher or in the job
# (argv[1]: "launcher", "job", or "job:<n>": the plan step's header batches of n files, as
# `PlanInJob` reads many files' headers); the result's counts as the last line of its stdout.
RUN = """
import json, sys
from pipelines import job, launch_in_job, record
mode, *argv = sys.argv[1:]
run_job, results, batches = job.run_job, [], []
def planned(config, **kwargs):
    results.append(run_job(config, plan_in_job=mode != "launcher", **kwargs))
    return results[-1]
job.run_job = planned
if mode.startswith("job:"):  # the plan step's header batches of that many files
    plan_in_job = launch_in_job.PlanInJob
    def small_batches(*args, **kwargs):
        batches.append(int(mode[4:]))
        return plan_in_job(*args, **kwargs, batch_size=batches[-1])
    launch_in_job.PlanInJob = small_batches
code = record.main(argv)
for r in results:
    print(json.dumps({"num_examples": r.num_examples, "num_failed": r.num_failed,
                      "num_bad_rows": r.num_bad_rows, "num_files": r.num_files,
                      "headers_read": r.counters.get("headers_read", 0), "batches": batches}))
sys.exit(code)
"""


@pytest.fixture(scope="module")
def forker():
    """One server that imported Beam, TensorFlow and TFT; each run a child forked from it."""
    server = Forker({**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, ROOT)
    yield server
    server.close()


def _s(sample: int) -> str:
    return repr(sample / RATE)


def _corpus(root: Path) -> dict[str, dict[str, str]]:
    """Three long files (long_c stereo) and a junk .wav under ``root/audio``; a Raven table
    for long_a, an Audacity track for long_b and a CSV under ``root/tables``, each with bad
    rows. Returns {table name: {line: the reason its bad row is refused for}} (the broken WAV's
    row: "JUNK", its reason is the file's own)."""
    rng = np.random.default_rng(5)
    for path, seconds in SECONDS.items():
        (root / "audio" / path).parent.mkdir(parents=True, exist_ok=True)
        shape = (seconds * RATE, 2) if path == STEREO else (seconds * RATE,)
        noise = (rng.standard_normal(shape) * 2000).astype(np.int16)
        sf.write(root / "audio" / path, noise, RATE, subtype="PCM_16")
    (root / "audio" / JUNK).parent.mkdir(parents=True)
    (root / "audio" / JUNK).write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk-not-a-chunk" * 3)
    tables = root / "tables"
    tables.mkdir()
    sec = RATE
    raven_events = [(1 * sec, 5 * sec // 2, "grunt"), (4 * sec, 46 * sec // 10, "tug"),
                    (82 * sec // 10, 99 * sec // 10, "whale"), (12 * sec, 124 * sec // 10, "grunt"),
                    (155 * sec // 10, 17 * sec, "tug")]  # fmt: skip
    raven = raven_table(raven_events, audio=None).splitlines()
    # the only row of "ghost": past the file's end (its label is a class all the same)
    raven.append("99\tSpectrogram 1\t1\t19.5\t21.0\t100.0\t2000.0\tghost")
    (tables / "long_a.Table.1.selections.txt").write_text("\n".join(raven) + "\n")
    audacity_events = [(2 * sec, 3 * sec, "whale"), (6 * sec, 7 * sec + 500, "grunt")]
    audacity_events.append((11 * sec, 13 * sec, "tug"))
    audacity = audacity_table(audacity_events).splitlines()
    audacity.append("x\t2.0\tgrunt")
    (tables / "long_b.txt").write_text("\n".join(audacity) + "\n")
    csv = [
        "path,start_s,end_s,label,channel",
        "site1/long_b.wav,3.0,4.0,echo,1",  # 2: channel 1 of a mono file ("echo": only here)
        "site2/long_c.wav,0.5,1.75,grunt,0",
        "site2/long_c.wav,1.0,2.5,whale,1",
        "site2/long_c.wav,4.0,5.5,tug,",
        "site2/long_c.wav,5.0,6.0,orca,",  # 6: outside --classes in that case
        "site2/long_c.wav,7.0,8.0,tug,2",  # 7: channel 2 of a stereo file
        "site9/missing.wav,1,2,nowhere,",  # 8: no such input file
        f"{JUNK},1,2,phantom,",  # 9: the broken WAV's row ("phantom": only here)
        "site2/long_c.wav,1,x,tug,",  # 10: not a number
        "site2/long_c.wav,9.0,10.5,whale,1",
        "site2/long_c.wav,4.2,5.2,grunt,",  # 3 events in [4.5, 5.5): the most of any window
    ]
    (tables / "events.csv").write_text("\n".join(csv) + "\n")
    return {
        "long_a.Table.1.selections.txt": {
            str(len(raven)): "ends at 21 s, beyond the file's duration (20 s)"
        },
        "long_b.txt": {str(len(audacity)): "start is not a number: 'x'"},
        "events.csv": {
            "2": "channel 1 (0-based) but the file has 1 channel(s)",
            "7": "channel 2 (0-based) but the file has 2 channel(s)",
            "8": "audio file 'site9/missing.wav' matches no input file",
            "9": "JUNK",
            "10": "end_s is not a number: 'x'",
        },
    }


def _args(root: Path, out: Path, *extra: str, pattern: str = "**/*.wav") -> list[str]:
    return [
        "--input_pattern", str(root / "audio" / pattern), "--output_dir", str(out),
        "--win_len", "8000", "--hop_len", "4000", "--features", "none",
        "--annotations", str(root / "tables" / "*"), "--annotation_column", "Species",
        *extra,
    ]  # fmt: skip


def _run(forker: Forker, mode: str, argv: list[str], *, code: int = 0):
    done = forker.run(["-c", RUN, mode, *argv], timeout=TIMEOUT_S)
    assert done.returncode == code, done.stderr[-4000:]
    return done


def _counts(done) -> dict:
    return json.loads(done.stdout.strip().splitlines()[-1])


CENTRED = ("--event_windows", "centered", "--background_per_file", "3")
# case: (options, how the plan step batches the headers: "job" its default, "job:<n>" n files)
CASES = {
    "grid": (("--splits", "train=50,test=50"), "job:1"),
    "centred_log_mel": ((*CENTRED, "--features", "log_mel"), "job"),
    "split_channels": (("--channel_mode", "split"), "job:2"),
    "classes": (("--classes", "background,grunt,tug,whale"), "job:1"),
}


@pytest.mark.slow  # two record runs a case (the quick loop: test_in_job's plan step alone)
@pytest.mark.parametrize("case", list(CASES))
def test_planned_in_the_job_or_the_launcher_an_annotated_run_is_byte_identical(
    tmp_path, forker, case
):
    """The same dataset and counts from both plans; in the job, with header batches of one or
    two files, the events' rows (``max_events``) are the most of any file's window, found in
    a later batch than the first file's."""
    bad = _corpus(tmp_path)
    options, in_job = CASES[case]
    out = tmp_path / "ds"
    digests, counts = {}, {}
    for mode in ("launcher", in_job):
        counts[mode] = _counts(_run(forker, mode, _args(tmp_path, out, *options)))
        digests[mode] = dataset_digests(out)
        if mode == in_job:
            break
        out.rename(tmp_path / f"ds-{mode}")
    job, launcher = counts[in_job], counts["launcher"]
    assert job.pop("batches") == ([] if in_job == "job" else [int(in_job[4:])])
    # the job's plan step read every WAV header, once; the launcher's plan none in the job
    assert (job.pop("headers_read"), launcher.pop("headers_read")) == (WAV_INPUTS, 0)
    assert launcher.pop("batches") == []
    assert job == launcher
    assert job["num_failed"] == 1  # the junk .wav
    assert {"manifest.json", "files.jsonl", "errors.jsonl", "schema.pbtxt"} <= set(digests[in_job])
    different = sorted(
        name
        for name in set(digests[in_job]) | set(digests["launcher"])
        if digests[in_job].get(name) != digests["launcher"].get(name)
    )
    assert different == []

    m = load_manifest(out)
    junk = str(tmp_path / "audio" / JUNK)
    (junk_reason,) = [e["reason"] for e in m["errors"] if e["path"] == junk]
    if case == "classes":  # "orca" is not in --classes: a bad row; refused rows keep theirs
        assert m["classes"] == ["background", "grunt", "tug", "whale"]
        bad["events.csv"]["6"] = "label 'orca' is not in --classes"
        most = 2  # without orca's event
    else:  # "ghost", "echo", "phantom": only in refused rows matched to a listed file
        assert m["classes"] == ["background", "echo", "ghost", "grunt", "orca", "phantom", "tug",
                                "whale"]  # fmt: skip
        most = 3  # long_c, in [4.5, 5.5): tug, orca, grunt
    assert m["elements"]["events"]["shape"] == [most, 3]
    rows = {}
    for e in m["errors"]:
        if e["path"] != junk:
            table, line = e["path"].rsplit("/", 1)[-1].rsplit(":", 1)
            rows.setdefault(table, {})[line] = e["reason"]
    bad["events.csv"]["9"] = f"audio file {junk} is refused: {junk_reason}"
    assert rows == bad
    assert job["num_bad_rows"] == sum(map(len, bad.values()))
    assert m["num_classes"] == len(m["classes"])


def _launcher_reads(monkeypatch) -> list[str]:
    """The WAV headers read outside a Beam step (the launcher's), recorded as they are read;
    planning in the launcher (`read_headers`) fails the test."""
    from pipelines import job
    from pipelines.plan import listing, reads

    def launcher_plan(*args, **kwargs):
        raise AssertionError("the launcher read every header")

    monkeypatch.setattr(job, "read_headers", launcher_plan)
    monkeypatch.setattr(listing, "read_headers", launcher_plan)
    read_header, launcher = reads._read_header, []

    def counted(f, seen):
        stack = traceback.extract_stack()
        if not any("apache_beam/runners" in frame.filename for frame in stack):
            launcher.append(f.path)
        return read_header(f, seen)

    monkeypatch.setattr(reads, "_read_header", counted)
    return launcher


def test_planned_in_the_job_the_launcher_reads_no_header_but_the_first(tmp_path, monkeypatch):
    """In this process (the in-memory DirectRunner runs the plan step here too): outside a Beam
    step only the first file's header is read (``--features log_mel``: its feature shapes),
    the launcher's plan of every header is never called, and the job reads each once."""
    from pipelines import job
    from pipelines.config import RecordConfig

    _corpus(tmp_path)
    config = RecordConfig(
        input_pattern=str(tmp_path / "audio" / "**" / "*.wav"),
        output_dir=str(tmp_path / "ds"),
        win_len=8000,
        hop_len=4000,
        features="log_mel",
        annotations=str(tmp_path / "tables" / "*"),
        annotation_column="Species",
    )
    launcher = _launcher_reads(monkeypatch)
    result = job.run_job(config, plan_in_job=True)
    assert launcher == [str(tmp_path / "audio" / "site1" / "long_a.wav")]  # the feature shapes
    assert result.counters["headers_read"] == WAV_INPUTS
    assert (result.num_failed, result.num_bad_rows) == (1, 7)
    # grid windows of 1 s every 0.5 s: 39 + 29 + 23
    assert result.num_examples == 39 + 29 + 23
    assert load_manifest(tmp_path / "ds")["elements"]["events"]["shape"][1] == 3


def test_strict_and_a_bad_row_is_the_same_one_line_from_both_plans(tmp_path, monkeypatch, capsys):
    """The first bad row in (table, line) order is one only the headers find (a channel-1 event
    on a mono file), before rows the launcher finds in the tables (an unknown file, a non-number):
    the command (`pipelines.record.main`, its job planned in the launcher, then in the job)
    refuses it in the same line, exits 2 and leaves no output directory."""
    from pipelines import job, record

    _corpus(tmp_path)
    out = tmp_path / "ds"
    run_job, lines = job.run_job, {}
    for in_job in (False, True):
        monkeypatch.setattr(job, "run_job", functools.partial(run_job, plan_in_job=in_job))
        argv = _args(tmp_path, out, "--strict", pattern="site[12]/*.wav")
        assert record.main(argv) == record.EXIT_USAGE
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in err, err
        lines[in_job] = errors[0]
        assert not out.exists()  # nothing left behind
    table = tmp_path / "tables" / "events.csv"
    want = f"error: --strict: {table}:2: channel 1 (0-based) but the file has 1 channel(s)"
    assert lines[True] == lines[False] == want


# --resume: 6 files of 40 windows of 1024 frames, read tasks of 64 rows: 4 tasks
RESUME_FILES, RESUME_WINDOWS = reliability.RESUME_FILES, reliability.RESUME_WINDOWS
IN_MEMORY = ("--direct_running_mode", "in_memory", "--direct_num_workers", "2")
HOLD_TIMEOUT_S = 300.0  # only stops a hung test


def _resume_corpus(root: Path) -> tuple[str, Path]:
    """The --resume tests' corpus (`reliability.resume_corpus`, 16 kHz) and a CSV annotating
    each file (three labels, one row past a file's end); returns (pattern, table)."""
    pattern = reliability.resume_corpus(root / "audio")
    rows = ["path,start_s,end_s,label"]
    for i, path in enumerate(sorted((root / "audio").glob("*.wav"))):
        for j in range(4):
            start = 0.3 * j + 0.05 * i
            rows.append(f"{path.name},{start!r},{start + 0.2!r},{'xyz'[(i + j) % 3]}")
    rows.append(f"{path.name},2.0,9.0,z")  # past the end
    table = root / "events.csv"
    table.write_text("\n".join(rows) + "\n")
    return pattern, table


def _resume_args(pattern: str, table: Path, out: Path, *extra: str) -> list[str]:
    return reliability.resume_args(
        pattern, out, "--features", "none", "--annotations", str(table), *IN_MEMORY, *extra
    )


def _killed_after_a_commit(tmp_path: Path, argv: list[str]) -> Path:
    """Runs `argv` planned in the job (`tests.support.resume_hold --in_job`), killed once a read
    task has committed; returns its output directory."""
    out, hold = tmp_path / "out", tmp_path / "hold"
    hold.mkdir()
    proc = reliability.cli(str(hold), "--in_job", *argv, log=tmp_path / "killed.log",
                           module="tests.support.resume_hold")  # fmt: skip
    try:
        start = time.monotonic()
        while not (hold / "held").exists():
            log = (tmp_path / "killed.log").read_text(errors="replace")[-3000:]
            assert proc.poll() is None, f"the job ended before a read task committed: {log}"
            assert time.monotonic() - start < HOLD_TIMEOUT_S, "no read task held the job"
            time.sleep(0.05)
        assert not (out / "manifest.json").exists(), "the killed run finished"
        assert sorted((out / ".tmp" / "commits").glob("*.json")), "nothing committed"
    finally:
        reliability.kill(proc)
        (hold / "release").touch()
    assert json.loads((out / ".tmp" / "resume.json").read_text()).get("planned_in") == "job"
    return out


@pytest.mark.slow  # three record runs, one killed
def test_an_annotated_run_planned_in_the_job_killed_after_a_commit_resumes_in_the_job(tmp_path):
    from pipelines import record

    pattern, table = _resume_corpus(tmp_path / "corpus")
    want = tmp_path / "uninterrupted"
    uninterrupted = record.run(_resume_args(pattern, table, want))
    assert uninterrupted.num_bad_rows == 1 and uninterrupted.total_tasks == 4
    out = _killed_after_a_commit(tmp_path, _resume_args(pattern, table, tmp_path / "out"))

    result = record.run(_resume_args(pattern, table, out, "--resume"))
    assert result.counters.get("headers_read") == RESUME_FILES  # planned in the job again
    total = RESUME_FILES * RESUME_WINDOWS
    assert 0 < result.counters.get("reused_windows", 0) == result.reused_windows < total
    assert (result.num_examples, result.num_bad_rows) == (total, 1)
    reliability.assert_same_dataset(out, want)
    assert load_manifest(out)["classes"] == ["background", "x", "y", "z"]
    assert not (out / ".tmp").exists()


@pytest.mark.slow  # a record run, killed
def test_an_annotated_resume_planned_in_the_job_refuses_an_edited_table(tmp_path, capsys):
    from pipelines import record

    pattern, table = _resume_corpus(tmp_path / "corpus")
    out = _killed_after_a_commit(tmp_path, _resume_args(pattern, table, tmp_path / "out"))
    commits = sorted((out / ".tmp" / "commits").glob("*.json"))
    text = table.read_text()
    edited = text.replace(",x\n", ",y\n", 1)  # one matched row's label
    assert edited != text
    table.write_text(edited)

    assert record.main(_resume_args(pattern, table, out, "--resume")) == record.EXIT_USAGE
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: --resume: {out} holds an unfinished run of another plan: "
                               "the plan changed"), lines  # fmt: skip
    assert "annotation table" in lines[0]
    assert sorted((out / ".tmp" / "commits").glob("*.json")) == commits  # left as they were
    assert not (out / "manifest.json").exists()
