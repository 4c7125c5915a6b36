"""Byte identity of two checkouts: every command's output and replay's element order.

    python -m benchmarks byte_identity --base 81e8934 --head main
    python -m benchmarks byte_identity --base main --head /work/wt-branch     # a work tree as is
    python -m benchmarks byte_identity --base main --head main --cases sample --control 2
    python -m benchmarks byte_identity --base main --head HEAD --skip_big     # no 10,240 clips

A measurement of two checkouts, not a test. `--base` and `--head` are git revisions of this
repository (copied with ``git archive``) or a work tree's path (its tracked and untracked,
not ignored files copied as they are, uncommitted changes included). Every command runs in a
fresh process with ``PYTHONPATH=<copy>`` and its working directory in the copy, from the same
input files (one copy of them, outside both checkouts) and into the same output path (moved
aside between runs: the transform graph names the output directory), so that the code is the
only difference. Then:

1. **Record** (`RECORD_CASES`): ``python -m pipelines.record`` on the bundled sample with the
   README's options, the sample cut into windows, shards and splits with two worker processes,
   an ``--append`` onto it, the bundled annotated hydrophone excerpt (docs/annotations.md's
   command), a generated annotated corpus (Audacity and CSV tables, grid and centred windows),
   the 10,240 clips with clips_bench's options and 2,000 of them with ``--splits``. Each output
   file's SHA-256 is compared, but for what legitimately differs between two runs of one
   checkout (`RUN_SPECIFIC`): a JSON file's ``created_utc`` values, an append directory's name
   (a digest of the version's commits, ``created_utc`` included) and the ``uuid`` field of a
   SavedModel's ``fingerprint.pb`` (its other fields are compared). The command's standard
   output is compared with its timings masked (`TIMINGS`).
2. **Tools** (`TOOL_CASES`): ``python -m pipelines.inspect`` (summary, ``--report``,
   ``--plots``, ``--version``) and ``python -m pipelines.verify`` from each checkout on the
   datasets the base recorded: standard output and every file written.
3. **Replay** (`replay_sets`): ``replay_dataset`` from each checkout, in a fresh process each,
   on the base's datasets with option sets that both checkouts accept; the sequence of a digest
   of every element (SHA-256 of each key's dtype, shape and bytes) compared element by element.
   Each checkout reads each set twice ("2 passes equal"): where its own two passes differ (read
   without a seed, tf.data's deterministic option is off, and batches leave the parallel decode
   as they finish), the checkouts are compared as multisets ("same elements").

`--control N` runs the base N more times on each record case and compares each run with the
base's first one: what differs between two runs of the same code (run-specific bytes, or
nondeterminism), to tell it from a difference the code makes. A ``saved_model.pb`` whose bytes
differ is compared again as a graph with TensorFlow's per-process counters taken out
(`graph_without_counters`): "names only" in the table when that is all that differs, as between
runs with worker processes (docs/guarantees.md, item 5). Children inherit ``PYTHONHASHSEED``
(unset: a random one per process, as a user's runs) unless `--hashseed` fixes it.

Prints the tables (markdown) and exits 1 when a base / head pair is neither identical nor
"names only", or a replay set neither identical nor "same elements". Work files go to a new
directory under ``$AUDIORECORDS_BENCH_DIR`` (default /tmp/audiorecords-bench), deleted at the
end unless ``--keep``; the 10,240 clips' outputs (~590 MB a run, two at a time) are deleted as
soon as compared. About 10 minutes on 2 busy cores (``--control 1``: 15).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import wave
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLIPS_DIR = "/tmp/audiorecords-bench/clips-2727-10240/clips"
BENCH_DIR = os.environ.get("AUDIORECORDS_BENCH_DIR", "/tmp/audiorecords-bench")

# Bytes that differ between two runs of one checkout, and why (each shown by `--control`).
RUN_SPECIFIC = {
    "created_utc": "a JSON file's created_utc values (the manifest, its commits, "
    "manifests/<v>.json): the time of the run",
    "fingerprint.pb uuid": "field 7 (uuid) of a SavedModel's fingerprint.pb: TensorFlow writes a "
    "random UUID on every save; its five hashes are compared",
    "append token": "an --append's directory appends/v<N>-<digest>: the digest covers the commits "
    "of the version appended to, whose created_utc differs between runs; the name is replaced in "
    "paths and in JSON / JSON lines files",
}
_APPEND_TOKEN = re.compile(r"v\d+-[0-9a-f]{16}")
_CREATED = re.compile(rb'"created_utc": "[^"]*"')
# The record command's summary line: the run's seconds and audio seconds per second.
TIMINGS = (re.compile(r"in [0-9.]+ s \([0-9.,e+-]+ audio-s/s\)"),)
FINGERPRINT_UUID_FIELD = 7
RUN_TIMEOUT_S = 3600
_START_ENV = dict(os.environ)  # the children's; this process quiets TensorFlow's logs


@dataclasses.dataclass(frozen=True)
class Checkout:
    """A copy of the code to run: `path` is its root, `label` what it was copied from."""

    path: Path
    label: str


@dataclasses.dataclass(frozen=True)
class RecordCase:
    """Record commands run one after another into ``{out}``.

    `big`: the head's and control runs' outputs are deleted once compared (unless ``--keep``);
    `replayed`: the base's output is kept for the tools and replay parts.
    """

    name: str
    commands: tuple[tuple[str, ...], ...]
    big: bool = False
    replayed: bool = True


@dataclasses.dataclass(frozen=True)
class ToolCase:
    """One command over a dataset the base recorded (``{data:<case>}``), writing to ``{out}``."""

    name: str
    argv: tuple[str, ...]


def _record(options: str) -> tuple[str, ...]:
    """``python -m pipelines.record --output_dir {out}`` and the space-separated `options`."""
    return ("-m", "pipelines.record", "--output_dir", "{out}", *options.split())


def _tool(command: str) -> tuple[str, ...]:
    return ("-m", *command.split())


RECORD_CASES = (
    RecordCase(
        "sample", (_record("--input_pattern {in}/sample/*.wav --win_len 16000 --overwrite"),)
    ),
    RecordCase(
        "sample_cut",
        (
            _record(
                "--input_pattern {in}/sample/*.wav --win_len 8000 --hop_len 4000 --pad "
                "--num_shards 3 --splits train=60,test=40 --features spectrogram,mfcc "
                "--feature_dtype float16 --direct_running_mode multi_processing "
                "--direct_num_workers 2"
            ),
        ),
    ),
    RecordCase(
        "sample_append",
        (
            _record("--input_pattern {in}/sample/take0_*.wav --win_len 16000"),
            _record("--input_pattern {in}/sample/*.wav --append"),
        ),
    ),
    RecordCase(
        "tug",
        (
            _record(
                "--input_pattern {in}/tug/hydrophone_excerpt_tug.wav --win_len 32000 "
                "--annotations {in}/tug/*.txt"
            ),
        ),
    ),
    RecordCase(
        "annotated",
        (
            _record(
                "--input_pattern {in}/annotated/audio/**/*.wav --win_len 8000 --hop_len 4000 "
                "--annotations {in}/annotated/tables/* --splits train=50,test=50 "
                "--analyze_splits train,test --num_shards 2"
            ),
        ),
    ),
    RecordCase(
        "annotated_centered",
        (
            _record(
                "--input_pattern {in}/annotated/audio/**/*.wav --win_len 8000 "
                "--annotations {in}/annotated/tables/* --event_windows centered "
                "--background_per_file 3 --features mfcc"
            ),
        ),
    ),
    RecordCase(
        "clips_2000_splits",
        (
            _record(
                "--input_pattern {clips}/*/clip0[01]*.wav --label_source dirname --win_len 16000 "
                "--features log_mel --splits train=80,validation=10,test=10"
            ),
        ),
        big=True,
    ),
    RecordCase(
        "clips_10240",
        (
            _record(
                "--input_pattern {clips}/*/*.wav --label_source dirname --win_len 16000 "
                "--features log_mel"
            ),
        ),
        big=True,
        replayed=False,
    ),
)

TOOL_CASES = (
    ToolCase("inspect sample", _tool("pipelines.inspect {data:sample}")),
    ToolCase(
        "inspect sample --report --plots",
        _tool("pipelines.inspect {data:sample} --report {out}/report.html --plots {out}/plots"),
    ),
    ToolCase("inspect sample_cut", _tool("pipelines.inspect {data:sample_cut}")),
    ToolCase(
        "inspect sample_append --version 1",
        _tool("pipelines.inspect {data:sample_append} --version 1"),
    ),
    ToolCase("inspect sample_append", _tool("pipelines.inspect {data:sample_append}")),
    ToolCase(
        "inspect tug --report", _tool("pipelines.inspect {data:tug} --report {out}/report.html")
    ),
    ToolCase(
        "inspect annotated --plots",
        _tool("pipelines.inspect {data:annotated} --plots {out}/plots --max_elements 50 --seed 3"),
    ),
    ToolCase("verify sample", _tool("pipelines.verify {data:sample}")),
    ToolCase(
        "verify sample_cut --split test", _tool("pipelines.verify {data:sample_cut} --split test")
    ),
    ToolCase("verify sample_append", _tool("pipelines.verify {data:sample_append}")),
    ToolCase("verify annotated", _tool("pipelines.verify {data:annotated}")),
)


# ---------------------------------------------------------------- checkouts and inputs


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_checkout(spec: str, *, dest: Path) -> Checkout:
    """Copies revision or work tree `spec` to `dest`.

    Args:
      spec: a git revision of this repository, or the path of a work tree (copied as it is).
      dest: an absent directory.

    Returns:
      The copy and a label naming what it holds (the commit, and whether a work tree had
      uncommitted changes).
    """
    dest.mkdir(parents=True)
    if Path(spec).is_dir():
        tree = Path(spec).resolve()
        head = _git("rev-parse", "--short", "HEAD", cwd=tree)
        dirty = bool(_git("status", "--porcelain", cwd=tree))
        listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=tree)
        for name in filter(None, listed.split("\0")):
            source = tree / name
            if source.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / name)
        label = f"{tree} at {head}" + (" + uncommitted changes" if dirty else "")
        return Checkout(dest, label)
    commit = _git("rev-parse", "--verify", f"{spec}^{{commit}}")
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return Checkout(dest, f"{spec} = {commit[:7]}")


def _write_wav(path: Path, samples: Any, *, rate_hz: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate_hz)
        out.writeframes(samples.astype("<i2").tobytes())


def make_annotated_corpus(root: Path) -> None:
    """Three long 8 kHz files in two folders, events of three classes in an Audacity table
    each for two of them and a CSV for the third, plus a bad row in each format."""
    import numpy as np

    rate_hz = 8000
    seconds = {"site1/long_a.wav": 20, "site1/long_b.wav": 15, "site2/long_c.wav": 12}
    rng = np.random.default_rng(43)
    tables = root / "tables"
    tables.mkdir(parents=True)
    csv = ["path,start_s,end_s,label"]
    for name, length_s in seconds.items():
        t = np.arange(length_s * rate_hz) / rate_hz
        noise = rng.standard_normal(t.size) * 800
        events = []
        for _ in range(8):
            start = float(rng.uniform(0, length_s - 2))
            end = start + float(rng.uniform(0.1, 1.8))
            label = str(rng.choice(["grunt", "tug", "whale"]))
            tone = {"grunt": 150.0, "tug": 700.0, "whale": 300.0}[label]
            inside = (t >= start) & (t < end)
            noise[inside] += 6000 * np.sin(2 * np.pi * tone * t[inside])
            events.append((round(start, 4), round(end, 4), label))
        _write_wav(root / "audio" / name, np.clip(noise, -32768, 32767), rate_hz=rate_hz)
        stem = Path(name).stem
        if stem == "long_c":
            csv += [f"{name},{a},{b},{label}" for a, b, label in events]
            csv += ["site3/missing.wav,1,2,tug", f"{name},1,x,tug"]
        else:
            rows = [f"{a}\t{b}\t{label}" for a, b, label in events]
            rows.append(f"{length_s - 0.5}\t{length_s + 1.0}\tgrunt")  # past the file's end
            (tables / f"{stem}.txt").write_text("\n".join(rows) + "\n")
    (tables / "events.csv").write_text("\n".join(csv) + "\n")


def make_inputs(root: Path, *, base: Checkout, head: Checkout) -> list[str]:
    """The input files every run reads, copied once from the base (outside both checkouts);
    returns notes on inputs the head holds differently."""
    notes = []
    (root / "sample").mkdir(parents=True)
    for wav in sorted((base.path / "data" / "sample").glob("*.wav")):
        shutil.copy2(wav, root / "sample" / wav.name)
        other = head.path / "data" / "sample" / wav.name
        if not other.is_file() or other.read_bytes() != wav.read_bytes():
            notes.append(f"data/sample/{wav.name} differs in the head: the base's is used")
    (root / "tug").mkdir()
    shutil.copy2(base.path / "tests/fixtures/audio/hydrophone_excerpt_tug.wav", root / "tug")
    for table in (base.path / "tests/fixtures/annotations").glob("*.txt"):
        shutil.copy2(table, root / "tug" / table.name)
    make_annotated_corpus(root / "annotated")
    return notes


# ---------------------------------------------------------------- running


def child_env(tree: Path, *, hashseed: str | None) -> dict[str, str]:
    """The environment of a child running `tree`'s code: this script's own at its start, its
    PYTHONPATH and, unless None, `hashseed` as its PYTHONHASHSEED."""
    env = {k: v for k, v in _START_ENV.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tree)
    if hashseed is not None:
        env["PYTHONHASHSEED"] = hashseed
    return env


def run_child(
    argv: Sequence[str], *, tree: Path, hashseed: str | None, log: Path
) -> tuple[int, str, float]:
    """Runs ``python argv`` with `tree`'s code; returns (exit code, stdout, seconds)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log, "wb") as err:
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=tree,
            env=child_env(tree, hashseed=hashseed),
            stdout=subprocess.PIPE,
            stderr=err,
            timeout=RUN_TIMEOUT_S,
        )
    return done.returncode, done.stdout.decode(errors="replace"), time.monotonic() - start


