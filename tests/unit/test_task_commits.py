"""``--resume``'s reuse of a committed task (`transforms.stages.task_commits.ReusedRecords`): its
stored moments go to the analysis and none of its rows is read back for it (only the AUTO
compression samples, as far as the last of them); its part paths are relative to the output
directory it is resumed in; the read stage's task records keep each piece's moments and errors.
Which records `pipelines.resume.reuse.plan_reuse` takes: this version's, naming only the task's own
parts in this directory, whose bytes are all on disk."""

from __future__ import annotations

import numpy as np
import pytest

from replay import format as fmt
from transforms.spec.layout import RecordLayout
from transforms.stages import task_commits
from transforms.stages.moments import Moments, row_sums

LAYOUT = RecordLayout(feature_shapes={"f": (2,)})


def _no_summary(seg, windows):  # TaskRecords' summary of a segment read: none read here
    raise AssertionError("no segment is read in these tests")


def _example(index: int, start: int) -> bytes:
    import tensorflow as tf

    def b(v: bytes) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    def i(v: int) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    features = {
        fmt.CLASS_KEY: b(b"a"),
        fmt.FILEPATH_KEY: b(f"in/{index}.wav".encode()),
        fmt.INDEX_KEY: i(index),
        fmt.WIN_START_KEY: i(start),
        fmt.SIGNAL_KEY: b(np.array([start, start], "<i2").tobytes()),
        "f": b(np.array([start, -start], "<f4").tobytes()),
    }
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString()


def _reused(output_dir) -> task_commits.ReusedRecords:
    from transforms.stages.progress import ProgressFile

    return task_commits.ReusedRecords(
        LAYOUT,
        output_dir=str(output_dir),
        progress=ProgressFile(str(output_dir)),
    )


def _record(parts: dict[str, list[bytes]], moments: dict | None = None) -> dict:
    return {
        "version": task_commits.COMMIT_VERSION,
        "task": 0,
        "start": 0,
        "stop": 1,
        "counts": {},
        "moments": {} if moments is None else moments,
        "parts": [
            {"split": "train", "shard": k, "task": 0, "path": path, "rows": len(v), "runs": []}
            for k, (path, v) in enumerate(parts.items())
        ],
        "files": [],
        "errors": [],
        "sampled": [],
        "windows": 0,
    }


def _reading(parts: dict[str, list[bytes]], taken: list) -> object:
    """A stand-in for `task_commits._records` over in-memory parts that notes each record taken."""

    def records(path, offset, size, **_):
        for raw in parts[path.rsplit("/", 1)[-1]]:
            taken.append(raw)
            yield raw

    return records


def test_reuse_hands_the_stored_moments_and_reads_no_row_back(tmp_path, monkeypatch):
    parts = {"p0": [_example(0, s) for s in range(0, 40, 2)], "p1": [_example(0, 1)]}
    taken = []
    monkeypatch.setattr(task_commits, "_records", _reading(parts, taken))
    moments = {"f": Moments.of_rows(np.arange(40, dtype=np.float32).reshape(20, 2))}
    record = _record(parts, {"f": moments["f"].to_json()})
    out = list(_reused(tmp_path).outputs(record))
    assert taken == []  # no sample wanted: no part is opened
    assert [o for o in out if not hasattr(o, "tag")] == []  # no row for TFT
    assert [o.value for o in out if o.tag == task_commits.STATS_TAG] == [moments]


def test_samples_are_read_back_only_as_far_as_the_last_sampled_row(tmp_path, monkeypatch):
    parts = {"p0": [_example(0, s) for s in range(0, 40, 2)], "p1": [_example(0, 1)]}
    taken = []
    monkeypatch.setattr(task_commits, "_records", _reading(parts, taken))
    record = {**_record(parts), "sampled": [[0, 0, 0], [0, 4, 0]]}
    out = list(_reused(tmp_path).outputs(record))
    samples = [o.value for o in out if o.tag == task_commits.SAMPLES_TAG]
    rows = [task_commits._parse(_example(0, s)) for s in (0, 4)]
    assert samples == [task_commits.sample_bytes(row, LAYOUT) for row in rows]
    assert len(taken) <= 4 + 1  # rows 0, 2, 4 and the one past them; p1's row 1


