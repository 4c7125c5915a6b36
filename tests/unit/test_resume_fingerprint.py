"""``--resume``'s fingerprint (`pipelines.fingerprint`): what a difference between the stored run
and the new one is called, in one line; and ``--resume`` with ``--overwrite`` refused up front."""

from __future__ import annotations

import pytest

from pipelines import fingerprint, resume
from pipelines.config import RecordConfig, UsageError

STAMPS = [("in/b.wav", 20, 2.0), ("in/a.wav", 10, 1.0)]


def _fp(params=None, stamps=STAMPS, derived=None, version="1.0"):
    return fingerprint.fingerprint(
        params or {"win_len": 4000}, stamps, derived=derived or {"tasks": [1]}, version=version
    )


def test_the_same_plan_has_no_difference_and_inputs_are_sorted():
    assert fingerprint.first_difference(_fp(), _fp(stamps=list(reversed(STAMPS)))) is None
    assert [p for p, _, _ in _fp()["inputs"]] == ["in/a.wav", "in/b.wav"]


@pytest.mark.parametrize(
    ("new", "said"),
    [
        (_fp(version="1.1"), "the package version changed (1.0 -> 1.1)"),
        (_fp(params={"win_len": 8000}), "option --win_len changed (4000 -> 8000)"),
        (_fp(stamps=[*STAMPS, ("in/c.wav", 1, 1.0)]), "input added: in/c.wav"),
        (_fp(stamps=STAMPS[:1]), "input removed: in/a.wav"),
        (_fp(stamps=[STAMPS[0], ("in/a.wav", 11, 1.0)]), "input changed: in/a.wav (size 10 -> 11)"),
        (
            _fp(stamps=[STAMPS[0], ("in/a.wav", 10, 5.0)]),
            "input changed: in/a.wav (modified since the run started)",
        ),
        (_fp(derived={"tasks": [2]}), "the plan changed"),
    ],
)
def test_the_first_difference_is_named(new, said):
    assert fingerprint.first_difference(_fp(), new).startswith(said)


def test_resume_and_overwrite_exclude_each_other():
    with pytest.raises(UsageError, match="--resume and --overwrite exclude each other"):
        RecordConfig(input_pattern="x", output_dir="y", resume=True, overwrite=True)
    assert "resume" not in RecordConfig(input_pattern="x", output_dir="y", resume=True).params()


def _annotated_plan(events):
    from types import SimpleNamespace

    import numpy as np

    from transforms.planning.annotation_plan import FileAnnotation

    n = len(events)
    annotation = FileAnnotation(
        starts=np.arange(n, dtype=np.int64),
        channels=1,
        classes=("a",) * n,
        labels=np.zeros((n, 1), np.float32),
        events=events,
        num_events=np.ones(n, np.int64),
    )
    inputs = [SimpleNamespace(index=0, path="a.wav", label="a", split="train", error=None)]
    inputs[0].annotation = annotation
    return SimpleNamespace(
        inputs=inputs,
        classes=("a",),
        read=SimpleNamespace(signal_dtype="int16"),
        sharding=SimpleNamespace(shard_func=None, num_shards={"train": 1}),
        tasks=[],
    )


def test_an_annotation_edit_past_numpys_repr_cut_changes_the_plan():
    import numpy as np

    events = np.zeros((2000, 1, 3), np.int64)  # 6,000 elements: numpy's repr shows "..."
    edited = events.copy()
    edited[1000, 0, 1] = 7
    old = fingerprint.derived(_annotated_plan(events))
    new = fingerprint.derived(_annotated_plan(edited))
    assert old != new
    fp_old, fp_new = _fp(derived=old), _fp(derived=new)
    assert fingerprint.first_difference(fp_old, fp_new).startswith("the plan changed")
    assert fingerprint.derived(_annotated_plan(events.copy())) == old


def test_the_launcher_and_the_stage_agree_on_commit_records():
    from transforms.record import record_parts
    from transforms.record import resume as stage

    assert (resume.COMMITS_DIR, resume.COMMIT_VERSION) == (stage.COMMITS_DIR, stage.COMMIT_VERSION)
    assert resume.PARTS_DIR == record_parts.PARTS_DIR  # the launcher checks records' part paths


def test_bad_table_rows_are_the_errors_of_annotation_tables():
    errors = [
        {"path": "in/a.wav", "reason": "not a WAV"},
        {"path": "t/x.csv:3", "reason": "no label"},
        {"path": "t/y.csv", "reason": "no header"},
        {"path": "t/z.csv:4", "reason": "not a table of this run"},
    ]
    assert resume.bad_table_rows(errors, ["t/x.csv", "t/y.csv"]) == 2


def test_options_compare_as_json_values():
    assert fingerprint.option_difference({"features": ["a"]}, {"features": ("a",)}) is None
    said = fingerprint.option_difference({"win_len": 1}, {"win_len": 2})
    assert said == "option --win_len changed (1 -> 2)"


def test_only_the_jobs_own_outputs_are_known():
    known = resume.job_outputs("ds", {"train": 2})
    names = ["manifest.json", "ds-train.tfrecord-00001-of-00002.gz", "transform_fn/"]
    names += ["manifest.json.tmp-0123abcd", ".tmp", "notes.txt", "ds-train.tfrecord-00002-of-00002"]
    assert resume.unknown_entries(names, known) == ["ds-train.tfrecord-00002-of-00002", "notes.txt"]


def test_a_changed_shard_func_changes_the_digest():
    def by(k):
        return lambda e: (e["index"] + k) % 4

    digests = {
        fingerprint.function_digest(f)
        for f in (lambda e: e["index"] % 4, lambda e: (e["index"] + 1) % 4, by(0), by(1))
    }
    assert len(digests) == 4
    assert fingerprint.function_digest(by(2)) == fingerprint.function_digest(by(2))
