"""Format version 5: dataset versions and commits (a dataset grown by appending).

Hand-made datasets (`tests.support.replay_fixtures`: version 1 written by `write_dataset`, each
later version by `append_commit` into ``appends/<token>/``): the validator accepts them and
refuses every crafted manifest naming the field; `load_info` reads the latest version, an
earlier one, the version an append committed before it was killed, and refuses a version that
does not exist; `replay_dataset` reads exactly the chosen version's elements, also while a
later one is committed; the source tables are every commit's; ``python -m pipelines.inspect``
lists the versions and ``python -m pipelines.verify`` checks every one.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from pipelines import inspect as inspect_cli
from pipelines import verify as verify_cli
from replay import (
    CorruptShardError,
    ManifestError,
    ShardError,
    VersionNotFoundError,
    load_info,
    replay_dataset,
    verify_dataset,
)
from replay import format as fmt
from replay.global_order import GlobalOrder, plan_blocks, positions_records
from tests.support.replay_elements import collect, indices
from tests.support.replay_fixtures import append_commit, write_dataset, write_manifest

SPLITS = ["train", "eval"]
IN_ORDER = {"cycle_length": 1, "deterministic": True}  # shard by shard, each in file order


def _write(path, commits: int = 3) -> list[dict]:
    """A format version 5 dataset of `commits` versions; each version's own records."""
    parts = [
        write_dataset(path, format_version=5, split_names=SPLITS, num_examples_per_shard=(5, 3))
    ]
    sizes = ({"train": (3, 2, 1), "eval": (2,)}, {"train": (4,)})
    for i in range(commits - 1):
        parts.append(append_commit(path, token=f"t{i + 2}", num_examples_per_shard=sizes[i]))
    return parts


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("v5")
    return str(path), _write(path)


def _manifest(path) -> dict:
    with open(os.path.join(path, fmt.MANIFEST_FILENAME)) as f:
        return json.load(f)


def _indices_of(parts: list[dict], split: str) -> list[int]:
    return [int(e[fmt.INDEX_KEY]) for part in parts for e in part["elements"].get(split, ())]


# --- the manifest ------------------------------------------------------------------------------


def test_a_version_5_manifest_lists_its_commits(dataset):
    path, parts = dataset
    manifest = _manifest(path)
    assert manifest["format_version"] == 5 and manifest["dataset_version"] == 3
    assert "tables" not in manifest
    assert [c["dir"] for c in manifest["commits"]] == ["", "appends/t2", "appends/t3"]
    info = load_info(path)
    assert (info.format_version, info.version) == (5, 3)
    assert [(c["version"], c["mode"]) for c in info.commits] == [
        (1, "record"),
        (2, "append"),
        (3, "append"),
    ]
    assert (
        info.num_examples()
        == manifest["num_examples"]
        == 16 + 8 + 4
        == sum(len(p["files"]) for p in parts)
    )
    assert [s.commit for s in info.shard_list("train")] == [1, 1, 2, 2, 2, 3]
    shard = info.shards["train"][2]
    assert shard.filename == "appends/t2/audiorecords-train.tfrecord-00000-of-00003.gz"
    assert shard.path == os.path.join(path, shard.filename)
    assert shard.offsets_path == os.path.join(
        path, "appends/t2/offsets/audiorecords-train.tfrecord-00000-of-00003.gz.offsets"
    )
    assert info.shards["eval"][-1].filename.startswith("appends/t2/")  # commit 3: no eval
    assert fmt.offsets_filename(shard.filename) == os.path.relpath(shard.offsets_path, path)


def _set(*keys, value):
    def edit(m: dict) -> None:
        for key in keys[:-1]:
            m = m[key]
        m[keys[-1]] = value

    return edit


def _delete(*keys):
    def edit(m: dict) -> None:
        for key in keys[:-1]:
            m = m[key]
        del m[keys[-1]]

    return edit


def _rename(split: str, i: int, filename: str):
    def edit(m: dict) -> None:
        m["splits"][split]["shards"][i]["filename"] = filename

    return edit


def _swap(split: str, i: int, j: int):
    def edit(m: dict) -> None:
        shards = m["splits"][split]["shards"]
        shards[i], shards[j] = shards[j], shards[i]

    return edit


def _add(key: str, amount: int):
    def edit(m: dict) -> None:
        m[key] += amount

    return edit


