"""Format version 3: the source tables (files.jsonl, errors.jsonl) live beside the manifest.

- A real record run writes version 3: the tables hold exactly the entries version 2's manifest
  held (checked against the WAV files written here), manifest.json holds no per-file list, and
  inspect, verify and load_transform work through the lazily read tables.
- A reader starts in constant time: `load_info` and `replay_dataset` never open a table (an
  audit hook watches every open), whether it has 100 lines or 1,000,000.
- A crafted table (bad JSON, wrong digest or size, missing, a bad field, an overlong line, a
  count that disagrees, a symlink out) is refused with a `ManifestError` naming the table file
  when `DatasetInfo.files` / ``.errors`` is read, by `verify_dataset` and by
  ``python -m pipelines.verify``; `load_info` still succeeds (it does not read the table).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from pipelines import inspect as inspect_cli
from pipelines import verify as verify_cli
from replay import ManifestError, load_info, load_transform, replay_dataset, verify_dataset
from replay import format as fmt
from tests.support.record_helpers import raw_manifest, record
from tests.support.replay_fixtures import write_dataset, write_manifest, write_tables

SAMPLE_RATE = 16000
LABELS = ("cat", "dog", "owl")


class _Opens:
    """An audit hook recording every path Python opens while armed (one hook per process)."""

    paths: list[str] | None = None
    installed = False

    @classmethod
    def watch(cls) -> list[str]:
        if not cls.installed:
            sys.addaudithook(cls._hook)
            cls.installed = True
        cls.paths = []
        return cls.paths

    @classmethod
    def stop(cls) -> None:
        cls.paths = None

    @staticmethod
    def _hook(event: str, args: tuple) -> None:
        if _Opens.paths is not None and event == "open" and args and isinstance(args[0], str):
            _Opens.paths.append(os.path.realpath(args[0]))


# --- a real record run ------------------------------------------------------------------------


def _write_wavs(directory: Path) -> dict[str, np.ndarray]:
    directory.mkdir(parents=True)
    rng = np.random.default_rng(7)
    out = {}
    for i, label in enumerate(LABELS):
        frames = 2048 + 1024 * i
        tone = 3000 * np.sin(2 * np.pi * (300 + 50 * i) * np.arange(frames) / SAMPLE_RATE)
        samples = np.clip(np.round(tone + rng.normal(0, 500, frames)), -32768, 32767)
        path = directory / f"{i}_{label}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SAMPLE_RATE)
            w.writeframes(samples.astype("<i2").tobytes())
        out[str(path)] = samples
    (directory / "9_bad.wav").write_bytes(b"not a wav file at all")
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("format_v3")
    wavs = _write_wavs(root / "wav")
    out = root / "out"
    summary = record(
        str(root / "wav" / "*.wav"), out, "--win_len", "1024", "--features", "log_mel",
        "--num_mel_bins", "8", "--frame_length", "256", "--frame_step", "256",
        "--fft_length", "256",
    )  # fmt: skip
    return {"out": out, "wavs": wavs, "summary": summary, "bad": str(root / "wav" / "9_bad.wav")}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_recorded_dataset_is_v3_with_the_lists_in_tables(run):
    out, summary = run["out"], run["summary"]
    manifest = raw_manifest(out)
    assert manifest["format_version"] == fmt.FORMAT_VERSION >= 3
    assert not {"files", "errors"} & set(manifest)  # no per-file list in the manifest
    files, errors = _lines(out / "files.jsonl"), _lines(out / "errors.jsonl")
    assert (manifest["num_files"], manifest["num_errors"]) == (len(files), len(errors)) == (3, 1)
    (commit,) = manifest["commits"]  # format version 5: the tables' digests in its one commit
    assert (commit["num_files"], commit["num_errors"]) == (3, 1) and "tables" not in manifest
    for key, table in (("files", "files.jsonl"), ("errors", "errors.jsonl")):
        data = (out / table).read_bytes()
        assert commit["tables"][key] == {
            "num_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        assert data.isascii() and data.endswith(b"\n") and b"\n\n" not in data
    # The entries version 2's manifest held, by index (files) and path (errors), checked
    # against the WAV files written above.
    assert [f["index"] for f in files] == [0, 1, 2]
    assert [f["path"] for f in files] == sorted(run["wavs"])
    for entry in files:
        samples = run["wavs"][entry["path"]]
        assert entry["label"] == Path(entry["path"]).stem.split("_")[1]
        assert (entry["num_frames"], entry["sample_rate"]) == (len(samples), SAMPLE_RATE)
        assert (entry["num_channels"], entry["subtype"]) == (1, "PCM_16")
        assert entry["full_scale"] == 32768
        assert entry["num_windows"] == len(samples) // 1024
    assert [e["path"] for e in errors] == [run["bad"]] and errors[0]["reason"]
    # The result lists the errors entry for entry, and counts the files without reading them.
    assert list(summary.errors) == errors
    assert summary.num_files == len(files) == manifest["num_files"]
    assert (summary.num_files, summary.num_failed) == (3, 1)
    # The reader gives the same entries through DatasetInfo.
    info = load_info(out)
    assert (info.num_files, info.num_errors) == (3, 1)
    assert [dict(f) for f in info.files] == files and [dict(e) for e in info.errors] == errors


def test_inspect_verify_and_load_transform_work_on_v3(run, capsys):
    out = run["out"]
    assert inspect_cli.run([str(out)]) == 0
    assert verify_cli.run([str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"OK {out}: ")
    assert verify_dataset(out).num_files == 3
    transform = load_transform(out)  # reads full_scale from files.jsonl
    assert transform.full_scale == 32768.0


# --- constant-time start -----------------------------------------------------------------------


def _synthetic(directory: Path, num_files: int) -> Path:
    """A hand-made v3 dataset (one small shard) whose files.jsonl has `num_files` lines."""
    write_dataset(directory, num_examples_per_shard=(4,), with_features=False, format_version=4)
    lines = b"".join(
        b'{"path":"/data/%d.wav","index":%d,"num_windows":1}\n' % (i, i) for i in range(num_files)
    )
    fields = write_tables(directory, files=[], errors=[], lines={"files": lines})
    fields["num_files"] = num_files
    manifest = raw_manifest(directory)
    manifest.update(fields)
    write_manifest(directory, manifest)
    return directory


def _start(directory: Path) -> tuple[float, float, list[str]]:
    """Seconds of load_info and of building replay_dataset, and what Python opened meanwhile."""
    opened = _Opens.watch()
    try:
        start = time.perf_counter()
        load_info(directory)
        middle = time.perf_counter()
        replay_dataset(directory)
        end = time.perf_counter()
    finally:
        _Opens.stop()
    return middle - start, end - middle, opened


@pytest.mark.slow  # tables of 1,000,000 files written and read: ~11 s
def test_reader_starts_without_opening_the_tables(tmp_path):
    small = _synthetic(tmp_path / "small", 100)
    big = _synthetic(tmp_path / "big", 1_000_000)
    assert (big / "files.jsonl").stat().st_size > 40_000_000
    _start(small)  # warm: TensorFlow's first dataset ops
    times = {}
    for name, directory in (("100", small), ("1,000,000", big)):
        info_s, dataset_s, opened = _start(directory)
        times[name] = (info_s, dataset_s)
        tables = {os.path.realpath(directory / t) for t in (fmt.FILES_TABLE, fmt.ERRORS_TABLE)}
        assert not tables & set(opened), opened
        assert os.path.realpath(directory / fmt.MANIFEST_FILENAME) in opened  # the hook works
        print(f"{name} files: load_info {info_s * 1e3:.1f} ms, replay_dataset {dataset_s:.3f} s")
    (small_info, small_ds), (big_info, big_ds) = times["100"], times["1,000,000"]
    assert big_info < 3 * small_info + 0.5 and big_ds < 3 * small_ds + 0.5, times
    info = load_info(big)
    assert info.num_files == 1_000_000  # counted from the manifest
    start = time.perf_counter()
    assert len(info.files) == 1_000_000 and info.files[-1]["index"] == 999_999
    print(f"1,000,000 files: first info.files {time.perf_counter() - start:.1f} s")


# --- crafted tables ----------------------------------------------------------------------------


def _rewrite(lines: dict[str, bytes], **manifest_fields):
    """An edit: the tables' raw lines (digests in the manifest recomputed to match)."""

    def edit(directory: Path, expected: dict) -> None:
        fields = write_tables(
            directory, files=expected["files"], errors=expected["errors"], lines=lines
        )
        fields.update(manifest_fields)
        manifest = raw_manifest(directory)
        manifest.update(fields)
        write_manifest(directory, manifest)

    return edit


