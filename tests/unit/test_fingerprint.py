"""``--resume``'s fingerprint (`pipelines.resume.fingerprint`): what a difference between the
stored run and the new one is called, in one line; and ``--resume`` with ``--overwrite`` refused
up front.

The naming rules on made-up stamps, then the fingerprint of real plans (files on disk, planned
by `pipelines.plan`, stored as JSON): the same inputs give the same one, a touched input, another
read-task cut (another runner), a changed label CSV or class file a named difference."""

from __future__ import annotations

import json

import pytest

from pipelines.config import RecordConfig, UsageError
from pipelines.resume import fingerprint

STAMPS = [("in/b.wav", 20, 2.0), ("in/a.wav", 10, 1.0)]


def _fp(params=None, stamps=STAMPS, derived=None, version="1.0"):
    return fingerprint.fingerprint(
        params or {"win_len": 4000}, stamps, derived=derived or {"tasks": [1]}, version=version
    )


def test_the_same_plan_has_no_difference_and_inputs_are_sorted():
    assert fingerprint.first_difference(_fp(), _fp(stamps=list(reversed(STAMPS)))) is None
    assert _fp()["inputs"]["paths"] == ["in/a.wav", "in/b.wav"]
    assert fingerprint.input_stamps(_fp()["inputs"]) == {p: (s, m) for p, s, m in STAMPS}


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

    from transforms.spec.types import FileAnnotation

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


def test_options_compare_as_json_values():
    assert fingerprint.option_difference({"features": ["a"]}, {"features": ("a",)}) is None
    said = fingerprint.option_difference({"win_len": 1}, {"win_len": 2})
    assert said == "option --win_len changed (1 -> 2)"


def test_a_changed_shard_func_changes_the_digest():
    def by(k):
        return lambda e: (e["index"] + k) % 4

    digests = {
        fingerprint.function_digest(f)
        for f in (lambda e: e["index"] % 4, lambda e: (e["index"] + 1) % 4, by(0), by(1))
    }
    assert len(digests) == 4
    assert fingerprint.function_digest(by(2)) == fingerprint.function_digest(by(2))


# --- real stamps and real plans: files on disk, planned by pipelines.plan ---------------------

WIN_LEN = 1024
WINDOWS = 40  # per file: 6 files, 240 windows, read tasks of 64 (plan.MIN_TASK_ROWS): 4 tasks


def _corpus(directory, *, files=6):
    from tests.support import wavgen

    return wavgen.two_class_corpus(directory, files=files, num_frames=WINDOWS * WIN_LEN + 5)


def _config(pattern, out, **options):
    return RecordConfig(
        input_pattern=pattern, output_dir=str(out), win_len=WIN_LEN, num_shards=3, **options
    )


def _plan(config):
    """The plan `pipelines.job` starts from: planning's own steps (one core: tasks of
    `plan.MIN_TASK_ROWS` here on any machine)."""
    from pipelines.plan import scan_inputs, size_tasks

    return size_tasks(config, scan_inputs(config), cpu_count=1)


def _stored(plan):
    """The fingerprint `pipelines.resume.output_dir.start_output_dir` makes of `plan`, as it reads
    back from ``.tmp/resume.json`` (written and read as JSON)."""
    import json

    made = fingerprint.fingerprint(
        plan.params, plan.input_stamps, derived=fingerprint.derived(plan)
    )
    return json.loads(json.dumps(made, indent=1))


def test_match_stamped_gives_each_files_size_and_modification_time(tmp_path):
    import os

    from pipelines.plan.reads import match_stamped

    pattern = _corpus(tmp_path / "in")
    (tmp_path / "in" / "x.flac").write_bytes(b"not audio")  # braces: both kinds, one sorted list
    stamps = match_stamped(str(tmp_path / "in" / "*.{wav,flac}"))
    paths = sorted([*sorted(tmp_path.glob("in/*.wav")), tmp_path / "in" / "x.flac"], key=str)
    assert [p for p, _, _ in stamps] == [str(p) for p in paths]
    for path, size, mtime in stamps:
        stat = os.stat(path)
        assert (size, mtime) == (stat.st_size, os.path.getmtime(path)), path
    assert match_stamped(pattern) == [s for s in stamps if s[0].endswith(".wav")]
    twice = match_stamped(str(tmp_path / "in" / "*.{wav,flac,wav}"))  # alternatives overlap
    assert twice == stamps
    first = paths[0]
    stat = os.stat(first)
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    moved = dict((p, m) for p, _, m in match_stamped(pattern))[str(first)]
    assert moved == os.path.getmtime(first) != dict((p, m) for p, _, m in stamps)[str(first)]


