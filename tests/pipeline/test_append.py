"""``--append`` (`pipelines.append`): a finished dataset grows by the inputs it does not hold.

Real record runs (DirectRunner) on real WAV files; the records are read back with plain tf.data
(`tests.support.record_helpers`), not with `replay`. Day 1 recorded with `OPTIONS` is made once
for the module (`day1`, read-only); a test appends to its own copy, and writes its later days in
its own folder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pipelines import append, append_commit
from pipelines.config import RecordConfig, UsageError
from pipelines.job import run_job
from pipelines.record import summary_line
from tests.support import wavgen
from tests.support.record_helpers import cli_error, raw_manifest, read_records
from tests.support.record_helpers import record as run_record
from tests.support.reliability import read_only, tree_state, writable_copy

WIN = 2000
RATE = 8000
OPTIONS = ("--win_len", str(WIN), "--features", "log_mel", "--num_mel_bins", "16")


def write_day(root: Path, day: int, labels: tuple[str, ...] = ("bird", "rain")) -> Path:
    """Writes a day's folder of files, one per label, 1-3 windows each (16-bit, 8 kHz)."""
    folder = root / f"day{day:02d}"
    folder.mkdir(parents=True)
    for i, label in enumerate(labels):
        frames = (1 + (day + i) % 3) * WIN + 37
        samples = wavgen.synth(frames, seed=100 * day + i)
        wavgen.write_wav(
            folder / f"d{day}f{i}_{label}.wav", samples, sample_rate=RATE, subtype="PCM_16"
        )
    return folder


def digests(out: Path) -> dict[str, str]:
    """{relative path: SHA-256} of every file of a dataset directory."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def element_key(e: dict) -> tuple:
    """An element as the multiset comparison sees it: everything but the file's id (`index`:
    an append numbers its files after the dataset's)."""
    return (
        e["filepath"],
        int(e["win_start_idx"]),
        e["class"],
        int(e["target"]),
        e["signal"].tobytes(),
        e["log_mel"].tobytes(),
    )


def appended(pattern: str, out: Path, *extra: str):
    return run_record(pattern, out, "--append", *extra)


@pytest.fixture(scope="module")
def day1(tmp_path_factory) -> Iterator[tuple[Path, Path]]:
    """(day 1's folder, its dataset recorded with `OPTIONS`), both read-only: the dataset's
    tables name the folder's absolute paths, so its copies append with it in place. At the
    module's end both are checked unchanged."""
    root = tmp_path_factory.mktemp("append_day1")
    folder = write_day(root / "corpus", 1)
    run_record(f"{root}/corpus/*/*.wav", root / "base", *OPTIONS)
    shared = (read_only(folder), read_only(root / "base"))
    states = [tree_state(path) for path in shared]
    yield shared
    assert [tree_state(path) for path in shared] == states, "a test changed day 1's files"


def union(day1_folder: Path, corpus: Path) -> str:
    """The pattern of day 1's files and of every day folder under `corpus`."""
    return f"{{{day1_folder},{corpus}/*}}/*.wav"


@pytest.mark.slow
def test_an_append_records_only_the_new_files_and_rewrites_nothing(day1, tmp_path):
    corpus, scratch = tmp_path / "corpus", tmp_path / "scratch"
    out = writable_copy(day1[1], tmp_path / "out")
    before = digests(out)
    v1 = (out / "manifest.json").read_bytes()
    write_day(corpus, 2)
    pattern = union(day1[0], corpus)  # day 1's files, which the dataset holds, and day 2's

    result = appended(pattern, out)

    assert (result.num_files, result.dataset_version, result.output_dir) == (2, 2, str(out))
    assert summary_line(result).endswith(f"-> {out} (dataset version 2)")
    after = digests(out)
    kept = {k: v for k, v in after.items() if k in before and k != "manifest.json"}
    assert kept == {k: v for k, v in before.items() if k != "manifest.json"}
    assert (out / "manifests" / "1.json").read_bytes() == v1
    assert (out / "manifests" / "2.json").read_bytes() == (out / "manifest.json").read_bytes()
    manifest = raw_manifest(out)
    assert manifest["dataset_version"] == 2
    assert [c["version"] for c in manifest["commits"]] == [1, 2]
    data_dir = manifest["commits"][1]["dir"]
    assert data_dir.startswith("appends/v2-")
    new = sorted(str(p.relative_to(out)) for p in (out / data_dir).rglob("*") if p.is_file())
    assert new == [  # the records, their offsets and tables: no transform of their own
        f"{data_dir}/audiorecords.tfrecord-00000-of-00001",
        f"{data_dir}/errors.jsonl",
        f"{data_dir}/files.jsonl",
        f"{data_dir}/offsets/audiorecords.tfrecord-00000-of-00001.offsets",
    ]
    rows = [json.loads(line) for line in (out / data_dir / "files.jsonl").read_text().splitlines()]
    assert [r["index"] for r in rows] == [2, 3]  # numbered after the dataset's 2 files
    assert all("/day02/" in r["path"] for r in rows)

    run_record(pattern, scratch, *OPTIONS)  # the union, from scratch
    grown, whole = read_records(out), read_records(scratch)
    assert sorted(map(element_key, grown)) == sorted(map(element_key, whole))
    stored = raw_manifest(out)["elements"]["log_mel_norm"]
    assert (stored["mean"], stored["var"]) == tuple(
        json.loads(v1)["elements"]["log_mel_norm"][k] for k in ("mean", "var")
    )  # frozen: the dataset's statistics