def check_imports(checkout: Checkout, *, hashseed: str | None, log: Path) -> None:
    """Fails unless a child with `checkout`'s PYTHONPATH imports our packages from it."""
    code = "import pipelines, replay, runners, transforms as t; print(t.__file__)"
    rc, out, _ = run_child(["-c", code], tree=checkout.path, hashseed=hashseed, log=log)
    if rc or not out.strip().startswith(str(checkout.path)):
        sys.exit(f"error: a child of {checkout.label} imported {out.strip()!r} (log: {log})")


def mask_timings(text: str) -> str:
    for pattern in TIMINGS:
        text = pattern.sub("<timing>", text)
    return text


# ---------------------------------------------------------------- comparing


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fingerprint_without_uuid(data: bytes) -> bytes:
    """A ``fingerprint.pb`` (tensorflow FingerprintDef) without its uuid field, read from the
    protobuf wire format (varint and length-delimited fields only, as the message holds)."""
    pos, kept = 0, []
    while pos < len(data):
        start = pos
        key, pos = _varint(data, pos)
        field, kind = key >> 3, key & 7
        if kind == 0:
            _, pos = _varint(data, pos)
        elif kind == 2:
            length, pos = _varint(data, pos)
            pos += length
        else:
            raise ValueError(f"fingerprint.pb: unexpected wire type {kind}")
        if field != FINGERPRINT_UUID_FIELD:
            kept.append(data[start:pos])
    return b"".join(kept)