def test_task_records_keep_each_pieces_moments_and_the_commit_the_whole_tasks(tmp_path):
    import json

    from transforms.spec.types import ReadTask
    from transforms.stages.record_parts import PartWriter

    def batch(values: np.ndarray) -> tuple[dict, int]:  # as the read stage hands them
        return {"f": row_sums(values)}, len(values)

    rng = np.random.default_rng(3)
    values = (rng.standard_normal((9, 2)) * 1e3).astype(np.float32)
    task = ReadTask(0, segments=(None, None))
    done = task_commits.TaskRecords(str(tmp_path), task, {"f": (2,)}, summary=_no_summary)
    with PartWriter(str(tmp_path), 0) as writer:
        done.analysed(*batch(values[:4]))
        writer.write("train", 0, path="in/0.wav", records=[_example(0, 0)])
        first = done.checkpoint(1, parts=writer.checkpoint(), written=writer.written)
        done.analysed(*batch(values[4:7]))
        done.analysed(*batch(values[7:]))
        rest = done.commit(parts=writer.commit())
    assert first == {"f": Moments.of_rows(values[:4])}
    assert rest == {"f": Moments.of_rows(values[4:])}
    commits = tmp_path / ".tmp" / "commits"
    piece = json.loads((commits / "000000-000000-000001.json").read_text())
    whole = json.loads((commits / "000000-000000-000002.json").read_text())
    assert piece["moments"] == {"f": Moments.of_rows(values[:4]).to_json()}
    assert whole["moments"] == {"f": Moments.of_rows(values).to_json()}
    # a task continued from the piece: its commit still holds the whole task's moments
    (commits / "000000-000000-000002.json").unlink()
    continued = ReadTask(0, segments=(None,), start=1, resumed=(piece,))
    again = task_commits.TaskRecords(str(tmp_path), continued, {"f": (2,)}, summary=_no_summary)
    again.analysed(*batch(values[4:]))
    with PartWriter(str(tmp_path), 0) as writer:
        writer.write("train", 0, path="in/0.wav", records=[_example(0, 1)])
        assert again.commit(parts=writer.commit()) == rest
    assert (
        json.loads((commits / "000000-000000-000002.json").read_text())["moments"]
        == whole["moments"]
    )


def test_commit_records_hold_relative_part_paths_resolved_in_the_resumed_dir(tmp_path):
    import json
    import shutil

    from pipelines.resume.reuse import plan_reuse
    from transforms.spec.types import ReadTask
    from transforms.stages.record_parts import PartWriter

    task = ReadTask(0, segments=(None,))  # one segment (reuse looks at its count only)

    out, copy = tmp_path / "out", tmp_path / "copy"
    with PartWriter(str(out), 0) as writer:
        writer.write("train", 0, path="in/0.wav", records=[_example(0, s) for s in range(3)])
        parts = writer.commit()
    task_commits.commit_record(
        str(out),
        0,
        start=0,
        stop=1,
        parts=parts,
        files=[],
        errors=[],
        sampled=[],
        counts={},
        moments={"f": Moments.of_rows(np.ones((3, 2), np.float32))},
    )
    name = "000000-000000-000001.json"
    stored = json.loads((out / ".tmp" / "commits" / name).read_text())
    assert [p["path"] for p in stored["parts"]] == [".tmp/parts/train/00000/000000.records"]
    shutil.copytree(out, copy)  # `cp -r out copy`, then --resume --output_dir copy
    shutil.rmtree(out)
    ((record,),) = [t.resumed for t in plan_reuse(str(copy), [task]).tasks]
    fn = _reused(copy)
    emitted = list(fn.outputs(record))
    stats = [o.value for o in emitted if o.tag == task_commits.STATS_TAG]
    assert stats == [{"f": Moments.of_rows(np.ones((3, 2), np.float32))}]
    tagged = [o.value for o in emitted if getattr(o, "tag", None) == task_commits.PARTS_TAG]
    assert [p["path"] for p in tagged] == [f"{copy}/{stored['parts'][0]['path']}"]

    for path in (
        f"{out}/{stored['parts'][0]['path']}",
        ".tmp/parts/../../x/a",
        "gs://b/.tmp/parts/a",
    ):
        foreign = {**stored, "parts": [{**stored["parts"][0], "path": path}]}
        (copy / ".tmp" / "commits" / name).write_text(json.dumps(foreign))
        assert plan_reuse(str(copy), [task]).tasks == (task,), path


def test_samples_are_the_rows_the_read_stage_sampled_two_segments_of_one_file(
    tmp_path, monkeypatch
):
    """The read stage samples the first row of each segment: a file cut into two segments of
    one task has two samples, found back by their row keys (not the file's first row twice)."""
    parts = {"p0": [_example(0, s) for s in range(6)]}
    monkeypatch.setattr(task_commits, "_records", lambda path, offset, size, **_: iter(parts["p0"]))
    record = {**_record(parts), "sampled": [[0, 0, 0], [0, 3, 0]]}
    samples = [
        o.value
        for o in _reused(tmp_path).outputs(record)
        if getattr(o, "tag", None) == task_commits.SAMPLES_TAG
    ]
    rows = [task_commits._parse(_example(0, s)) for s in (0, 3)]
    assert samples == [task_commits.sample_bytes(row, LAYOUT) for row in rows]
    assert samples[0] != samples[1]