def test_an_append_takes_the_datasets_options_and_refuses_others(tmp_path, capsys):
    corpus, out = tmp_path / "corpus", tmp_path / "out"
    write_day(corpus, 1)
    run_record(f"{corpus}/*/*.wav", out, *OPTIONS, "--signal_dtype", "int32")
    write_day(corpus, 2)
    pattern = f"{corpus}/*/*.wav"
    line = cli_error(capsys, "--input_pattern", pattern, "--output_dir", str(out), "--append",
                     "--win_len", "1000", "--features", "mfcc")  # fmt: skip
    assert "--win_len 1000 (the dataset's: 2000)" in line and "--features" in line, line
    line = cli_error(capsys, "--input_pattern", pattern, "--output_dir", str(out), "--append",
                     "--overwrite")  # fmt: skip
    assert "--append and --overwrite exclude each other" in line
    line = cli_error(capsys, "--input_pattern", pattern, "--output_dir", str(tmp_path / "none"),
                     "--append")  # fmt: skip
    assert "holds no finished dataset to append to" in line

    result = appended(pattern, out, "--win_len", str(WIN))  # the dataset's own value: fine
    assert result.num_files == 2
    assert {r["signal"].dtype for r in read_records(out)} == {np.dtype("int32")}
    line = cli_error(capsys, "--input_pattern", pattern, "--output_dir", str(out), "--append")
    assert "is in" in line and "already (version 2): nothing to append" in line


def test_an_input_changed_since_it_was_recorded_is_refused_or_skipped(tmp_path, capsys):
    import os

    corpus, out = tmp_path / "corpus", tmp_path / "out"
    day1 = write_day(corpus, 1)
    run_record(f"{corpus}/*/*.wav", out, *OPTIONS)
    rows = [json.loads(line) for line in (out / "files.jsonl").read_text().splitlines()]
    stat = os.stat(rows[0]["path"])
    assert (rows[0]["size_bytes"], rows[0]["modified"]) == (stat.st_size, stat.st_mtime)
    changed = sorted(day1.iterdir())[0]
    os.utime(changed, (stat.st_atime, stat.st_mtime + 60))  # touched: same bytes, new time
    write_day(corpus, 2)
    pattern = f"{corpus}/*/*.wav"
    line = cli_error(capsys, "--input_pattern", pattern, "--output_dir", str(out), "--append")
    assert "1 input(s) the dataset holds changed since they were recorded" in line, line
    assert str(changed) in line and "--append_changed skip" in line
    result = appended(pattern, out, "--append_changed", "skip")
    assert result.num_files == 2  # day 2's; the touched file's windows stay as recorded
    assert {r["filepath"] for r in read_records(out)} == {
        str(p) for p in sorted((corpus / "day01").iterdir()) + sorted((corpus / "day02").iterdir())
    }


