"""Shared pieces of the reliability tests (tests/test_reliability_*.py); holds no test itself.

One small, deliberately nasty corpus (file names with spaces, unicode, shell and glob
characters; CSV labels with ``../``, ``/``, quotes and ``$(...)``) and one uninterrupted
*reference* run of it, made once per test process and shared by every module that compares
against it. Also the ``--resume`` tests' corpus and its uninterrupted runs (`ResumeRuns`),
read-only, and read-only / writable copies of directories shared between tests.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import wavgen
from tests.support.record_helpers import without_times

ROOT = Path(__file__).resolve().parents[2]
# file name -> label (the CSV's second column). Labels never become file names: shard names come
# from --dataset_name only.
NASTY_FILES = {
    "take 1_engine.wav": "engine",
    "ünïcödé ðata_bird.wav": "bïrd ü",
    "$(touch pwned)_rain.wav": "$(rm -rf ~)",
    "semi;colon&amp|pipe_rain.wav": "../../escaped",
    "quote'n\"dq_bird.wav": "a/b",
    "..dots.._engine.wav": "..",
    "back`tick`_engine.wav": "engine",
    "star*[x]?_bird.wav": "'quoted' \"label\"",
}
WIN_LEN = 4000
FRAMES = 4 * WIN_LEN + 123  # 4 windows per file
RUN_TIMEOUT = 240  # seconds: an upper bound on any one record run in these tests
_REFERENCE: dict[str, Path] = {}


def make_corpus(directory: Path) -> tuple[str, Path]:
    """Writes the nasty corpus and its label CSV; returns (input pattern, csv path)."""
    audio = directory / "in dir (x)"
    audio.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(NASTY_FILES):
        wavgen.write_wav(
            audio / name, wavgen.synth(FRAMES, seed=i), sample_rate=16000, subtype="PCM_16"
        )
    labels = directory / "labels.csv"
    with open(labels, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["filename", "label"])
        writer.writerows(NASTY_FILES.items())
    return str(audio / "*.wav"), labels


def record_args(pattern: str, labels: Path, output_dir: Path, *extra: str) -> list[str]:
    """The record command line every reliability run uses (plus `extra`)."""
    return [
        "--input_pattern",
        pattern,
        "--output_dir",
        str(output_dir),
        "--win_len",
        str(WIN_LEN),
        "--label_source",
        f"csv:{labels}",
        "--num_shards",
        "3",
        "--direct_running_mode",  # one worker, explicitly (extra may override: the last wins)
        "in_memory",
        "--direct_num_workers",
        "1",
        *extra,
    ]


def reference_run(tmp_root: Path) -> tuple[str, Path, Path]:
    """(pattern, labels csv, output dir) of the one uninterrupted reference run (made once)."""
    if "out" not in _REFERENCE:
        from pipelines import record

        # Two levels below the test process's own temp dir, so that anything escaping the run's
        # folders by "../.." still lands in folders only this test process uses.
        corpus = tmp_root / "reliability" / "reference" / "corpus"
        pattern, labels = make_corpus(corpus)
        out = corpus.parent / "out"
        record.run(record_args(pattern, labels, out))
        _REFERENCE.update(corpus=corpus, labels=labels, out=out)
        _REFERENCE["pattern"] = Path(pattern)
    return str(_REFERENCE["pattern"]), _REFERENCE["labels"], _REFERENCE["out"]


def shard_files(output_dir: Path) -> dict[str, bytes]:
    """Every shard file's bytes, by name (shards are the files named ``*.tfrecord-*``)."""
    return {p.name: p.read_bytes() for p in sorted(output_dir.glob("*.tfrecord-*"))}


def offsets_files(output_dir: Path) -> dict[str, bytes]:
    """Every record offsets file's bytes (format version 4: ``offsets/<shard>.offsets``)."""
    return {p.name: p.read_bytes() for p in sorted((output_dir / "offsets").glob("*.offsets"))}


def manifest_without_time(output_dir: Path) -> dict:
    """manifest.json without created_utc (`without_times`); format version 3's source tables are
    compared through it (their sizes and SHA-256 are in the manifest)."""
    return without_times(json.loads((output_dir / "manifest.json").read_text()))


def assert_same_dataset(got: Path, want: Path) -> None:
    """Byte-identical shards, record offsets, schema and source tables, equal manifests apart
    from created_utc."""
    for files in (shard_files, offsets_files):
        a, b = files(got), files(want)
        assert sorted(a) == sorted(b), (sorted(a), sorted(b))
        for name in b:
            assert a[name] == b[name], f"{name} differs ({len(a[name])} vs {len(b[name])} bytes)"
    assert manifest_without_time(got) == manifest_without_time(want)
    assert (got / "schema.pbtxt").read_bytes() == (want / "schema.pbtxt").read_bytes()
    for table in ("files.jsonl", "errors.jsonl"):
        assert (got / table).read_bytes() == (want / table).read_bytes(), table