def test_read_back_buffers_share_a_budget(tmp_path, monkeypatch):
    blocks = []

    def records(path, offset, size, *, block_bytes):
        blocks.append(block_bytes)
        return iter([])

    monkeypatch.setattr(task_commits, "_records", records)
    parts = {f"p{k}": [] for k in range(256)}
    list(_reused(tmp_path).outputs({**_record(parts), "sampled": [[0, 0, 0]]}))
    assert len(blocks) == 256 and max(blocks) * 256 <= max(task_commits.READ_BACK_BYTES, 256 << 16)


def test_a_checkpointed_part_keeps_its_temporary_name_when_committed(tmp_path):
    """Checkpoint records name a part's temporary file: the commit links its final name to it
    (a copy without hard links), so a kill between the commit and its record loses nothing."""
    from transforms.stages.record_parts import PartWriter

    with PartWriter(str(tmp_path), 0) as writer:
        writer.write("train", 0, path="in/0.wav", records=[_example(0, 0)])
        (piece,) = writer.checkpoint()
        writer.write("train", 0, path="in/0.wav", records=[_example(0, 1)])
        (part,) = writer.commit()
    assert piece["offset"] == 0 and piece["path"] != part["path"]
    with open(piece["path"], "rb") as a, open(part["path"], "rb") as b:
        assert a.read() == b.read()


def _task_records(tmp_path, task, *records):
    import json

    commits = tmp_path / ".tmp" / "commits"
    commits.mkdir(parents=True, exist_ok=True)
    for r in records:
        name = f"{r['task']:06d}-{r['start']:06d}-{r['stop']:06d}.json"
        (commits / name).write_text(json.dumps(r))


def _part_file(tmp_path, rel: str, size: int) -> None:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def test_records_naming_another_tasks_part_or_malformed_are_not_reused(tmp_path):
    from pipelines.resume.reuse import plan_reuse
    from transforms.spec.types import ReadTask

    task = ReadTask(1, segments=(None, None))
    mine = ".tmp/parts/train/00000/000001.records.tmp-0123abcd"
    theirs = ".tmp/parts/train/00000/000000.records"
    for rel in (mine, theirs):
        _part_file(tmp_path, rel, 100)

    def piece(path, **extra):
        part = {"split": "train", "shard": 0, "path": path, "offset": 0, "runs": [["a", 1, 10]]}
        return {**_record({}), "task": 1, "start": 0, "stop": 1, "parts": [part], **extra}

    _task_records(tmp_path, task, piece(mine))
    assert plan_reuse(str(tmp_path), [task]).tasks[0].start == 1
    for bad in (piece(theirs), piece(mine, parts=["x"]), piece(mine, files=None)):
        _task_records(tmp_path, task, bad)
        (reuse_task,) = plan_reuse(str(tmp_path), [task]).tasks
        assert (reuse_task.start, reuse_task.resumed) == (0, ()), bad
    # a chain up to a checkpoint is not reused where parts cannot be continued (object stores)
    _task_records(tmp_path, task, piece(mine))
    assert plan_reuse(str(tmp_path), [task], checkpoints=False).tasks == (task,)


def test_a_commit_record_is_written_as_json_dumps_writes_it(tmp_path):
    """The record is written in pieces (`task_commits.json_pieces`) with json.dumps' very text: runs
    as tuples or lists are arrays alike, lists of any length, key order kept."""
    import json

    files = [{"path": f"in/{i}.wav", "index": i, "num_windows": i % 3, "x": 0.1} for i in range(7)]
    record = {"version": 4, "files": files, "errors": [], "runs": [("a", 1, 2)], "s": (1, [2])}
    for items in (1, 2, 3, 1024):
        text = "".join(task_commits.json_pieces(record, items=items))
        assert text == json.dumps(record)
    part = {"split": "all", "shard": 0, "path": f"{tmp_path}/p", "rows": 3}
    parts = [{**part, "runs": [("a", 3, 9)]}]
    task_commits.commit_record(
        str(tmp_path),
        1,
        start=0,
        stop=7,
        parts=parts,
        files=files,
        errors=[{"path": "in/x.wav", "reason": "bad"}],
        sampled=[[0, 0, 0]],
        counts={"files_read": 7},
        moments={},
    )
    stored = json.loads((tmp_path / ".tmp" / "commits" / "000001-000000-000007.json").read_bytes())
    assert stored["files"] == files and stored["windows"] == 6
    assert stored["parts"] == [{**parts[0], "path": "p", "runs": [["a", 3, 9]]}]