@pytest.mark.slow
def test_a_label_outside_the_class_list_is_an_error_or_kept_as_minus_one(day1, tmp_path):
    """A refused label is an error of its version, its id kept: the next append's files are
    numbered after every id the dataset gave, its failed inputs' included."""
    corpus, out = tmp_path / "corpus", writable_copy(day1[1], tmp_path / "out")
    write_day(corpus, 2, labels=("wind", "rain"))
    result = appended(f"{corpus}/day02/*.wav", out)
    assert result.num_files == 1 and result.num_failed == 1
    assert "wind" in result.errors[0]["path"]
    assert raw_manifest(out)["classes"] == ["bird", "rain"]

    write_day(corpus, 3, labels=("wind",))
    appended(f"{corpus}/day03/*.wav", out, "--unknown_class", "keep")
    targets = {(r["class"], int(r["target"])) for r in read_records(out)}
    assert targets == {("bird", 0), ("rain", 1), ("wind", -1)}
    # the wind file of day 2 stays in errors: an input the dataset holds is not recorded again
    assert raw_manifest(out)["num_errors"] == 1
    # ids: day 2's failed input took id 2, so day 3's file comes after it, not on day 2's rain
    from replay import load_info

    ids = {Path(f["path"]).name: f["index"] for f in load_info(out).files}
    assert ids == {"d1f0_bird.wav": 0, "d1f1_rain.wav": 1, "d2f1_rain.wav": 3, "d3f0_wind.wav": 4}
    assert {(Path(r["filepath"]).name, int(r["index"])) for r in read_records(out)} == set(
        ids.items()
    )


