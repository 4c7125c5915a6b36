"""manifest.json, the source tables and shard file names as the format says, pinned as text.

The record job's pure manifest builder (`finalize.build_manifest`), table encoding
(`format.table_bytes`) and shard file names (`format.shard_filename`) are compared with JSON
text, JSON Lines and file names written out here, and the reader (`replay.load_info`) is given
that same literal text: a renamed key, a changed order or a shard name of another shape fails
here, on either side. Format versions 2 to 4's manifest texts (version 2: files and errors
inside it) are read still. The file and entry the shard writer makes are pinned in
test_write_shards.py.
"""

from __future__ import annotations

import json

import pytest

from replay import format as fmt
from replay import load_info
from transforms.spec.layout import RecordLayout
from transforms.stages.finalize import build_manifest
from transforms.stages.moments import Moments
from transforms.stages.source_tables import error_lines, file_lines
from transforms.stages.task_commits import packed_lines

# What finalize writes for a run with --splits train=60,test=40, --feature_dtype float16, one
# 2x3 log_mel feature and its z-score (key order as written: json keeps it).
MANIFEST_TEXT = """
{
 "format": "audiorecords",
 "format_version": 5,
 "complete": true,
 "name": "birds",
 "created_utc": "2026-11-25T10:00:00+00:00",
 "compression": "GZIP",
 "elements": {
  "class": {"dtype": "string", "shape": [], "encoding": "bytes_list"},
  "target": {"dtype": "int64", "shape": [], "encoding": "int64_list"},
  "num_classes": {"dtype": "int64", "shape": [], "encoding": "int64_list"},
  "filepath": {"dtype": "string", "shape": [], "encoding": "bytes_list"},
  "index": {"dtype": "int64", "shape": [], "encoding": "int64_list"},
  "win_start_idx": {"dtype": "int64", "shape": [], "encoding": "int64_list"},
  "sample_rate": {"dtype": "int64", "shape": [], "encoding": "int64_list"},
  "signal": {"dtype": "int16", "shape": [64], "encoding": "raw"},
  "log_mel": {"dtype": "float32", "shape": [2, 3], "encoding": "raw", "stored_dtype": "float16"},
  "log_mel_norm": {
   "dtype": "float32", "shape": [2, 3], "encoding": "z_score",
   "source": "log_mel", "mean": -1.5, "var": 0.25
  }
 },
 "num_examples": 15,
 "classes": ["cat", "dog"],
 "num_classes": 2,
 "splits": {
  "train": {
   "num_examples": 12,
   "shards": [
    {
     "filename": "birds-train.tfrecord-00000-of-00002.gz", "num_examples": 5, "num_bytes": 600,
     "offsets": {
      "num_bytes": 40,
      "sha256": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     }
    },
    {
     "filename": "birds-train.tfrecord-00001-of-00002.gz", "num_examples": 7, "num_bytes": 840,
     "offsets": {
      "num_bytes": 56,
      "sha256": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
     }
    }
   ]
  },
  "test": {
   "num_examples": 3,
   "shards": [
    {
     "filename": "birds-test.tfrecord-00000-of-00001.gz", "num_examples": 3, "num_bytes": 360,
     "offsets": {
      "num_bytes": 24,
      "sha256": "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
     }
    }
   ]
  }
 },
 "analyzed_splits": ["train"],
 "num_files": 2,
 "num_errors": 2,
 "dataset_version": 1,
 "commits": [
  {
   "version": 1,
   "dir": "",
   "mode": "record",
   "created_utc": "2026-11-25T10:00:00+00:00",
   "input_pattern": "in/*.wav",
   "num_files": 2,
   "num_errors": 2,
   "num_examples": 15,
   "tables": {
    "files": {
     "num_bytes": 135,
     "sha256": "8482d9ac9a19f9be0aa0a510d920c267d94d335acc635c7686c54495af250459"
    },
    "errors": {
     "num_bytes": 100,
     "sha256": "caf8fb3a7f3df7e720e60082361e5a8a5121f3e10eb534c250d3a874c9e75aad"
    }
   },
   "moments": {"log_mel": {"count": 72, "total": -108, "total_sq": 45, "nonfinite": 0}}
  }
 ],
 "params": {"input_pattern": "in/*.wav", "win_len": 64, "splits": "train=60,test=40"},
 "versions": {"audiorecords": "0.1.0"}
}
"""
# files.jsonl and errors.jsonl of that run: files by index, errors by path, one compact line each.
FILES_TEXT = (
    '{"path":"in/a_1_cat.wav","index":0,"split":"train","num_windows":9}\n'
    '{"path":"in/b_2_dog.wav","index":1,"split":"test","num_windows":3}\n'
)
ERRORS_TEXT = (
    '{"path":"in/c_3_dog.wav","reason":"not a RIFF file"}\n'
    '{"path":"in/d_4_cat.wav","reason":"truncated"}\n'
)
FILES = [json.loads(line) for line in FILES_TEXT.splitlines()]
ERRORS = [json.loads(line) for line in ERRORS_TEXT.splitlines()]