def test_a_tasks_summaries_are_made_when_read():
    """`task_commits.Summaries`: the earlier run's dicts, then this run's (segment, windows) pairs
    made into summaries when read: by index, from the end, in slices, in a record's JSON."""
    import json

    made = []

    def summary(seg, windows):
        made.append(seg)
        return {"path": seg, "num_windows": windows}

    files = task_commits.Summaries([{"path": "old", "num_windows": 5}], ["a", "b", "c"], summary)
    files.append(2, 7)
    files.append(0, 1)
    assert made == [] and len(files) == 3
    assert files[-1] == {"path": "a", "num_windows": 1}
    assert files[1:] == [{"path": "c", "num_windows": 7}, {"path": "a", "num_windows": 1}]
    assert list(files) == [files[0], files[1], files[2]] and files[0]["path"] == "old"
    with pytest.raises(IndexError):
        files[3]
    text = "".join(task_commits.json_pieces({"files": files}, items=2))
    assert json.loads(text) == {"files": list(files)}


def _piece(task: int, start: int, stop: int, path: str, *, offset: int = 0, size: int = 10):
    """A well-formed checkpoint record of task `task`'s segments [start, stop): one part, `size`
    bytes of `path` from `offset`."""
    runs = [["in/a.wav", 1, size]]
    part = {"split": "train", "shard": 0, "path": path, "offset": offset, "runs": runs}
    return {**_record({}), "task": task, "start": start, "stop": stop, "parts": [part]}


def test_a_record_of_another_version_is_not_reused(tmp_path):
    """A commit record's ``version`` is checked: an older slice's record (another layout of its
    lists, another meaning of its moments) is never reused, its task is read again."""
    from pipelines.resume.reuse import plan_reuse
    from transforms.spec.types import ReadTask

    task = ReadTask(1, segments=(None, None))
    own = ".tmp/parts/train/00000/000001.records.tmp-0123abcd"
    _part_file(tmp_path, own, 100)
    _task_records(tmp_path, task, _piece(1, 0, 1, own))
    assert plan_reuse(str(tmp_path), [task]).tasks[0].start == 1  # this version's: reused
    unversioned = {k: v for k, v in _piece(1, 0, 1, own).items() if k != "version"}
    for version in (
        task_commits.COMMIT_VERSION - 1,
        task_commits.COMMIT_VERSION + 1,
        None,
        "absent",
    ):
        record = {**_piece(1, 0, 1, own), "version": version}
        _task_records(tmp_path, task, unversioned if version == "absent" else record)
        reuse = plan_reuse(str(tmp_path), [task])
        assert reuse.tasks == (task,) and len(reuse.stale) == 1, version


def test_a_record_naming_a_part_of_another_directory_is_not_reused(tmp_path):
    """A record's part must be the task's own part of this output directory, exactly: a path
    that only ends like one (``../other/.tmp/parts/...``) names another directory's file, which
    a continued task would cut and append to."""
    from pipelines.resume.reuse import plan_reuse
    from transforms.spec.types import ReadTask

    out, other = tmp_path / "out", tmp_path / "other"
    task = ReadTask(1, segments=(None, None))
    own = ".tmp/parts/train/00000/000001.records"
    for directory in (out, other):
        _part_file(directory, own, 100)
    _task_records(out, task, _piece(1, 0, 1, own))
    assert plan_reuse(str(out), [task]).tasks[0].start == 1  # its own part: reused
    for path in (f"../other/{own}", f"../other/{own}.tmp-0123abcd", f"./{own}", f"x/{own}"):
        _part_file(out, path, 100)  # the file is there, with the bytes the record names
        _task_records(out, task, _piece(1, 0, 1, path))
        assert plan_reuse(str(out), [task]).tasks == (task,), path


