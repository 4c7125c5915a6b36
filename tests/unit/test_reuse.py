"""``--resume``'s directory states (`pipelines.resume.reuse`): a finished dataset is left untouched
only once it is checked to be one of ours of the same options and format that reads back, its
errors table included (the run's result is made from it); the job's own outputs (anything else
in the directory is named), the annotation tables' bad rows among the errors, and the commit
records' directory and version the read stage writes."""

from __future__ import annotations

import pytest

from pipelines.config import UsageError
from pipelines.resume import reuse
from pipelines.resume.reuse import finished_dataset
from tests.support.replay_fixtures import write_dataset


def test_a_finished_dataset_is_taken_as_it_is(tmp_path):
    expected = write_dataset(tmp_path, with_features=False)
    info = finished_dataset(str(tmp_path), expected["manifest"]["params"])
    assert info is not None and [dict(e) for e in info.errors] == expected["errors"]


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda b: b.replace(b"not a RIFF file", b"not a RIFF fil3"), "table's SHA-256 is"),
        (lambda b: b[:-5], "table is 47 bytes but the manifest says 52"),
        (lambda b: b + b'{"path":"/data/x.wav","reason":"no"}\n', "table is 89 bytes"),
    ],
    ids=["rewritten", "cut", "appended"],
)
def test_a_finished_dataset_whose_errors_table_was_tampered_with_is_refused(tmp_path, edit, said):
    """The errors table is read and checked against the manifest before the dataset is taken
    as finished: a tampered ``errors.jsonl`` is refused in one line naming it."""
    expected = write_dataset(tmp_path, with_features=False)
    table = tmp_path / "errors.jsonl"
    table.write_bytes(edit(table.read_bytes()))
    with pytest.raises(UsageError) as e:
        finished_dataset(str(tmp_path), expected["manifest"]["params"])
    message = str(e.value)
    assert message.startswith(f"--resume: {tmp_path} does not read back ({table}: "), message
    assert said in message and message.endswith("rerun with --overwrite to make it again")


def test_the_launcher_and_the_stage_agree_on_commit_records():
    from transforms.stages import record_parts
    from transforms.stages import task_commits as stage

    assert (reuse.COMMITS_DIR, reuse.COMMIT_VERSION) == (stage.COMMITS_DIR, stage.COMMIT_VERSION)
    assert reuse.PARTS_DIR == record_parts.PARTS_DIR  # the launcher checks records' part paths


def test_bad_table_rows_are_the_errors_of_annotation_tables():
    errors = [
        {"path": "in/a.wav", "reason": "not a WAV"},
        {"path": "t/x.csv:3", "reason": "no label"},
        {"path": "t/y.csv", "reason": "no header"},
        {"path": "t/z.csv:4", "reason": "not a table of this run"},
    ]
    assert reuse.bad_table_rows(errors, ["t/x.csv", "t/y.csv"]) == 2


def test_only_the_jobs_own_outputs_are_known():
    known = reuse.job_outputs("ds", {"train": 2})
    names = ["manifest.json", "ds-train.tfrecord-00001-of-00002.gz", "transform_fn/"]
    names += ["manifest.json.tmp-0123abcd", ".tmp", "notes.txt", "ds-train.tfrecord-00002-of-00002"]
    assert reuse.unknown_entries(names, known.__contains__) == [
        "ds-train.tfrecord-00002-of-00002",
        "notes.txt",
    ]


def test_without_shard_counts_any_shard_of_the_dataset_is_its_own():
    """A run planned in the job: the launcher knows the dataset's name, not its shard counts."""
    names = ["manifest.json", "ds-train.tfrecord-00001-of-00002.gz", "transform_fn/", ".tmp"]
    names += ["ds.tfrecord-00007-of-00009.tmp-0123abcd", "ds-test.tfrecord-00000-of-00001"]
    names += ["other-train.tfrecord-00000-of-00001", "notes.txt", "ds-train.tfrecord-1-of-2"]
    assert reuse.unknown_entries(names, reuse.named_output("ds")) == [
        "ds-train.tfrecord-1-of-2",
        "notes.txt",
        "other-train.tfrecord-00000-of-00001",
    ]