def _tamper(directory: Path, expected: dict) -> None:
    """Same size, other bytes, manifest unchanged: the digest disagrees."""
    path = directory / "files.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"index":0', b'"index":9'))


def _truncate(directory: Path, expected: dict) -> None:
    path = directory / "files.jsonl"
    path.write_bytes(path.read_bytes()[:-10])


def _delete(directory: Path, expected: dict) -> None:
    (directory / "files.jsonl").unlink()


def _symlink_out(directory: Path, expected: dict) -> None:
    outside = directory.parent / "elsewhere.jsonl"
    os.replace(directory / "files.jsonl", outside)
    (directory / "files.jsonl").symlink_to(outside)


def _fifo(directory: Path, expected: dict) -> None:
    """A FIFO where files.jsonl was: opening it would block forever (no writer)."""
    (directory / "files.jsonl").unlink()
    os.mkfifo(directory / "files.jsonl")


def _directory(directory: Path, expected: dict) -> None:
    (directory / "errors.jsonl").unlink()
    (directory / "errors.jsonl").mkdir()


def _good_lines(expected: dict) -> bytes:
    return b"".join(json.dumps(f).encode() + b"\n" for f in expected["files"])


def _bad_json(directory: Path, expected: dict) -> None:
    lines = _good_lines(expected).splitlines(keepends=True)
    lines[1] = b'{"path": "/data/x.wav", "index": \n'
    _rewrite({"files": b"".join(lines)})(directory, expected)


