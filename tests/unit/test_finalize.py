"""The record job's finalisation (`transforms.stages.finalize`), its pure pieces: the files
table's lines from the read stage's per-segment lines, packed per task (a file's segments
merged, failed files left out), the errors table's lines, and a table written in blocks with
its digest. The manifest it builds is pinned as text in test_manifest_json.py."""

from __future__ import annotations

import json

from replay import format as fmt
from transforms.stages.source_tables import error_lines, file_lines, write_table
from transforms.stages.task_commits import packed_lines


def test_file_lines_merge_a_files_segments_and_leave_failed_files_out():
    """A long file's segments are one line (its first segment's, windows summed, keys in their
    order), a failed file has none, lines come by index, rates once each."""
    a = {"path": "in/a.wav", "index": 0, "num_windows": 4, "sample_rate": 16000, "x": 0.5}
    b = {"path": "in/b.wav", "index": 1, "num_windows": 2, "sample_rate": 8000}
    bad = {"path": "in/c.wav", "index": 2, "num_windows": 1, "sample_rate": 22050}
    segments = [b, {**a, "num_windows": 3}, bad, a, {**a, "num_windows": 0}]
    items = [packed_lines(map(fmt.table_line, part)) for part in (segments[:2], segments[2:])]
    lines, rates = file_lines(items, failed={"in/c.wav"})
    assert list(lines) == [fmt.table_line({**a, "num_windows": 7}), fmt.table_line(b)]
    assert rates == [8000, 16000]
    assert error_lines([{"path": "z", "reason": "1"}, {"path": "y"}, {"path": "z"}]) == [
        b'{"path":"y"}\n',
        b'{"path":"z","reason":"1"}\n',
    ]


def test_write_table_writes_the_lines_and_gives_their_digest(tmp_path, monkeypatch):
    """The table written in blocks is the lines joined, its digest `format.table_digest`'s;
    nothing is left under .tmp/."""
    import transforms.stages.source_tables as source_tables

    monkeypatch.setattr(source_tables, "TABLE_BLOCK_LINES", 2)  # several blocks
    (tmp_path / ".tmp").mkdir()
    lines = [fmt.table_line({"path": f"in/{i}.wav", "index": i}) for i in range(5)]
    digest = write_table(str(tmp_path), "files.jsonl", lines)
    data = (tmp_path / "files.jsonl").read_bytes()
    assert data == b"".join(lines) == fmt.table_bytes(json.loads(x) for x in lines)
    assert digest == fmt.table_digest(data)
    assert list((tmp_path / ".tmp").iterdir()) == []
    assert write_table(str(tmp_path), "errors.jsonl", []) == fmt.table_digest(b"")


def test_the_files_table_of_packed_items_is_written_as_its_lines(tmp_path, monkeypatch):
    """`file_lines` over items of several tasks' lines, each packed (`task_commits.
    packed_lines`), out of index order and a long file's segments in different items: the table
    `write_table` writes (blocks across items) is the lines by index, the segments merged."""
    import transforms.stages.source_tables as source_tables

    monkeypatch.setattr(source_tables, "TABLE_BLOCK_LINES", 3)
    summaries = [{"path": f"in/{i}.wav", "index": i, "num_windows": 1} for i in range(10)]
    long = {"path": "in/long.wav", "index": 10, "num_windows": 5, "sample_rate": 8000}
    items = [
        packed_lines(map(fmt.table_line, [*summaries[5:], {**long, "num_windows": 2}])),
        packed_lines(map(fmt.table_line, [{**long, "num_windows": 3}, *summaries[:5]])),
    ]
    lines, rates = file_lines(items, failed={"in/7.wav"})
    expected = [fmt.table_line(s) for s in summaries if s["index"] != 7] + [fmt.table_line(long)]
    assert len(lines) == 10 and lines[-1] == expected[-1] and lines[2:4] == expected[2:4]
    (tmp_path / ".tmp").mkdir()
    digest = write_table(str(tmp_path), "files.jsonl", lines)
    assert (tmp_path / "files.jsonl").read_bytes() == b"".join(expected)
    assert digest == fmt.table_digest(b"".join(expected)) and rates == [8000]
