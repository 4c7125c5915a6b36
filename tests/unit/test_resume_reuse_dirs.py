"""``--resume``'s directory states (`pipelines.resume.reuse`): a finished dataset is left untouched
only once it is checked to be one of ours of the same options and format that reads back, its
errors table included (the run's result is made from it)."""

from __future__ import annotations

import pytest

from pipelines.config import UsageError
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