def comparable_bytes(path: Path, *, tokens: Sequence[str] = ()) -> tuple[bytes, list[str]]:
    """A file's bytes without its run-specific parts (`RUN_SPECIFIC`) and the keys removed;
    `tokens`: the append directories' names in the dataset."""
    data, removed = path.read_bytes(), []
    if path.name == "fingerprint.pb":
        return fingerprint_without_uuid(data), ["fingerprint.pb uuid"]
    if path.suffix in (".json", ".jsonl") and any(t.encode() in data for t in tokens):
        for token in tokens:
            data = data.replace(token.encode(), token.split("-")[0].encode() + b"-<token>")
        removed.append("append token")
    if path.suffix == ".json" and _CREATED.search(data):
        data = _CREATED.sub(b'"created_utc": "-"', data)
        removed.append("created_utc")
    return data, removed


def tree_digests(root: Path) -> dict[str, tuple[str, str, Path]]:
    """{relative path: (SHA-256 of its comparable bytes, what was removed, the file)} of every
    file; an append directory's token is replaced in the relative path."""
    appends = root / "appends"
    tokens = []
    if appends.is_dir():
        tokens = [p.name for p in appends.iterdir() if _APPEND_TOKEN.fullmatch(p.name)]
    out = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        for token in tokens:
            name = name.replace(token, token.split("-")[0] + "-<token>")
        if path.is_file() and not path.is_symlink():
            data, removed = comparable_bytes(path, tokens=tokens)
            out[name] = (hashlib.sha256(data).hexdigest(), ", ".join(removed), path)
        elif path.is_symlink():
            out[name] = (f"-> {os.readlink(path)}", "", path)
    return out