def v4_manifest_text() -> str:
    """The same run as format version 4 wrote it: no commits, the tables' digests at the top."""
    manifest = json.loads(MANIFEST_TEXT)
    (commit,) = manifest.pop("commits")
    del manifest["dataset_version"]
    params = manifest.pop("params")
    manifest.update(
        format_version=4, tables=commit["tables"], params=params, versions=manifest.pop("versions")
    )
    return json.dumps(manifest, indent=1)


def v3_manifest_text() -> str:
    """The same run as format version 3 wrote it: no record offsets."""
    manifest = json.loads(v4_manifest_text())
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            del shard["offsets"]
    manifest.update(format_version=3)
    return json.dumps(manifest, indent=1)


def v2_manifest_text() -> str:
    """The same run as format version 2 wrote it: the lists inside the manifest."""
    manifest = json.loads(v3_manifest_text())
    for key in ("num_files", "num_errors", "tables"):
        del manifest[key]
    manifest.update(format_version=2, files=FILES, errors=ERRORS)
    return json.dumps(manifest, indent=1)


def _entry(split: str, shard: int, count: int, examples: int) -> dict:
    """A shard's entry as the write stage returns it (file name written out, not computed)."""
    name = f"birds-{split}.tfrecord-{shard:05d}-of-{count:05d}.gz"
    return {
        "split": split,
        "shard": shard,
        "filename": name,
        "num_examples": examples,
        "num_bytes": 120 * examples,
        "offsets": {
            "num_bytes": 8 * examples,
            "sha256": {"train": "ab", "test": "c"}[split][shard] * 64,
        },
    }


def test_build_manifest_gives_the_pinned_json_text():
    """Pins the manifest's keys, their order, the element specs (stored_dtype, z_score fields),
    split order (--splits order, shards sorted), sums, and files / errors sorting, as text."""
    layout = RecordLayout(feature_shapes={"log_mel": (2, 3)}, feature_dtype="float16")
    elements = layout.element_specs(
        signal_dtype="int16", win_len=64, statistics={"log_mel": (-1.5, 0.25)}
    )
    # the read stage's summary lines and the errors, out of order: sorted by index / path
    files, rates = file_lines([packed_lines([fmt.table_line(f)]) for f in FILES[::-1]], failed=())
    errors = error_lines(ERRORS[::-1])
    assert rates == []  # these summaries name no sample rate
    table_bytes = {"files": b"".join(files), "errors": b"".join(errors)}
    assert table_bytes == {"files": FILES_TEXT.encode(), "errors": ERRORS_TEXT.encode()}
    assert table_bytes == {"files": fmt.table_bytes(FILES), "errors": fmt.table_bytes(ERRORS)}
    manifest = build_manifest(
        name="birds",
        compression="GZIP",
        elements=elements,
        classes=["cat", "dog"],
        shards=[_entry("test", 0, 1, 3), _entry("train", 1, 2, 7), _entry("train", 0, 2, 5)],
        num_files=len(files),
        num_errors=len(errors),
        table_digests={key: fmt.table_digest(data) for key, data in table_bytes.items()},
        params={"input_pattern": "in/*.wav", "win_len": 64, "splits": "train=60,test=40"},
        versions={"audiorecords": "0.1.0"},
        created_utc="2026-11-25T10:00:00+00:00",
        split_names=["train", "test"],
        analyzed_splits=["train"],
        moments={"log_mel": Moments(count=72, total=-108, total_sq=45)},
    )
    # json.loads keeps the literal's key order: equal texts mean equal keys, order and values.
    assert json.dumps(manifest) == json.dumps(json.loads(MANIFEST_TEXT))


