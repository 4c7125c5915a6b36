"""The annotation tables planning reads (`pipelines.plan.reads.read_annotation_tables`): a table
per recording on a remote store is one request each, read in threads; events and bad rows come
back in path order, as a serial read gives them."""

from __future__ import annotations

from pipelines.config import AnnotationConfig
from pipelines.plan import reads


def test_tables_read_in_threads_give_the_serial_reads_events_in_path_order(tmp_path, monkeypatch):
    """40 Audacity tracks (one a recording, some with a bad row): read
    in threads (as remote ones are: `is_url` made true for these local files) and one by one,
    the same events and bad rows, in the tables' path order, each table's in its line order."""
    for i in range(40):
        rows = [f"{j}.0\t{j}.5\tcall{i % 3}" for j in range(i % 5 + 1)]
        if i % 7 == 3:
            rows.append("x\t1.0\tcall0")  # a bad row
        (tmp_path / f"rec{i:02d}.txt").write_text("\n".join(rows) + "\n")
    config = AnnotationConfig(pattern=str(tmp_path / "rec*.txt"), fmt="audacity")
    serial = reads.read_annotation_tables(config)
    monkeypatch.setattr(reads, "is_url", lambda path: True)
    threaded = reads.read_annotation_tables(config)
    assert threaded == serial
    events, errors = serial
    assert len(events) == sum(i % 5 + 1 for i in range(40))
    assert [e.source for e in events] == sorted(e.source for e in events)
    assert [e.line for e in events if e.source.endswith("rec04.txt")] == [1, 2, 3, 4, 5]
    assert [(e.source.rsplit("/", 1)[-1], e.line) for e in errors][:2] == [
        ("rec03.txt", 5),
        ("rec10.txt", 2),
    ]