def cli(*argv: str, log: Path, env: dict | None = None, module: str = "pipelines.record"):
    """Starts ``python -m module argv`` in its own process group, output to `log`."""
    with open(log, "wb") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", module, *argv],
            cwd=ROOT,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )


def wait_until_paused(proc: subprocess.Popen, marker: Path, *, timeout: float = RUN_TIMEOUT):
    """Waits until `proc` (run by tests.support.pause_points) wrote `marker` and stopped itself.

    Raises AssertionError if the process ends first. `timeout` only stops a hung test: whether
    the pause point is reached never depends on it.
    """
    start = time.monotonic()
    while not (marker.exists() and _stopped(proc.pid)):
        assert proc.poll() is None, f"run ended (rc={proc.returncode}) before its pause point"
        assert time.monotonic() - start < timeout, "pause point not reached (test hung?)"
        time.sleep(0.01)


def _stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (state T in /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] == "T"


def kill(proc: subprocess.Popen) -> None:
    """SIGKILLs `proc`'s whole process group and reaps it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def copy_dataset(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def read_only(directory: Path) -> Path:
    """Makes `directory` and everything under it read-only (files 0o444, folders 0o555): a
    test that tries to change what other tests share fails on the spot (unless it runs as root,
    which writes anyway: `tree_state`, compared at the sharing fixture's end, catches that)."""
    for path in sorted(directory.rglob("*"), reverse=True):
        path.chmod(0o555 if path.is_dir() else 0o444)
    directory.chmod(0o555)
    return directory


def tree_state(directory: Path) -> dict[str, tuple[str, int, int]]:
    """{relative path: (SHA-256 of a file's bytes or "" for a folder, modification time in ns,
    mode)} of `directory` and everything under it: equal while nothing under it changed."""
    state = {}
    for path in [directory, *sorted(directory.rglob("*"))]:
        stat = path.stat()
        digest = "" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        state[str(path.relative_to(directory))] = (digest, stat.st_mtime_ns, stat.st_mode)
    return state


def writable_copy(src: Path, dst: Path) -> Path:
    """A copy of the (read-only) directory `src` at `dst` that the caller may change: the same
    bytes and modification times, owner-writable."""
    shutil.copytree(src, dst)
    for path in [dst, *dst.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return dst


# The --resume tests' corpus (tests/reliability/test_resume*.py): 6 files of 40 windows of 1024
# frames, 240 windows, read tasks of 64 (pipelines.plan.MIN_TASK_ROWS): 4 tasks
RESUME_WIN_LEN = 1024
RESUME_FILES = 6
RESUME_WINDOWS = 40


def resume_corpus(
    directory: Path, *, files: int = RESUME_FILES, windows: int = RESUME_WINDOWS
) -> str:
    """Writes the --resume tests' two-class corpus in `directory`; returns its pattern."""
    frames = windows * RESUME_WIN_LEN + 5
    return wavgen.two_class_corpus(directory, files=files, num_frames=frames)


def resume_args(pattern: str, out: Path | str, *extra: str) -> list[str]:
    """The --resume tests' record command line (3 shards), then `extra`."""
    args = ["--input_pattern", pattern, "--output_dir", str(out)]
    return [*args, "--win_len", str(RESUME_WIN_LEN), "--num_shards", "3", *extra]


class ResumeRuns:
    """The --resume tests' corpus and its uninterrupted runs, shared by every test of a process
    that does not change its corpus (`resume_runs` in tests/conftest.py).

    The corpus and each run are read-only: a run's manifest and tables name the corpus's
    absolute paths, so a test resumes a run of this very corpus, in place, into its own output
    directory, and compares it with `reference`. `assert_unchanged` checks that no test changed
    them.
    """

    def __init__(self, root: Path):
        self.root = root
        self.pattern = resume_corpus(root / "corpus")
        self._states = {root / "corpus": tree_state(read_only(root / "corpus"))}
        self._runs: dict[tuple[str, ...], Path] = {}

    def assert_unchanged(self) -> None:
        """The corpus and every run are as they were made (bytes, times, modes)."""
        for path, state in self._states.items():
            assert tree_state(path) == state, f"a test changed {path}, which tests share"

    def reference(self, *options: str) -> Path:
        """The uninterrupted run of the corpus with the command line `resume_args` makes with
        `options` (recorded in this process the first time it is asked for)."""
        if options not in self._runs:
            from pipelines import record

            out = self.root / f"reference-{len(self._runs)}"
            record.run(resume_args(self.pattern, out, *options))
            self._runs[options] = read_only(out)
            self._states[out] = tree_state(out)
        return self._runs[options]