_FUNCTION_COUNTER = re.compile(r"(__inference_\w+?)_\d+\b")
_CAPTURE_COUNTER = re.compile(r'(key: "_user_specified_name"\s+value \{\s+s: ")\d+(")')


def graph_without_counters(path: Path) -> bytes:
    """A ``saved_model.pb`` with the names TensorFlow takes from its process-wide counter
    made equal: traced functions ``__inference_<name>_<N>`` and numeric captured-input names
    (``_user_specified_name``) lose their N, and each function library is sorted by content
    (it is sorted by name). Imports TensorFlow."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    model = saved_model_pb2.SavedModel()
    model.ParseFromString(path.read_bytes())
    text = text_format.MessageToString(model)
    text = _CAPTURE_COUNTER.sub(r"\1#\2", _FUNCTION_COUNTER.sub(r"\1_#", text))
    model = text_format.Parse(text, saved_model_pb2.SavedModel())
    for graph in model.meta_graphs:
        library = graph.graph_def.library
        functions = sorted(library.function, key=lambda f: f.SerializeToString(deterministic=True))
        del library.function[:]
        library.function.extend(functions)
    return model.SerializeToString(deterministic=True)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two runs' outputs: files compared, those that differ (and of them, the SavedModels
    whose graphs are equal but for TensorFlow's counters, and their fingerprints), removals
    applied, stdout equal."""

    files: int
    differing: tuple[str, ...]
    names_only: tuple[str, ...]
    removed: tuple[str, ...]
    stdout_equal: bool

    @property
    def identical(self) -> bool:
        return not self.differing and self.stdout_equal

    @property
    def verdict(self) -> str:
        """yes (every byte), names only (TensorFlow's counters in SavedModels), or **no**."""
        if self.identical:
            return "yes"
        if self.stdout_equal and set(self.differing) <= set(self.names_only):
            return "names only"
        return "**no**"