@pytest.mark.parametrize(
    ("split", "index", "count", "compression", "name"),
    [
        ("train", 3, 16, "GZIP", "birds-train.tfrecord-00003-of-00016.gz"),
        ("test", 0, 1, "ZLIB", "birds-test.tfrecord-00000-of-00001.zlib"),
        ("all", 1, 4, "NONE", "birds.tfrecord-00001-of-00004"),
        (None, 0, 2, "NONE", "birds.tfrecord-00000-of-00002"),
    ],
)
def test_shard_file_names_are_pinned(split, index, count, compression, name):
    """Pins shard file names (split in the name unless "all", 5-digit index and count,
    compression suffix) and their parse back to name, split, index and count."""
    got = fmt.shard_filename(
        name="birds", split=split, index=index, num_shards=count, compression=compression
    )
    assert got == name
    assert fmt.parse_shard_filename(name) == {
        "name": "birds",
        "split": split or "all",
        "index": index,
        "num_shards": count,
    }


@pytest.mark.parametrize("version", [5, 4, 3, 2])
def test_load_info_reads_the_pinned_manifest_text(tmp_path, version):
    """Pins the reader's view of the literal manifest: splits in order, shard names, counts,
    classes, the element specs (stored dtype, computed z-score key), and the source files and
    errors (v3: from the literal tables, v2: from the manifest)."""
    if version >= 3:
        text = {5: MANIFEST_TEXT, 4: v4_manifest_text(), 3: v3_manifest_text()}[version]
        (tmp_path / "manifest.json").write_text(text)
        (tmp_path / "files.jsonl").write_text(FILES_TEXT)
        (tmp_path / "errors.jsonl").write_text(ERRORS_TEXT)
    else:
        (tmp_path / "manifest.json").write_text(v2_manifest_text())
    for name, size in (
        ("birds-train.tfrecord-00000-of-00002.gz", 600),
        ("birds-train.tfrecord-00001-of-00002.gz", 840),
        ("birds-test.tfrecord-00000-of-00001.gz", 360),
    ):
        (tmp_path / name).write_bytes(b"\0" * size)
    info = load_info(tmp_path)
    assert info.splits == ("train", "test")
    assert [s.filename for s in info.shard_list("train")] == [
        "birds-train.tfrecord-00000-of-00002.gz",
        "birds-train.tfrecord-00001-of-00002.gz",
    ]
    assert [s.num_examples for s in info.shard_list()] == [5, 7, 3]
    assert info.num_examples() == 15 and info.num_examples("test") == 3
    assert info.classes == ("cat", "dog") and info.num_classes == 2
    assert info.compression == "GZIP" and info.format_version == version
    assert (info.num_files, info.num_errors) == (2, 2)
    assert info.elements["log_mel"] == fmt.ElementSpec("float32", (2, 3), "raw", "float16")
    norm = info.elements["log_mel_norm"]
    assert (norm.encoding, norm.z_score) == ("z_score", fmt.ZScore("log_mel", -1.5, 0.25))
    assert [f["path"] for f in info.files] == ["in/a_1_cat.wav", "in/b_2_dog.wav"]
    assert [e["reason"] for e in info.errors] == ["not a RIFF file", "truncated"]
    assert info.version == 1 and [c["dir"] for c in info.commits] == [""]
    assert info.commits[0]["input_pattern"] == "in/*.wav"