def _bad_field(directory: Path, expected: dict) -> None:
    lines = _good_lines(expected).splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"index": 2', b'"index": "2"')
    _rewrite({"files": b"".join(lines)})(directory, expected)


def _not_object(directory: Path, expected: dict) -> None:
    _rewrite({"errors": b'["/data/bad.wav", "reason"]\n'})(directory, expected)


def _overlong(directory: Path, expected: dict) -> None:
    long = json.dumps({"path": "x" * fmt.MAX_TABLE_LINE_BYTES, "index": 0}).encode() + b"\n"
    _rewrite({"files": long + _good_lines(expected)})(directory, expected)


def _count(directory: Path, expected: dict) -> None:
    _rewrite({}, num_files=len(expected["files"]) - 1)(directory, expected)


def _no_newline(directory: Path, expected: dict) -> None:
    _rewrite({"files": _good_lines(expected)[:-1]})(directory, expected)


CRAFTED = {
    "bad_json": (_bad_json, "files.jsonl: line 2: not JSON"),
    "bad_field": (_bad_field, "files.jsonl: line 3: index: expected an integer, got string '2'"),
    "not_an_object": (_not_object, "errors.jsonl: line 1: expected an object, got list"),
    "digest": (_tamper, "files.jsonl: table's SHA-256 is"),
    "size": (_truncate, "files.jsonl: table is"),
    "missing": (_delete, "files.jsonl: table is missing but the manifest lists entries"),
    "symlink_out": (_symlink_out, "files.jsonl: leads outside the dataset directory"),
    "fifo": (_fifo, "files.jsonl: table is not a regular file"),
    "directory": (_directory, "errors.jsonl: table is not a regular file"),
    "overlong_line": (_overlong, f"files.jsonl: line 1: longer than {fmt.MAX_TABLE_LINE_BYTES}"),
    "count": (_count, "files.jsonl: table holds 15 entries but the manifest's num_files is 14"),
    "no_newline": (_no_newline, "files.jsonl: line 15: no newline at the end"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_table_is_refused_naming_it(tmp_path, capsys, case):
    edit, message = CRAFTED[case]
    directory = tmp_path / "dataset"
    expected = write_dataset(directory, with_features=False, format_version=4)
    edit(directory, expected)
    info = load_info(directory)  # the manifest alone: the table is not read
    table = "errors" if "errors.jsonl" in message else "files"
    with pytest.raises(ManifestError) as e:
        getattr(info, table)
    assert str(e.value).startswith(f"{directory}/{message}"), str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(ManifestError, match=message.split(":")[0]):
        verify_dataset(directory)
    assert verify_cli.run([str(directory)]) == 1
    assert capsys.readouterr().out.strip() == f"FAILED {e.value}"
    assert inspect_cli.run([str(directory)]) == 2  # its summary counts files by label


def test_empty_tables_may_be_absent(tmp_path):
    directory = tmp_path / "dataset"
    expected = write_dataset(directory, with_features=False, format_version=4)
    _rewrite({"files": b"", "errors": b""}, num_files=0, num_errors=0)(directory, expected)
    (directory / "files.jsonl").unlink()  # an empty table may be missing; errors.jsonl is empty
    info = load_info(directory)
    assert info.files == () and info.errors == () and info.num_files == 0
    verify_dataset(directory)


def test_an_empty_table_that_is_a_fifo_is_refused_unopened(tmp_path):
    """A FIFO where the manifest says the table is empty (0 bytes, no entries): its size
    agrees, so only the regular-file check keeps the reader from opening it and blocking for
    ever (no writer). The read runs in a thread: were it to block, the test opens the FIFO's
    other end after a guard of minutes (never reached when the table is refused) and fails."""
    import threading

    directory = tmp_path / "dataset"
    expected = write_dataset(directory, with_features=False, format_version=4)
    _rewrite({"files": b""}, num_files=0)(directory, expected)
    fifo = directory / "files.jsonl"
    fifo.unlink()
    os.mkfifo(fifo)
    info = load_info(directory)
    outcome: list = []

    def read() -> None:
        try:
            outcome.append(info.files)
        except ManifestError as e:
            outcome.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=120)
    if reader.is_alive():  # blocked in open(): give it a writer that closes at once, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=120)
        pytest.fail(f"{fifo}: the FIFO was opened (the reader blocked); then read {outcome}")
    (error,) = outcome
    assert isinstance(error, ManifestError), error
    assert str(error) == f"{fifo}: table is not a regular file"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_files", "15", "num_files: expected an integer"),
        ("num_errors", None, "num_errors: expected an integer"),
        ("tables", {"files": {"num_bytes": 100, "sha256": "0" * 64}}, "tables.errors: missing"),
        ("files", [], "manifest holds no files list"),
    ],
)
def test_v3_manifest_fields_are_checked_by_load_info(tmp_path, field, value, message):
    directory = tmp_path / "dataset"
    write_dataset(directory, with_features=False, format_version=4)
    manifest = raw_manifest(directory)
    manifest[field] = value
    write_manifest(directory, manifest)
    with pytest.raises(ManifestError, match=message):
        load_info(directory)


def test_v3_table_digest_and_size_bounds_are_checked_by_load_info(tmp_path):
    directory = tmp_path / "dataset"
    write_dataset(directory, with_features=False, format_version=4)
    manifest = raw_manifest(directory)
    manifest["tables"]["files"]["sha256"] = "ABC"
    write_manifest(directory, manifest)
    with pytest.raises(ManifestError, match="tables.files.sha256: 'ABC' is not 64 lowercase"):
        load_info(directory)
    manifest["tables"]["files"]["sha256"] = "0" * 64
    manifest["tables"]["files"]["num_bytes"] = 15 * fmt.MAX_TABLE_LINE_BYTES + 1
    write_manifest(directory, manifest)
    with pytest.raises(ManifestError, match="tables.files.num_bytes: .* cannot hold num_files"):
        load_info(directory)