def compare(a: Path, b: Path, *, stdout_a: str, stdout_b: str) -> Comparison:
    """Compares the trees `a` and `b` file by file (and the two standard outputs)."""
    da, db = tree_digests(a), tree_digests(b)
    missing = ("absent", "", None)
    names = da.keys() | db.keys()
    differing = sorted(n for n in names if da.get(n, missing)[0] != db.get(n, missing)[0])
    names_only = [
        n
        for n in differing
        if n.endswith("saved_model.pb")
        and n in da
        and n in db
        and graph_without_counters(da[n][2]) == graph_without_counters(db[n][2])
    ]
    # a fingerprint's hashes follow its saved_model.pb
    names_only += [
        n
        for n in differing
        if n.endswith("fingerprint.pb")
        and n.replace("fingerprint.pb", "saved_model.pb") in names_only
    ]
    removed = sorted({f"{name}: {r}" for name, (_, r, _) in da.items() if r})
    return Comparison(
        len(names),
        tuple(differing),
        tuple(names_only),
        tuple(removed),
        mask_timings(stdout_a) == mask_timings(stdout_b),
    )


# ---------------------------------------------------------------- replay (child side)


ReplaySet = tuple[str, str | None, Callable[[], dict[str, Any]], int | None]


def replay_sets(data: dict[str, str]) -> list[ReplaySet]:
    """(name, dataset path, a function giving the `replay_dataset` keywords, elements taken or
    None: all) of each option set; only keywords and values that both revisions compared
    accept. The path is None when its case was not recorded."""
    import tensorflow as tf

    from replay import GlobalOrder, ReadConfig

    def reader_func(datasets: tf.data.Dataset) -> tf.data.Dataset:
        datasets = datasets.shuffle(1000, seed=3)
        return datasets.interleave(lambda d: d, cycle_length=2, num_parallel_calls=2)

    def context(pipelines: int, index: int) -> tf.distribute.InputContext:
        return tf.distribute.InputContext(
            num_input_pipelines=pipelines, input_pipeline_id=index, num_replicas_in_sync=pipelines
        )

    sample, cut, append = data.get("sample"), data.get("sample_cut"), data.get("sample_append")
    annotated, tug, clips = data.get("annotated"), data.get("tug"), data.get("clips_2000_splits")
    shuffled = {"shuffle_buffer": 8, "seed": 1}
    balanced = {
        "features": ["log_mel_norm", "labels"],
        "balance": "class",
        "seed": 0,
        "shuffle_buffer": 16,
        "batch_size": 4,
    }
    interleave = {"cycle_length": 2, "block_length": 3, "num_parallel_reads": 2}
    sets: list[ReplaySet] = [
        ("sample: defaults", sample, dict, None),
        (
            "sample: batch 4, drop_remainder",
            sample,
            lambda: {"batch_size": 4, "drop_remainder": True},
            None,
        ),
        ("sample: shuffle_buffer 8, seed 1", sample, lambda: shuffled, None),
        (
            "sample: shuffle 8, seed 1, repeat (3 epochs)",
            sample,
            lambda: {**shuffled, "repeat": True},
            54,
        ),
        (
            "sample: the same, reshuffle_each_iteration False",
            sample,
            lambda: {**shuffled, "repeat": True, "reshuffle_each_iteration": False},
            54,
        ),
        (
            "sample: ReadConfig(seed 0, cycle 4), batch 4",
            sample,
            lambda: {"read_config": ReadConfig(seed=0, cycle_length=4), "batch_size": 4},
            None,
        ),
        (
            "sample: features signal, log_mel_norm",
            sample,
            lambda: {"features": ["signal", "log_mel_norm"]},
            None,
        ),
        ("cut: defaults (2 splits x 3 shards)", cut, dict, None),
        (
            "cut: cycle 2, block 3, 2 parallel reads, deterministic",
            cut,
            lambda: {**interleave, "deterministic": True},
            None,
        ),
        (
            "cut: cycle 1, 1 parallel read",
            cut,
            lambda: {"cycle_length": 1, "num_parallel_reads": 1},
            None,
        ),
        ("cut: 4 parallel reads, seed 2", cut, lambda: {"num_parallel_reads": 4, "seed": 2}, None),
        ("cut: shuffle_shards, seed 5", cut, lambda: {"shuffle_shards": True, "seed": 5}, None),
        (
            "cut: reader_func (shard shuffle + interleave)",
            cut,
            lambda: {"reader_func": reader_func},
            None,
        ),
        (
            "cut: split test, features signal, class",
            cut,
            lambda: {"split": "test", "features": ["signal", "class"]},
            None,
        ),
        (
            "cut: split [test, train], batch 5",
            cut,
            lambda: {"split": ["test", "train"], "batch_size": 5},
            None,
        ),
        (
            "cut: input_context 2 pipelines, id 0",
            cut,
            lambda: {"input_context": context(2, 0)},
            None,
        ),
        (
            "cut: input_context 2 pipelines, id 1",
            cut,
            lambda: {"input_context": context(2, 1)},
            None,
        ),
        (
            "cut: input_context 3 pipelines, id 2",
            cut,
            lambda: {"input_context": context(3, 2)},
            None,
        ),
        (
            "cut: GlobalOrder(seed 3), split train",
            cut,
            lambda: {"order": GlobalOrder(seed=3), "split": "train"},
            None,
        ),
        (
            "cut: GlobalOrder(seed 3, start 8, G 4), 2 pipelines id 1, repeat, batch 2",
            cut,
            lambda: {
                "order": GlobalOrder(seed=3, start=8, global_batch_size=4),
                "input_context": context(2, 1),
                "repeat": True,
                "batch_size": 2,
            },
            30,
        ),
        ("sample_append: version 1", append, lambda: {"version": 1}, None),
        (
            "sample_append: latest, shuffle 4, seed 9",
            append,
            lambda: {"shuffle_buffer": 4, "seed": 9},
            None,
        ),
        ("annotated: defaults", annotated, dict, None),
        ("annotated: balance class, seed 0, shuffle 16, batch 4", annotated, lambda: balanced, 40),
        ("tug: defaults", tug, dict, None),
        (
            "clips 2000: split validation, shuffle 64, seed 0",
            clips,
            lambda: {"split": "validation", "shuffle_buffer": 64, "seed": 0},
            None,
        ),
        (
            "clips 2000: split train, cycle 4, block 16, batch 64",
            clips,
            lambda: {"split": "train", "cycle_length": 4, "block_length": 16, "batch_size": 64},
            None,
        ),
    ]
    # read without a seed, tf.data's deterministic option is off: the same sets with it on
    unseeded = {
        "sample: batch 4, drop_remainder",
        "cut: cycle 1, 1 parallel read",
        "cut: split [test, train], batch 5",
    }
    out: list[ReplaySet] = []
    for name, path, keywords, take in sets:
        out.append((name, path, keywords, take))
        if name in unseeded:
            fixed = functools.partial(_with_deterministic, keywords)
            out.append((f"{name}, deterministic", path, fixed, take))
    return out


