"""Progress of a real record run (`transforms.stages.progress`): "MB written" counts the
records' bytes as the read stage writes them, before any shard exists (it stayed at 0.0 until
the shards were written, so a long run showed `0.0 MB written` on every line but the last)."""

from __future__ import annotations

from pathlib import Path

from tests.support.record_helpers import SAMPLE_DIR
from tests.support.reliability import cli, kill, wait_until_paused
from transforms.stages import progress
from transforms.stages.record_parts import PARTS_DIR


def test_bytes_are_counted_while_reading_before_any_shard(tmp_path):
    out = tmp_path / "out"
    marker, log = tmp_path / "reading.paused", tmp_path / "run.log"
    args = [str(SAMPLE_DIR / "*.wav"), "--win_len", "16000", "--num_shards", "2"]
    proc = cli(
        "reading", str(marker), "--input_pattern", *args[:1], "--output_dir", str(out), *args[1:],
        log=log, module="tests.support.pause_points",
    )  # fmt: skip
    try:
        wait_until_paused(proc, marker)  # the read task wrote its parts; no shard is written
        assert not list(out.glob("*.tfrecord-*"))
        parts = sum(p.stat().st_size for p in Path(out, PARTS_DIR).rglob("*") if p.is_file())
        totals = progress.read_totals(str(out))
        assert 0 < totals["bytes"] <= parts, (totals, parts)
        assert "shards" not in totals
        line = progress.format_line(totals, total_files=6, elapsed=1.0)
        assert f"{totals['bytes'] / 1e6:.1f} MB written" in line and " 0.0 MB" not in line
    finally:
        kill(proc)