@pytest.mark.slow
def test_of_appends_to_one_version_exactly_one_commits(day1, tmp_path, monkeypatch):
    """Three appends planned on version 1 and recorded: two commit at once, both past the early
    check (the version free, their records' manifest read: a barrier at `next_manifest`), so
    the exclusive creation of ``manifests/2.json`` decides; then the third finds the version
    taken. One version 2, the others' directories removed, no older file changed."""
    import threading

    corpus, out = tmp_path / "corpus", writable_copy(day1[1], tmp_path / "out")
    plans = []
    for day in (2, 3, 4):  # all planned on version 1 and recorded, then they commit
        write_day(corpus, day)
        config = RecordConfig(
            input_pattern=f"{corpus}/day0{day}/*.wav", output_dir=str(out), append=True
        )
        plan = append.plan_append(config)
        run_job(plan.config, continuation=plan.continuation)
        plans.append(plan)
    before = digests(out)
    barrier = threading.Barrier(2, timeout=120)
    made = append_commit.next_manifest

    def past_the_early_check(*args, **kwargs):
        barrier.wait()  # both found manifests/2.json free and read their own manifest
        return made(*args, **kwargs)

    monkeypatch.setattr(append_commit, "next_manifest", past_the_early_check)
    outcomes: dict[int, object] = {}

    def commit(i: int) -> None:
        try:
            outcomes[i] = append.commit(plans[i])
        except UsageError as e:
            outcomes[i] = e

    racing = [threading.Thread(target=commit, args=(i,)) for i in (0, 1)]
    for thread in racing:
        thread.start()
    for thread in racing:
        thread.join(timeout=300)
    won = [i for i, o in outcomes.items() if isinstance(o, dict)]
    lost = [o for o in outcomes.values() if isinstance(o, UsageError)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    assert "another append committed version 2 " in str(lost[0]) and "first" in str(lost[0])
    winner = plans[won[0]]
    monkeypatch.undo()
    with pytest.raises(UsageError, match="another append committed version 2 .* first"):
        append.commit(plans[2])
    assert not (out / plans[1 - won[0]].data_dir).exists()
    assert not (out / plans[2].data_dir).exists()
    manifest = raw_manifest(out)
    assert manifest == outcomes[won[0]]
    assert (out / "manifests" / "2.json").read_bytes() == (out / "manifest.json").read_bytes()
    assert manifest["dataset_version"] == 2 and len(manifest["commits"]) == 2
    assert manifest["commits"][1]["dir"] == winner.data_dir
    day = f"day0{won[0] + 2}"
    assert {r["filepath"].split("/")[-2] for r in read_records(out)} == {"day01", day}
    assert all(
        before[k] == v for k, v in digests(out).items() if k in before and "manifest" not in k
    )


@pytest.mark.slow
def test_a_refreshing_append_has_the_statistics_of_a_record_of_the_union(day1, tmp_path):
    """--append_transform refresh: the union's statistics, bit for bit a from-scratch run's
    (moments are exact integers), without reading a byte of an older shard (version 1's shards
    are garbage of their size here, and stay so), and a transform graph of its own, also when
    resumed over a frozen append of the same files left uncommitted (another mode: another
    directory); a frozen append after it keeps them; a second and a third refresh have the
    statistics of the union again; class ids never change."""
    from replay import load_info, load_transform
    from transforms.stages.moments import from_json, total

    corpus, scratch = tmp_path / "corpus", tmp_path / "scratch"
    out = writable_copy(day1[1], tmp_path / "out")
    pattern = union(day1[0], corpus)
    root_transform = digests(out / "transform_fn")
    old_shards = sorted(out.glob("*.tfrecord-*"))
    rng = np.random.default_rng(5)
    for shard in old_shards:  # the same size, other bytes: an append that read one would fail
        shard.write_bytes(rng.bytes(shard.stat().st_size))
    garbage = {shard: shard.read_bytes() for shard in old_shards}
    write_day(corpus, 2, labels=("bird", "bird", "rain"))
    frozen = append.plan_append(
        RecordConfig(input_pattern=pattern, output_dir=str(out), append=True)
    )
    run_job(frozen.config, continuation=frozen.continuation)  # a frozen append, killed uncommitted
    # the same files in the other mode, resumed: its own directory, not the frozen one's records
    appended(pattern, out, "--append_transform", "refresh", "--resume")
    assert raw_manifest(out)["commits"][1]["dir"] != frozen.data_dir
    assert not (out / frozen.data_dir).exists()
    run_record(pattern, scratch, *OPTIONS)  # the union, from scratch

    grown, whole = raw_manifest(out), raw_manifest(scratch)
    assert grown["elements"] == whole["elements"]  # mean and var: the same float32 bits
    assert grown["classes"] == whole["classes"] == ["bird", "rain"]
    summed = total(from_json(c["moments"]) for c in grown["commits"])
    assert summed == from_json(whole["commits"][0]["moments"])
    commit = grown["commits"][1]
    assert commit["transform"] == "refresh"
    assert digests(out / "transform_fn") == root_transform  # version 1's, untouched
    assert (out / commit["dir"] / "transform_fn" / "saved_model.pb").is_file()
    samples = np.stack([r["signal"] for r in read_records(scratch)[:4]])
    ours, theirs = (
        load_transform(out)({"signal": samples}),
        load_transform(scratch)({"signal": samples}),
    )
    assert np.array_equal(ours["log_mel_norm"].numpy(), theirs["log_mel_norm"].numpy())
    first = load_transform(out, version=1)({"signal": samples})["log_mel_norm"].numpy()
    assert not np.array_equal(first, ours["log_mel_norm"].numpy())  # version 1's statistics

    write_day(corpus, 3)
    appended(pattern, out)  # frozen: version 2's transform and statistics stay
    latest = raw_manifest(out)
    assert latest["elements"] == grown["elements"] and latest["commits"][2]["transform"] == "frozen"
    assert load_info(out).version == 3
    load_info(out).check_versions()  # versions 1 and 2 differ from 3 only in the statistics
    again = load_transform(out)({"signal": samples})["log_mel_norm"].numpy()
    assert np.array_equal(again, ours["log_mel_norm"].numpy())

    for day in (4, 5):  # a second and a third refresh: the moments of every commit, not the last
        write_day(corpus, day, labels=("rain", "bird", "rain")[: day - 2])
        appended(pattern, out, "--append_transform", "refresh")
        run_record(pattern, tmp_path / f"scratch{day}", *OPTIONS)
        grown, whole = raw_manifest(out), raw_manifest(tmp_path / f"scratch{day}")
        assert grown["dataset_version"] == day and grown["commits"][-1]["transform"] == "refresh"
        assert grown["elements"] == whole["elements"], day
        summed = total(from_json(c["moments"]) for c in grown["commits"])
        assert summed == from_json(whole["commits"][0]["moments"])
    assert {shard: shard.read_bytes() for shard in old_shards} == garbage  # not rewritten either


def test_a_refresh_needs_stored_moments_and_statistics(tmp_path, capsys):
    corpus, out = tmp_path / "corpus", tmp_path / "out"
    write_day(corpus, 1)
    run_record(f"{corpus}/*/*.wav", out, *OPTIONS, "--no_normalize")
    write_day(corpus, 2)
    line = cli_error(capsys, "--input_pattern", f"{corpus}/*/*.wav", "--output_dir", str(out),
                     "--append", "--append_transform", "refresh")  # fmt: skip
    assert "has no z-score statistics" in line and "nothing to refresh" in line
    line = cli_error(capsys, "--input_pattern", f"{corpus}/*/*.wav", "--output_dir", str(out),
                     "--append_transform", "refresh")  # fmt: skip
    assert "--append_transform is for --append" in line


@pytest.mark.slow
def test_ten_nightly_appends_replay_as_one_record_of_the_union(tmp_path):
    """The nightly command ten times: every split replays (with `replay_dataset`) the same
    multiset of elements, sample bytes and labels as one record of the union; the old shards'
    SHA-256 never change."""
    from replay import load_info, replay_dataset

    corpus, out, scratch = tmp_path / "corpus", tmp_path / "out", tmp_path / "scratch"
    options = (*OPTIONS, "--splits", "train=70,test=30")
    labels = ("bird", "rain", "wind")
    write_day(corpus, 1, labels)
    run_record(f"{corpus}/*/*.wav", out, *options)
    seen: dict[str, str] = {}
    for day in range(2, 12):
        shards = {k: v for k, v in digests(out).items() if ".tfrecord-" in k}
        assert {k: shards[k] for k in seen} == seen  # every older shard unchanged
        seen = shards
        write_day(corpus, day, labels)
        assert appended(f"{corpus}/*/*.wav", out).dataset_version == day
    run_record(f"{corpus}/*/*.wav", scratch, *options)

    info = load_info(out)
    assert info.version == 11 and info.num_files == load_info(scratch).num_files == 33
    keys = ["filepath", "win_start_idx", "signal", "class", "target", "log_mel"]

    def elements(path: Path, split: str) -> list[tuple]:
        ds = replay_dataset(path, split=split, features=keys)
        return sorted(
            (
                e["filepath"],
                int(e["win_start_idx"]),
                e["signal"].tobytes(),
                e["class"],
                int(e["target"]),
                e["log_mel"].tobytes(),
            )  # fmt: skip
            for e in ds.as_numpy_iterator()
        )

    for split in ("train", "test"):
        assert elements(out, split) == elements(scratch, split), split


@pytest.mark.slow  # two append processes: the race between processes at the commit point
def test_two_appends_run_at_once_to_one_version_commit_one_the_other_fails_cleanly(
    day1, forker, tmp_path
):
    """Two append processes (forked: `forker`) started together, each held at its commit until
    both have passed the early check (`tests.support.commit_barrier`): the exclusive creation of
    ``manifests/2.json`` lets exactly one commit version 2; the other fails with one line and
    leaves nothing."""
    corpus, out = tmp_path / "corpus", writable_copy(day1[1], tmp_path / "out")
    write_day(corpus, 2)
    write_day(corpus, 3)
    barrier = tmp_path / "barrier"
    logs = {day: (tmp_path / f"day{day}.out", tmp_path / f"day{day}.err") for day in (2, 3)}
    procs = {
        day: forker.start(
            [
                "-m",
                "tests.support.commit_barrier",
                str(barrier),
                "2",
                "--input_pattern",
                f"{corpus}/day0{day}/*.wav",
                "--output_dir",
                str(out),
                "--append",
            ],
            stdout=logs[day][0],
            stderr=logs[day][1],
        )  # fmt: skip
        for day in (2, 3)
    }
    outcomes = [
        (proc.wait(timeout=600), *(log.read_text() for log in logs[day]))
        for day, proc in procs.items()
    ]
    assert len(list(barrier.iterdir())) == 2  # both reached the commit point
    codes = sorted(code for code, _, _ in outcomes)
    assert codes == [0, 2], [(c, e[-2000:]) for c, _, e in outcomes]
    (err,) = [e.strip().splitlines() for code, _, e in outcomes if code == 2]
    assert err[-1].startswith("error: --append: another append committed version 2"), err
    manifest = raw_manifest(out)
    assert manifest["dataset_version"] == 2
    assert (out / "manifests" / "2.json").read_bytes() == (out / "manifest.json").read_bytes()
    committed = {c["dir"] for c in manifest["commits"][1:]}
    assert {f"appends/{p.name}" for p in (out / "appends").iterdir()} == committed


@pytest.mark.slow
def test_an_append_left_uncommitted_is_rolled_back_by_the_next_append(day1, tmp_path):
    """An append killed after its record job (its directory complete, nothing committed) is
    removed when another append commits the version it was for."""
    corpus, out = tmp_path / "corpus", writable_copy(day1[1], tmp_path / "out")
    write_day(corpus, 2)
    write_day(corpus, 3)
    config = RecordConfig(input_pattern=f"{corpus}/day02/*.wav", output_dir=str(out), append=True)
    killed = append.plan_append(config)
    run_job(killed.config, continuation=killed.continuation)  # recorded, never committed
    assert (out / killed.data_dir / "manifest.json").is_file()
    assert appended(f"{corpus}/day03/*.wav", out).dataset_version == 2
    assert not (out / killed.data_dir).exists()
    assert [p.name for p in (out / "appends").iterdir()] == [
        raw_manifest(out)["commits"][1]["dir"].split("/")[1]
    ]