def _with_deterministic(keywords: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return {**keywords(), "deterministic": True}


def element_digest(element: dict[str, Any]) -> str:
    """SHA-256 (first 16 hex digits) of every key's name, dtype, shape and bytes."""
    import numpy as np

    digest = hashlib.sha256()
    for key in sorted(element):
        value = np.asarray(element[key].numpy())
        digest.update(f"{key}|{value.dtype}|{value.shape}|".encode())
        if value.dtype == object:
            for item in value.ravel():
                digest.update(len(item).to_bytes(8, "little") + item)
        else:
            digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()[:16]


def replay_child(data: dict[str, str], out: Path) -> None:
    """Each option set read twice with this process's `replay`; digests written to `out`."""
    import replay
    from replay import replay_dataset

    results = {"replay": replay.__file__}
    for name, path, keywords, take in replay_sets(data):
        if path is None:
            continue
        passes = []
        try:
            for _ in range(2):
                ds = replay_dataset(path, **keywords())
                if take is not None:
                    ds = ds.take(take)
                passes.append([element_digest(e) for e in ds])
            results[name] = {"digests": passes[0], "stable": passes[0] == passes[1]}
        except Exception as e:  # noqa: BLE001 - reported in the table, not raised
            results[name] = {"error": f"{type(e).__name__}: {e}"}
    out.write_text(json.dumps(results))


# ---------------------------------------------------------------- the parts


@dataclasses.dataclass
class Runner:
    """The state of one comparison: checkouts, directories, rows of the tables."""

    base: Checkout
    head: Checkout
    work: Path
    hashseed: str | None
    control: int
    keep: bool
    rows: list[tuple[str, ...]] = dataclasses.field(default_factory=list)
    seconds: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    @property
    def out(self) -> Path:
        return self.work / "out"

    def fill(self, argv: Sequence[str], *, out: Path) -> list[str]:
        values = {"out": str(out), "in": str(self.work / "inputs"), "clips": CLIPS_DIR}
        filled = []
        for arg in argv:
            for name in re.findall(r"\{data:(\w+)\}", arg):
                arg = arg.replace(f"{{data:{name}}}", str(self.work / "runs" / name / "base"))
            filled.append(arg.format(**values) if "{" in arg else arg)
        return filled

    def record_once(self, case: RecordCase, checkout: Checkout, run: str) -> tuple[Path, str, str]:
        """Runs `case` with `checkout` into the shared output path, then moves it to
        ``runs/<case>/<run>``; returns that directory, the stdout of its commands and their
        exit codes."""
        out = self.out / case.name
        shutil.rmtree(out, ignore_errors=True)
        stdout, exits = "", []
        for i, command in enumerate(case.commands):
            log = self.work / "logs" / f"{case.name}.{run}.{i}.log"
            argv = self.fill(command, out=out)
            rc, text, seconds = run_child(argv, tree=checkout.path, hashseed=self.hashseed, log=log)
            self.seconds.setdefault(f"{case.name} {run.rstrip('0123456789')}", []).append(seconds)
            stdout += f"[exit {rc}] {text}"
            exits.append(str(rc))
            if rc:
                print(f"  {case.name} {run}: exit {rc} (log {log})", flush=True)
        dest = self.work / "runs" / case.name / run
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            shutil.move(out, dest)
        else:
            dest.mkdir()
        return dest, stdout, ",".join(exits)

    def record_case(self, case: RecordCase) -> None:
        base, base_stdout, base_exits = self.record_once(case, self.base, "base")
        runs = [(f"control{i + 1}", self.base) for i in range(self.control)]
        for run, checkout in [*runs, ("head", self.head)]:
            other, stdout, exits = self.record_once(case, checkout, run)
            result = compare(base, other, stdout_a=base_stdout, stdout_b=stdout)
            self.add_row("record", case.name, f"base / {run}", f"{base_exits} / {exits}", result)
            if case.big and not self.keep:
                shutil.rmtree(other)
        if not case.replayed and not self.keep:
            shutil.rmtree(base)
        print(f"  stdout ({case.name}, base): {mask_timings(base_stdout).strip()}", flush=True)

    def add_row(self, part: str, name: str, runs: str, exits: str, result: Comparison) -> None:
        differing = ", ".join(result.differing[:6]) + (" ..." if len(result.differing) > 6 else "")
        failed = set(exits) - set("0,/ ")
        row = (
            part,
            name,
            runs,
            exits,
            str(result.files),
            "**no**" if failed else result.verdict,
            differing or "-",
            "yes" if result.stdout_equal else "**no**",
        )
        self.rows.append(row)
        print("  " + " | ".join(row), flush=True)
        if result.removed:
            print(f"    removed before hashing: {'; '.join(result.removed)}", flush=True)

    def tool_case(self, case: ToolCase) -> None:
        outputs = []
        for run, checkout in (("base", self.base), ("head", self.head)):
            out = self.out / "tool"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            log = self.work / "logs" / f"tool.{case.name.replace(' ', '_')}.{run}.log"
            argv = self.fill(case.argv, out=out)
            rc, text, _ = run_child(argv, tree=checkout.path, hashseed=self.hashseed, log=log)
            dest = self.work / "tools" / case.name.replace(" ", "_") / run
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(out, dest)
            outputs.append((dest, f"[exit {rc}] {text}", str(rc)))
        (a, sa, ra), (b, sb, rb) = outputs
        result = compare(a, b, stdout_a=sa, stdout_b=sb)
        self.add_row("tool", case.name, "base / head", f"{ra} / {rb}", result)

    def replay(self, names: Sequence[str]) -> list[tuple[str, ...]]:
        data = {n: str(self.work / "runs" / n / "base") for n in names}
        data = {n: p for n, p in data.items() if Path(p, "manifest.json").is_file()}
        results = {}
        for run, checkout in (("base", self.base), ("head", self.head)):
            out = self.work / f"replay.{run}.json"
            argv = [
                str(Path(__file__).resolve()),
                "--replay_child",
                json.dumps(data),
                "--child_out",
                str(out),
            ]
            log = self.work / "logs" / f"replay.{run}.log"
            rc, _, seconds = run_child(argv, tree=checkout.path, hashseed=self.hashseed, log=log)
            if rc:
                sys.exit(f"error: the replay child of {checkout.label} failed (log {log})")
            results[run] = json.loads(out.read_text())
            print(f"  replay with {results[run].pop('replay')}: {seconds:.0f} s", flush=True)
        table = []
        for name, base in results["base"].items():
            head = results["head"].get(name, {"error": "not run"})
            if "error" in base or "error" in head:
                table.append((name, "-", "error", base.get("error", "") + head.get("error", "")))
                continue
            a, b = base["digests"], head["digests"]
            stable = base["stable"] and head["stable"]
            if a == b:
                same = "yes"
            elif not stable and sorted(a) == sorted(b):
                same = "same elements"  # in an order that varies within one checkout too
            else:
                same = "**no**"
            note = "" if a == b else _first_difference(a, b)
            unstable = [run for run in ("base", "head") if not results[run][name]["stable"]]
            passes = "no: " + ", ".join(unstable) if unstable else "yes"
            table.append((name, str(len(a)), same, passes + note))
        return table


def _first_difference(a: list[str], b: list[str]) -> str:
    pairs = enumerate(zip(a, b, strict=False))
    index = next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))
    same_set = sorted(a) == sorted(b)
    return f"; first at element {index} of {len(a)} / {len(b)}; same elements: {same_set}"