def test_the_same_inputs_planned_twice_have_the_same_fingerprint(tmp_path):
    """Planning is deterministic as the fingerprint sees it: no address, set order or time in
    `derived`, and the stamps read back from JSON as they were (floats included)."""
    config = _config(_corpus(tmp_path / "in"), tmp_path / "out")
    first, again = _plan(config), _plan(config)
    assert len(first.tasks) == 4 and first.input_stamps
    assert fingerprint.derived(first) == fingerprint.derived(again)
    assert fingerprint.first_difference(_stored(first), _stored(again)) is None
    stored = _stored(first)
    assert fingerprint.input_stamps(stored["inputs"]) == {
        p: (s, m) for p, s, m in first.input_stamps
    }


def test_an_input_modified_in_place_is_refused_by_its_time(tmp_path):
    """Same size, same bytes, same plan: only the modification time says the input changed."""
    import os

    config = _config(_corpus(tmp_path / "in"), tmp_path / "out")
    before = _stored(_plan(config))
    first = sorted(tmp_path.glob("in/*.wav"))[0]
    stat = os.stat(first)
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    now = _stored(_plan(config))
    assert now["plan"] == before["plan"]  # nothing else tells them apart
    said = fingerprint.first_difference(before, now)
    assert said == f"input changed: {first} (modified since the run started)"
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert fingerprint.first_difference(before, _stored(_plan(config))) is None


def test_another_read_task_cut_changes_the_plan(tmp_path):
    """A run of two in-memory workers (the planned read tasks) resumed on the default runner
    (one task: `plan.one_task`): the same options, inputs and segments, only the tasks' cut
    differs, and the resumed run must be refused (else it reads in the old tasks' part files
    as if they were its own, and fails inside the read stage)."""
    import runners
    from pipelines.plan import one_task
    from runners.internals import JobOptions

    def sequential(*argv):
        options = JobOptions(list(argv))
        runners.configure(options, input_bytes=1, argv=list(argv))
        return runners.sequential_tasks(options)

    workers = ["--direct_running_mode", "in_memory", "--direct_num_workers", "2"]
    assert not sequential(*workers) and sequential()  # what pipelines.job.run_job asks
    config = _config(_corpus(tmp_path / "in"), tmp_path / "out")
    planned = _plan(config)
    merged = one_task(planned)
    assert (len(planned.tasks), len(merged.tasks)) == (4, 1)
    assert [s for t in planned.tasks for s in t.segments] == list(merged.tasks[0].segments)
    said = fingerprint.first_difference(_stored(planned), _stored(merged))
    assert said is not None and said.startswith("the plan changed"), said


def test_a_changed_label_csv_or_class_file_changes_the_plan(tmp_path):
    """Files planning reads but does not stamp: a label CSV and a ``--classes @FILE`` list."""
    pattern = _corpus(tmp_path / "in", files=4)
    names = sorted(p.name for p in tmp_path.glob("in/*.wav"))
    labels, classes = tmp_path / "labels.csv", tmp_path / "classes.txt"
    labels.write_text(
        "filename,label\n" + "".join(f"{n},{'xy'[i % 2]}\n" for i, n in enumerate(names))
    )
    classes.write_text("x\ny\n")
    config = _config(pattern, tmp_path / "out", label_source=f"csv:{labels}", classes=f"@{classes}")
    before = _stored(_plan(config))
    assert fingerprint.first_difference(before, _stored(_plan(config))) is None
    labels.write_text("filename,label\n" + "".join(f"{n},x\n" for n in names))
    relabelled = _stored(_plan(config))
    assert fingerprint.first_difference(before, relabelled).startswith("the plan changed")
    classes.write_text("y\nx\n")  # the same names, other ids
    reordered = _stored(_plan(config))
    assert fingerprint.first_difference(relabelled, reordered).startswith("the plan changed")