NAME = "audiorecords-train.tfrecord-00000-of-00003.gz"  # commit 2's first train shard
CRAFTED = {
    "dir_parent": (_set("commits", 1, "dir", value="../x"), "commits[1].dir: '../x' is not"),
    "dir_inside_parent": (
        _set("commits", 1, "dir", value="appends/../x"),
        "commits[1].dir: 'appends/../x' is not",
    ),
    "dir_absolute": (_set("commits", 1, "dir", value="/tmp/x"), "commits[1].dir: '/tmp/x' is"),
    "dir_backslash": (
        _set("commits", 1, "dir", value="appends\\x"),
        "commits[1].dir: 'appends\\\\x' is not",
    ),
    "dir_empty_segment": (
        _set("commits", 1, "dir", value="appends//x"),
        "commits[1].dir: 'appends//x' is not",
    ),
    "dir_two_segments": (
        _set("commits", 1, "dir", value="appends/a/b"),
        "commits[1].dir: 'appends/a/b' is not",
    ),
    "dir_dot_token": (_set("commits", 1, "dir", value="appends/.."), "commits[1].dir: "),
    "dir_not_root": (_set("commits", 0, "dir", value="appends/x"), "commits[0].dir: "),
    "dir_repeated": (_set("commits", 2, "dir", value="appends/t2"), "commits[2].dir: "),
    "shard_unknown_dir": (
        _rename("train", 2, f"appends/zz/{NAME}"),
        "splits.train.shards[2].filename: 'appends/zz/",
    ),
    "shard_parent": (_rename("train", 2, f"../{NAME}"), "splits.train.shards[2].filename: '../"),
    "shard_in_dir_parent": (
        _rename("train", 2, f"appends/t2/../{NAME}"),
        "splits.train.shards[2].filename: ",
    ),
    "shard_absolute": (_rename("train", 2, f"/{NAME}"), "splits.train.shards[2].filename: '/"),
    "shard_global_index": (  # the index counted over every commit, not within commit 2's
        _rename("train", 2, "appends/t2/audiorecords-train.tfrecord-00002-of-00006.gz"),
        "is not shard 0 of split 'train'",
    ),
    "shard_global_count": (
        _rename("train", 3, "appends/t2/audiorecords-train.tfrecord-00001-of-00006.gz"),
        "splits.train.shards[3].filename: ",
    ),
    "shard_out_of_commit_order": (  # commit 3's shard second: commit 2's after it
        _swap("train", 1, 5),
        "splits.train.shards[2].filename: 'appends/t2/audiorecords-train.tfrecord-00000-of-00003"
        ".gz' of commit 2 comes after a shard of commit 3",
    ),
    "sum_num_files": (_add("num_files", 1), "num_files: "),
    "sum_num_errors": (_add("num_errors", -1), "num_errors: "),
    "sum_commit_examples": (
        _set("commits", 1, "num_examples", value=7),
        "commits[1].num_examples: 7 but its shards hold 8",
    ),
    "commit_tables_missing": (_delete("commits", 1, "tables"), "commits[1].tables: missing"),
    "commit_table_missing": (
        _delete("commits", 2, "tables", "errors"),
        "commits[2].tables.errors: missing",
    ),
    "commit_table_digest": (
        _set("commits", 1, "tables", "files", "sha256", value="xyz"),
        "commits[1].tables.files.sha256: ",
    ),
    "commit_table_too_small": (
        _set("commits", 1, "tables", "files", "num_bytes", value=2),
        "commits[1].tables.files.num_bytes: ",
    ),
    "dataset_version_not_commits": (
        _set("dataset_version", value=2),
        "commits: 3 commits, but dataset_version is 2",
    ),
    "dataset_version_missing": (_delete("dataset_version"), "dataset_version: missing"),
    "dataset_version_zero": (_set("dataset_version", value=0), "dataset_version: "),
    "commits_missing": (_delete("commits"), "commits: missing"),
    "version_repeated": (_set("commits", 2, "version", value=2), "commits[2].version: 2, but"),
    "version_bool": (_set("commits", 0, "version", value=True), "commits[0].version: "),
    "mode_wrong": (_set("commits", 1, "mode", value="record"), "commits[1].mode: 'record'"),
    "input_pattern_missing": (
        _delete("commits", 1, "input_pattern"),
        "commits[1].input_pattern: missing",
    ),
    "top_level_tables": (
        _set("tables", value={}),
        "tables: a format_version 5 manifest keeps its source tables per commit",
    ),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_version_5_manifest_is_refused_naming_the_field(dataset, tmp_path, case):
    path, _ = dataset
    edit, field = CRAFTED[case]
    manifest = _manifest(path)
    edit(manifest)
    write_manifest(tmp_path, manifest)
    with pytest.raises(ManifestError) as e:
        load_info(tmp_path)
    message = str(e.value)
    where = os.path.join(tmp_path, fmt.MANIFEST_FILENAME)
    assert message.startswith(f"{where}: ") and "\n" not in message, message
    assert field in message, message


def test_commits_need_format_version_5(tmp_path):
    expected = write_dataset(tmp_path, format_version=4)
    manifest = dict(expected["manifest"], dataset_version=1)
    write_manifest(tmp_path, manifest)
    with pytest.raises(ManifestError, match="dataset_version: needs format_version 5"):
        load_info(tmp_path)


def test_a_format_4_dataset_is_version_1_of_one_commit(tmp_path):
    expected = write_dataset(tmp_path, format_version=4)
    for info in (load_info(tmp_path), load_info(tmp_path, version=1)):
        assert info.version == 1 and len(info.commits) == 1
        commit = info.commits[0]
        assert (commit["version"], commit["dir"], commit["mode"]) == (1, "", "record")
        assert commit["num_examples"] == expected["manifest"]["num_examples"]
        assert commit["tables"] == expected["manifest"]["tables"]
    with pytest.raises(VersionNotFoundError, match=r"no dataset version 2; available .*\[1\]"):
        load_info(tmp_path, version=2)


# --- load_info: which version ------------------------------------------------------------------


def test_load_info_reads_the_latest_or_the_version_asked(dataset):
    path, parts = dataset
    assert load_info(path).version == 3
    for version in (1, 2, 3):
        info = load_info(path, version=version)
        assert info.version == version == len(info.commits)
        want = [i for split in SPLITS for i in _indices_of(parts[:version], split)]
        assert info.num_examples() == len(want)
        assert info.num_files == sum(len(p["files"]) for p in parts[:version])
    assert load_info(path, version=1).manifest["format_version"] == 5
    assert [s.filename for s in load_info(path, version=1).shard_list()] == [
        s.filename for s in load_info(path).shard_list() if s.commit == 1
    ]


@pytest.mark.parametrize("version", [0, 4, -1])
def test_a_version_that_does_not_exist_is_refused_naming_the_available(dataset, version):
    path, _ = dataset
    with pytest.raises(VersionNotFoundError) as e:
        load_info(path, version=version)
    assert str(e.value) == (f"{path}: no dataset version {version}; available versions: [1, 2, 3]")


def test_a_version_is_an_integer(dataset):
    with pytest.raises(TypeError, match="version must be an integer"):
        load_info(dataset[0], version="2")


def test_a_stored_manifest_of_another_version_is_refused(dataset, tmp_path):
    path, _ = dataset
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    shutil.copy(copy / "manifests" / "3.json", copy / "manifests" / "2.json")
    with pytest.raises(VersionNotFoundError, match="version 2 says dataset_version 3"):
        load_info(copy, version=2)
    with pytest.raises(ManifestError, match="2.json"):
        load_info(copy).check_versions()


def test_a_dataset_never_appended_to_is_version_1(tmp_path):
    write_dataset(tmp_path, format_version=5)
    assert not (tmp_path / fmt.MANIFESTS_DIR).exists()
    info = load_info(tmp_path, version=1)
    assert info.version == 1 and info.commits[0]["dir"] == ""
    info.check_versions()
    with pytest.raises(VersionNotFoundError, match=r"available versions: \[1\]"):
        load_info(tmp_path, version=2)


def test_an_append_killed_after_its_commit_point_is_committed(tmp_path):
    """manifests/<v+1>.json created, manifest.json not yet replaced: version v+1 is the latest."""
    parts = _write(tmp_path, commits=2)
    parts.append(append_commit(tmp_path, token="t3", update_pointer=False, seed=5))
    assert _manifest(tmp_path)["dataset_version"] == 2  # the pointer lags
    info = load_info(tmp_path)
    assert info.version == 3 and info.commits[2]["dir"] == "appends/t3"
    assert load_info(tmp_path, version=3).version == 3
    assert load_info(tmp_path, version=2).version == 2
    got = indices(collect(replay_dataset(tmp_path, split="train", **IN_ORDER)))
    assert got == _indices_of(parts, "train")
    assert verify_cli.run([str(tmp_path)]) == 0


# --- the elements ------------------------------------------------------------------------------


def test_each_version_reads_exactly_its_elements_in_order(dataset):
    path, parts = dataset
    for version in (1, 2, None):
        got = collect(replay_dataset(path, split="train", version=version, **IN_ORDER))
        want = [e for p in parts[: version or 3] for e in p["elements"]["train"]]
        assert indices(got) == [int(e[fmt.INDEX_KEY]) for e in want]
        for g, w in zip(got, want, strict=True):
            for key in (fmt.SIGNAL_KEY, "log_mel", "log_mel_norm", fmt.CLASS_KEY):
                np.testing.assert_array_equal(g[key], w[key], err_msg=key)
    eval_v2 = indices(collect(replay_dataset(path, split="eval", version=2, **IN_ORDER)))
    assert eval_v2 == _indices_of(parts[:2], "eval")


def test_the_global_order_reads_appended_shards(dataset):
    path, parts = dataset
    info = load_info(path, version=2)
    counts = [s.num_examples for s in info.shard_list("train")]
    stored = _indices_of(parts[:2], "train")
    first = np.cumsum((0, *counts))
    order = GlobalOrder(seed=3, start=0, block_length=2, window_blocks=2)
    ds = replay_dataset(path, version=2, split="train", order=order, features=[fmt.INDEX_KEY])
    got = [int(e[fmt.INDEX_KEY]) for e in ds.as_numpy_iterator()]
    blocks = plan_blocks(counts, block_length=2)
    where = positions_records(blocks, range(len(stored)), seed=3, window_blocks=2)
    assert got == [stored[first[s] + r] for s, r in where]
    assert sorted(got) == sorted(stored)


def test_a_reader_keeps_its_version_while_the_next_is_committed(tmp_path):
    """Iterating version 1 while version 2 is committed (shards, manifests/2.json, manifest.json
    replaced) yields exactly version 1; a new reader then reads version 2."""
    parts = _write(tmp_path / "base", commits=1)
    want = _indices_of(parts, "train")
    for version in (None, 1):
        directory = tmp_path / f"run-{version}"
        shutil.copytree(tmp_path / "base", directory)
        ds = replay_dataset(directory, split="train", version=version, prefetch=None, **IN_ORDER)
        iterator = ds.as_numpy_iterator()
        got = [int(next(iterator)[fmt.INDEX_KEY]) for _ in range(3)]
        added = append_commit(directory, token="later", num_examples_per_shard=(2, 2))
        assert load_info(directory).version == 2
        got += [int(e[fmt.INDEX_KEY]) for e in iterator]
        assert got == want
        again = indices(collect(replay_dataset(directory, split="train", **IN_ORDER)))
        assert again == want + _indices_of([added], "train")


# --- source tables -----------------------------------------------------------------------------


def test_files_and_errors_are_every_commits_in_order(dataset):
    path, parts = dataset
    info = load_info(path)
    assert [f["path"] for f in info.files] == [f["path"] for p in parts for f in p["files"]]
    assert [e["path"] for e in info.errors] == [e["path"] for p in parts for e in p["errors"]]
    assert (info.num_files, info.num_errors) == (len(info.files), len(info.errors)) == (28, 3)
    info.check_tables()
    older = load_info(path, version=2)
    assert len(older.files) == older.num_files == 24 and len(older.errors) == 2


def test_a_commits_table_is_checked_against_its_own_entry(dataset, tmp_path):
    path, _ = dataset
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    table = copy / "appends" / "t2" / fmt.FILES_TABLE
    table.write_bytes(table.read_bytes().replace(b'"num_windows":1', b'"num_windows":2', 1))
    with pytest.raises(ManifestError, match=f"{table}: table's SHA-256"):
        load_info(copy).check_tables()
    assert len(load_info(copy, version=1).files) == 16  # version 1's table is sound
    table.unlink()
    with pytest.raises(ManifestError, match=f"{table}: table is missing"):
        _ = load_info(copy).files


# --- inspect and verify ------------------------------------------------------------------------


def test_inspect_lists_the_versions(dataset, capsys):
    path, _ = dataset
    assert inspect_cli.run([path]) == 0
    out = capsys.readouterr().out
    assert "(format_version 5, dataset version 3)" in out
    assert "Dataset versions (3):" in out
    lines = out.split("Dataset versions (3):\n", 1)[1].splitlines()[:4]
    assert lines[0].split() == [
        "version", "mode", "files", "windows", "errors", "created", "input", "pattern",
    ]  # fmt: skip
    assert lines[1].split()[:5] == ["1", "record", "16", "16", "1"]
    assert lines[2].split()[:5] == ["2", "append", "8", "8", "1"]
    assert lines[2].split()[-1] == "/data/t2/*.wav"
    assert lines[3].split()[:5] == ["3", "append", "4", "4", "1"]
    assert inspect_cli.run([path, "--version", "1"]) == 0
    out = capsys.readouterr().out
    assert "dataset version 1)" in out and "Dataset versions" not in out
    assert inspect_cli.run([path, "--version", "7"]) == 2
    assert "available versions: [1, 2, 3]" in capsys.readouterr().err


def test_verify_checks_every_version(dataset, capsys):
    path, _ = dataset
    assert verify_cli.run([path]) == 0
    assert "OK" in capsys.readouterr().out
    verify_dataset(path)


def test_verify_names_a_tampered_appended_shard(dataset, tmp_path, capsys):
    path, _ = dataset
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    shard = load_info(copy).shards["train"][3]
    assert shard.commit == 2
    data = bytearray(open(shard.path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    with open(shard.path, "wb") as f:
        f.write(data)
    assert verify_cli.run([str(copy)]) == 1
    out = capsys.readouterr().out
    assert f"BAD {shard.path}: " in out and out.count("BAD ") == 1
    with pytest.raises(CorruptShardError, match=shard.filename):
        verify_dataset(copy)


def test_verify_checks_the_stored_manifests(dataset, tmp_path, capsys):
    path, _ = dataset
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    stored = copy / "manifests" / "1.json"
    manifest = json.loads(stored.read_text())
    stored.write_text(json.dumps(dict(manifest, classes=["a", "b", "c"])))
    assert verify_cli.run([str(copy)]) == 1
    assert f"FAILED {stored}: its classes differ" in capsys.readouterr().out
    stored.unlink()
    assert verify_cli.run([str(copy)]) == 1
    assert f"FAILED {stored}: missing" in capsys.readouterr().out
    with pytest.raises(VersionNotFoundError, match="available versions: \\[2, 3\\]"):
        load_info(copy, version=1)
    manifest["splits"]["train"]["shards"][1]["num_bytes"] += 1  # not version 3's shard
    stored.write_text(json.dumps(manifest))
    assert verify_cli.run([str(copy)]) == 1
    assert "splits.train.shards: not version 3's shards of commits 1 to 1" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize("version", [1, 2])
def test_verify_checks_each_commits_tables_in_the_stored_manifests(
    dataset, tmp_path, capsys, version
):
    """A stored manifest whose commit lists other table digests than the latest version's (its
    files table's SHA-256 changed, or the byte size of its errors table) is not an earlier version
    of it: `check_versions` and ``verify`` name it."""
    path, _ = dataset
    for table, key in (("files", "sha256"), ("errors", "num_bytes")):
        copy = tmp_path / f"copy-{table}"
        shutil.copytree(path, copy)
        stored = copy / "manifests" / f"{version}.json"
        manifest = json.loads(stored.read_text())
        entry = manifest["commits"][version - 1]["tables"][table]
        entry[key] = "0" * 64 if key == "sha256" else entry[key] + 1
        stored.write_text(json.dumps(manifest))
        assert load_info(copy, version=version).version == version  # it still validates
        with pytest.raises(
            ManifestError, match=rf"{version}.json: commits\[{version - 1}\]: tables"
        ):
            load_info(copy).check_versions()
        assert verify_cli.run([str(copy)]) == 1
        out = capsys.readouterr().out
        assert f"FAILED {stored}: commits[{version - 1}]: tables differ from version 3's" in out


def test_an_append_directory_that_is_a_symlink_out_is_refused(dataset, tmp_path):
    path, _ = dataset
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    outside = tmp_path / "elsewhere"
    shutil.move(copy / "appends" / "t2", outside)
    os.symlink(outside, copy / "appends" / "t2")
    info = load_info(copy, version=1)
    info.check_shards()  # version 1 reads nothing under appends/
    with pytest.raises(ShardError, match="leads outside the dataset directory"):
        replay_dataset(copy, version=2)
    with pytest.raises(ManifestError, match="leads outside the dataset directory"):
        _ = load_info(copy).files