def _uptime() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main", help="git revision or work tree path")
    parser.add_argument("--head", default=str(ROOT), help="git revision or work tree path")
    parser.add_argument("--parts", default="record,tools,replay", help="comma list of parts")
    parser.add_argument("--cases", help="comma list of record cases (default: all)")
    parser.add_argument("--skip_big", action="store_true", help="without the clips cases")
    parser.add_argument("--control", type=int, default=0, help="extra base runs per case")
    parser.add_argument("--hashseed", help="children's PYTHONHASHSEED (default: inherited)")
    parser.add_argument("--work", help="work directory (default: a new one under the bench dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--replay_child", help=argparse.SUPPRESS)
    parser.add_argument("--child_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.replay_child:
        replay_child(json.loads(args.replay_child), Path(args.child_out))
        return 0
    # Not at the top: the replay child runs this file with another checkout's PYTHONPATH.
    from benchmarks.table import table

    parts = set(args.parts.split(","))
    cases = [c for c in RECORD_CASES if not (args.skip_big and c.big)]
    if args.cases:
        wanted = args.cases.split(",")
        unknown = set(wanted) - {c.name for c in RECORD_CASES}
        if unknown:
            parser.error(f"unknown cases: {sorted(unknown)}")
        cases = [c for c in RECORD_CASES if c.name in wanted]
    if any(c.big for c in cases) and not Path(CLIPS_DIR).is_dir():
        parser.error(f"{CLIPS_DIR} missing: `python -m benchmarks clips` makes it, or --skip_big")
    Path(BENCH_DIR).mkdir(parents=True, exist_ok=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="byte-identity-", dir=BENCH_DIR)).resolve()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(f"work dir {work}; started {started}; load {_uptime()}", flush=True)
    try:
        base = make_checkout(args.base, dest=work / "base")
        head = make_checkout(args.head, dest=work / "head")
        seed = args.hashseed or os.environ.get("PYTHONHASHSEED", "random")
        print(f"base: {base.label}\nhead: {head.label}\nPYTHONHASHSEED: {seed}")
        for note in make_inputs(work / "inputs", base=base, head=head):
            print(f"note: {note}")
        for checkout, run in ((base, "base"), (head, "head")):
            check_imports(checkout, hashseed=args.hashseed, log=work / "logs" / f"imports.{run}")
        runner = Runner(base, head, work, args.hashseed, args.control, args.keep)
        if "record" in parts:
            for case in cases:
                print(f"record {case.name} (load {_uptime()})", flush=True)
                runner.record_case(case)
        if "tools" in parts:
            recorded = {c.name for c in cases}
            for tool in TOOL_CASES:
                needed = set(re.findall(r"\{data:(\w+)\}", " ".join(tool.argv)))
                if needed <= recorded:
                    runner.tool_case(tool)
        replay_rows = []
        if "replay" in parts:
            print(f"replay (load {_uptime()})", flush=True)
            replay_rows = runner.replay([c.name for c in cases])
        print(f"\nbase: {base.label}; head: {head.label}; PYTHONHASHSEED {seed}")
        print(
            f"from {started} to {time.strftime('%H:%M:%S UTC', time.gmtime())}, load {_uptime()}\n"
        )
        header = ("part", "case", "runs", "exit", "files", "identical", "differing", "stdout equal")
        print(table(header, runner.rows, align="l" * len(header)))
        if replay_rows:
            print()
            header = ("option set", "elements", "identical", "2 passes equal")
            print(table(header, replay_rows, align="l" * len(header)))
        print("\nrun-specific bytes removed before hashing:")
        for key, why in RUN_SPECIFIC.items():
            print(f"- {key}: {why}")
        print("\nseconds per command (record):")
        for name, values in runner.seconds.items():
            print(f"  {name}: " + ", ".join(f"{v:.1f}" for v in values))
        failed = [r for r in runner.rows if r[5] == "**no**" and r[2].endswith("head")]
        failed += [r for r in replay_rows if r[2] not in ("yes", "same elements")]
        return 1 if failed else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")


if __name__ == "__main__":
    sys.exit(main())
