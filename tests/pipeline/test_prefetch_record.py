"""The record job's read stage decodes in a thread and computes features in a pool while the
DoFn's thread writes: a file failing on the writer's side mid-file (moved from tests/unit: it runs
a Beam pipeline)."""

from __future__ import annotations

import pytest

from pipelines import record_dataset
from tests.support.record_helpers import SAMPLE_DIR, load_manifest, read_records
from transforms.stages import file_rows


@pytest.mark.slow
def test_a_file_failing_in_the_writer_thread_mid_file_is_an_error_and_the_rest_is_exact(
    tmp_path, monkeypatch
):
    """Chunks of 2 windows: each file is several chunks decoded and featurised ahead; a failure
    on the DoFn's side after the file's first chunk must drop that file whole (its remaining
    chunks, already computed, are skipped) and leave every other window exactly once."""
    monkeypatch.setattr(file_rows, "_CHUNK_BYTES", 2 * 4000 * 4)  # 2 windows of 4000 frames

    def shard_of(element):
        if int(element["index"]) == 2 and int(element["win_start_idx"]) >= 8000:
            raise ValueError("no shard for this window")
        return 0

    out = tmp_path / "o"
    result = record_dataset(
        input_pattern=str(SAMPLE_DIR / "*.wav"),
        output_dir=str(out),
        win_len=4000,
        features=["log_mel"],
        shard_func=shard_of,
    )
    manifest = load_manifest(out)
    [error] = manifest["errors"]
    assert error["path"].endswith(sorted(p.name for p in SAMPLE_DIR.glob("*.wav"))[2])
    assert error["reason"] == "ValueError: no shard for this window"
    keys = [(int(r["index"]), int(r["win_start_idx"])) for r in read_records(out)]
    expected = [(i, s) for i in (0, 1, 3, 4, 5) for s in range(0, 48000, 4000)]
    assert keys == expected and result.num_examples == 60 and result.num_failed == 1
