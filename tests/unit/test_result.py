"""`RecordResult` is built once from the written manifest, and only the command prints it.

`pipelines.job.run_job` returns the result to both callers; `pipelines.record.summary_line` is
the command's one line about it (the README shows that line, so its text is pinned here).
"""

from __future__ import annotations

from pipelines.record import summary_line
from pipelines.result import RecordResult

MANIFEST = {
    "num_examples": 10,
    "num_files": 1,
    "compression": "NONE",
    "splits": {
        "train": {"num_examples": 7, "shards": [{"num_bytes": 1_500_000}, {"num_bytes": 500_000}]},
        "test": {"num_examples": 3, "shards": [{"num_bytes": 300_000}]},
    },
}
ERRORS = [{"path": "/d/b.wav", "reason": "not a RIFF file"}, {"path": "/d/t.csv", "reason": "x"}]


def _result(**kwargs) -> RecordResult:
    args = {"output_dir": "out/tug", "elapsed": 7.2, "audio_seconds": 5.0, "counters": {"w": 1}}
    return RecordResult.from_manifest(MANIFEST, ERRORS, **{**args, **kwargs})


def test_result_holds_the_manifest_figures_and_separates_bad_rows_from_failed_files():
    result = _result(num_bad_rows=1)
    assert (result.num_examples, result.num_files, result.num_failed) == (10, 1, 1)
    assert result.num_bad_rows == 1 and result.errors == tuple(ERRORS)
    assert result.split_counts == {"train": 7, "test": 3}
    assert (result.num_shards, result.num_bytes, result.compression) == (3, 2_300_000, "NONE")
    assert (result.seconds, result.audio_seconds_per_second) == (7.2, 0.7)
    assert result.windows_per_second == 1.4 and result.counters == {"w": 1}
    assert not result.translated


def test_summary_line_text():
    assert summary_line(_result(num_bad_rows=1)) == (
        "recorded 10 windows from 1 files (1 failed, 1 bad annotation row(s)) into 3 NONE "
        "shards, 2.3 MB in 7.2 s (0.7 audio-s/s) -> out/tug"
    )
    assert summary_line(_result(num_bad_rows=0)) == (
        "recorded 10 windows from 1 files (2 failed) into 3 NONE shards, 2.3 MB in 7.2 s "
        "(0.7 audio-s/s) -> out/tug"
    )


def test_a_job_description_only_run():
    result = RecordResult.job_description_only("gs://b/out")
    assert result.translated and result.num_examples == 0 and result.output_dir == "gs://b/out"
    assert summary_line(result) == (
        "wrote the job description (--template_location); no data was processed"
    )


def test_zero_elapsed_gives_zero_rates():
    result = _result(num_bad_rows=0, elapsed=0.0)
    assert (result.audio_seconds_per_second, result.windows_per_second) == (0.0, 0.0)