# --- the digest and the file made in pieces: the same fingerprint as made whole --------------


def _derived_whole(plan):
    """`fingerprint.derived` as it was made whole: every file's and segment's list at once (the
    form resume records already on disk were digested from)."""
    func = plan.sharding.shard_func
    return {
        "inputs": [[f.index, f.path, f.label, f.split, f.error] for f in plan.inputs],
        "annotations": [
            [f.index, fingerprint.annotation_digest(f.annotation)]
            for f in plan.inputs
            if f.annotation is not None
        ],
        "classes": list(plan.classes),
        "signal_dtype": plan.read.signal_dtype,
        "num_shards": dict(sorted(plan.sharding.num_shards.items())),
        "shard_func": None if func is None else fingerprint.function_digest(func),
        "tasks": [
            [t.task_id, [[s.file.index, s.row_start, s.row_stop, s.split_rank] for s in t.segments]]
            for t in plan.tasks
        ],
    }


def _whole_digest(plan):
    import hashlib
    import json

    text = json.dumps(_derived_whole(plan), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_plan_digest_made_in_pieces_is_the_digest_of_the_whole(tmp_path):
    """Runs planned before the digest was made in pieces still match: the same hex digest, for
    planned and merged tasks, a refused file, a shard_func and annotations."""
    import dataclasses
    from types import SimpleNamespace

    import numpy as np

    from pipelines.plan import one_task

    pattern = _corpus(tmp_path / "in")
    (tmp_path / "in" / "bad.wav").write_bytes(b"RIFF not a wave")
    planned = _plan(_config(pattern, tmp_path / "out", splits="train=50,test=50"))
    assert any(f.error for f in planned.inputs) and len(planned.tasks) > 1
    sharded = dataclasses.replace(
        planned, sharding=dataclasses.replace(planned.sharding, shard_func=lambda e: 0)
    )
    annotated = _annotated_plan(np.zeros((3, 1, 3), np.int64))
    segment = SimpleNamespace(file=annotated.inputs[0], row_start=0, row_stop=3, split_rank=0)
    annotated.tasks = [SimpleNamespace(task_id=0, segments=[segment])]
    for plan in (planned, one_task(planned), sharded, annotated):
        assert fingerprint.plan_digest(plan) == _whole_digest(plan)
        assert fingerprint.derived(plan) == _derived_whole(plan)
        made = fingerprint.fingerprint({}, [], derived=fingerprint.derived(plan), version="1")
        assert made["plan"] == _whole_digest(plan)


def test_list_pieces_make_json_dumps_text_at_any_chunk():
    import json

    rows = [("a\u00e9", 1, 2.5), ("b", None, 1e-9), ("c\n", 3, 4.0)] * 3
    for chunk in (1, 2, 4, 100):
        for dumps in (json.dumps, fingerprint._json):
            text = "".join(fingerprint._list_pieces(iter(rows), dumps, chunk=chunk))
            assert text == dumps(rows)
        assert "".join(fingerprint._list_pieces(iter([]), json.dumps, chunk=chunk)) == "[]"


def test_a_version_1_resume_record_still_resumes_and_names_a_difference(tmp_path):
    """A run's ``.tmp/resume.json`` as version 1 wrote it (the inputs a list of [path, size,
    time], one JSON text) and as it is written now (columns, in pieces) read back as
    fingerprints of the same plan: ``--resume`` of an unfinished run of either continues it,
    and a changed input is named in either."""
    config = _config(_corpus(tmp_path / "in"), tmp_path / "out")
    plan = _plan(config)
    stamps = plan.input_stamps
    now = fingerprint.fingerprint(plan.params, stamps, derived=fingerprint.plan_digest(plan))
    old_text = json.dumps(
        {
            **now,
            "fingerprint_version": 1,
            "inputs": [[p, int(s), float(m)] for p, s, m in sorted(stamps)],
            "plan": _whole_digest(plan),
        },
        indent=1,
    )
    new_text = b"".join(fingerprint.json_pieces(now)).decode()
    assert json.loads(new_text) == json.loads(json.dumps(now))
    assert fingerprint.first_difference(json.loads(old_text), now) is None
    assert fingerprint.first_difference(json.loads(new_text), now) is None
    (out := tmp_path / "out" / ".tmp").mkdir(parents=True)
    (out / "resume.json").write_text(new_text)
    assert fingerprint.read_fingerprint(str(tmp_path / "out")) == json.loads(new_text)
    path, size, mtime = sorted(stamps)[0]
    touched = [(path, size, mtime + 1), *sorted(stamps)[1:]]
    later = fingerprint.fingerprint(plan.params, touched, derived=fingerprint.plan_digest(plan))
    said = f"input changed: {path} (modified since the run started)"
    assert fingerprint.first_difference(json.loads(old_text), later) == said
    assert fingerprint.first_difference(json.loads(new_text), later) == said
    unknown = {**json.loads(new_text), "fingerprint_version": 3}
    assert fingerprint.first_difference(unknown, now) == "its resume record has version 3"
    broken = {**json.loads(new_text), "inputs": {"paths": [path], "sizes": [], "modified": "?"}}
    assert fingerprint.first_difference(broken, now) == "its resume record is malformed"


def test_input_columns_read_back_exactly():
    """The times go as float64 bytes: every float reads back equal, sizes as ints, sorted by
    path; no input is an empty set of columns."""
    stamps = [("b", 2, 1795819391.7756715), ("a\u00e9\n", 1, 0.1 + 0.2), ("c", 3, 1e-300)]
    columns = fingerprint.input_columns(stamps)
    assert columns["paths"] == ["a\u00e9\n", "b", "c"] and columns["sizes"] == [1, 2, 3]
    expected = {p: (s, m) for p, s, m in stamps}
    assert fingerprint.input_stamps(columns) == expected
    assert fingerprint.input_stamps(json.loads(json.dumps(columns))) == expected
    assert fingerprint.input_columns([]) == {"paths": [], "sizes": [], "modified": ""}
    assert fingerprint.input_stamps(fingerprint.input_columns([])) == {}
    with pytest.raises(ValueError):
        fingerprint.input_stamps({"paths": ["a"], "sizes": [1, 2], "modified": ""})


def test_the_listing_digest_covers_each_files_label_split_and_refusal(tmp_path):
    """A run planned in the job: its listing's digest (columns) changes with any file's label,
    split, refusal, index or path (paths cut elsewhere included), with the classes and the
    cut; version 1's is the digest of the listing's JSON file by file."""
    import dataclasses
    import itertools

    from pipelines.plan import list_inputs

    config = _config(_corpus(tmp_path / "in"), tmp_path / "out")
    listed = list_inputs(config)
    cut = {"cpu_count": 1, "single_task": True}
    digest = fingerprint.listing_digest(listed, cut=cut)
    assert digest == fingerprint.listing_digest(list_inputs(config), cut=cut)
    first, *rest = listed.inputs

    def with_files(*files):
        return fingerprint.listing_digest(dataclasses.replace(listed, inputs=files), cut=cut)

    others = {
        with_files(dataclasses.replace(first, label="other"), *rest),
        with_files(dataclasses.replace(first, split="test"), *rest),
        with_files(dataclasses.replace(first, error="no label"), *rest),
        with_files(dataclasses.replace(first, index=99), *rest),
        with_files(dataclasses.replace(first, path=first.path + "x"), *rest),
        fingerprint.listing_digest(listed, cut={**cut, "cpu_count": 2}),
        fingerprint.listing_digest(dataclasses.replace(listed, classes=("z",)), cut=cut),
    }
    assert digest not in others and len(others) == 7
    assert with_files(
        dataclasses.replace(first, path="ab"), dataclasses.replace(first, path="c")
    ) != with_files(dataclasses.replace(first, path="a"), dataclasses.replace(first, path="bc"))
    old = fingerprint._digest(
        itertools.chain(
            fingerprint._derived_pieces(listed, headers=False), [fingerprint._json(cut)]
        )
    )
    assert fingerprint.listing_digest(listed, cut=cut, version=1) == old != digest