def test_a_checkpoint_whose_part_was_cut_short_is_not_reused(tmp_path):
    """After a kill (or a machine crash) a checkpoint's temporary part may hold fewer bytes
    than its record names: that checkpoint and those after it are read again (stale), the ones
    whose bytes are all there are reused."""
    from pipelines.resume.reuse import plan_reuse
    from transforms.spec.types import ReadTask

    task = ReadTask(1, segments=(None, None, None))
    part = ".tmp/parts/train/00000/000001.records.tmp-0123abcd"
    first, second = _piece(1, 0, 1, part), _piece(1, 1, 2, part, offset=10)
    _task_records(tmp_path, task, first, second)
    _part_file(tmp_path, part, 20)  # both pieces' bytes: both reused
    (whole,) = plan_reuse(str(tmp_path), [task]).tasks
    assert whole.start == 2 and [r["stop"] for r in whole.resumed] == [1, 2]
    _part_file(tmp_path, part, 15)  # cut inside the second piece
    reuse = plan_reuse(str(tmp_path), [task])
    (cut,) = reuse.tasks
    assert cut.start == 1 and [r["stop"] for r in cut.resumed] == [1]
    assert [p.rsplit("/", 1)[-1] for p in reuse.stale] == ["000001-000001-000002.json"]
    _part_file(tmp_path, part, 9)  # cut inside the first: nothing reused
    assert plan_reuse(str(tmp_path), [task]).tasks == (task,)
    (tmp_path / part).unlink()  # gone (a failed attempt's, retried)
    assert plan_reuse(str(tmp_path), [task]).tasks == (task,)


def test_a_checkpoint_holds_the_errors_of_its_own_segments(tmp_path):
    """Files that fail in the read stage inside checkpointed pieces: each piece's record holds
    the errors of its segments, each once (its files and its errors are counted apart: a piece
    after two files read and none failed starts at error 0, not 2)."""
    import json

    from transforms.audio.wav import WavInfo
    from transforms.spec.types import InputFile, ReadTask, Segment
    from transforms.stages.record_parts import PartWriter

    info = WavInfo(16000, 1, 64, "PCM_16", "int16", 32768.0)
    segments = tuple(
        Segment(InputFile(i, f"in/{i}.wav", 172, info=info), 0, 1, 0) for i in range(7)
    )
    task = ReadTask(0, segments=segments)
    done = task_commits.TaskRecords(
        str(tmp_path), task, {}, summary=lambda seg, n: {"path": seg.file.path, "num_windows": n}
    )

    def failed(i: int) -> dict:
        error = {"path": f"in/{i}.wav", "reason": "not a RIFF file"}
        done.errors.append(error)
        return error

    with PartWriter(str(tmp_path), 0) as writer:
        writer.write("train", 0, path="in/0.wav", records=[_example(0, 0)])
        done.file_done(0, 1)
        done.file_done(1, 1)
        # files 0, 1 read; no error
        done.checkpoint(2, parts=writer.checkpoint(), written=writer.written)
        errors = [failed(2)]
        # file 2 failed
        done.checkpoint(3, parts=writer.checkpoint(), written=writer.written)
        errors.append(failed(3))
        done.file_done(4, 1)
        errors.append(failed(5))
        # file 3 failed, 4 read, 5 failed
        done.checkpoint(6, parts=writer.checkpoint(), written=writer.written)
        done.file_done(6, 1)
        done.commit(parts=writer.commit())
    commits = tmp_path / ".tmp" / "commits"
    pieces = [
        json.loads((commits / f"000000-{start:06d}-{stop:06d}.json").read_text())
        for start, stop in ((0, 2), (2, 3), (3, 6))
    ]
    assert [p["errors"] for p in pieces] == [[], errors[:1], errors[1:]]
    assert [[f["path"] for f in p["files"]] for p in pieces] == [
        ["in/0.wav", "in/1.wav"],
        [],
        ["in/4.wav"],
    ]
    whole = json.loads((commits / "000000-000000-000007.json").read_text())
    assert whole["errors"] == errors == [e for p in pieces for e in p["errors"]]
    assert len(whole["files"]) == 4


@pytest.mark.parametrize(
    "n", [1, task_commits.JSON_PIECE_ITEMS, 2 * task_commits.JSON_PIECE_ITEMS + 3]
)
def test_a_reused_tasks_files_table_lines_are_every_file_once_in_order(tmp_path, n):
    """A reused task's ``files`` output (packed pieces of `JSON_PIECE_ITEMS` lines) holds one
    table line for each file of its record, in its order: none lost or repeated at a piece's
    edge."""
    files = [{"index": i, "path": f"in/{i}.wav", "num_windows": i % 3} for i in range(n)]
    record = {**_record({}), "files": files, "windows": sum(f["num_windows"] for f in files)}
    out = list(_reused(tmp_path).outputs(record))
    items = [o.value for o in out if o.tag == task_commits.FILES_TAG]
    assert len(items) == -(-n // task_commits.JSON_PIECE_ITEMS)
    lines = b"".join(task_commits.unpacked_lines(item) for item in items)
    assert lines == b"".join(fmt.table_line(f) for f in files)
