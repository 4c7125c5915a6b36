"""The record command as a citizen of its process: importing it leaves other Beam pipelines alone,
``--help`` lists its options, and a run in which every input failed exits 1 (dataset written)."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability import fn_api_runner
from apache_beam.testing.util import assert_that, equal_to

from pipelines import record, record_dataset
from pipelines.config import RecordConfig, UsageError
from pipelines.plan import plan_record
from tests.support.record_helpers import SAMPLE_DIR, load_manifest


def test_importing_the_record_job_leaves_other_pipelines_alone():
    # Beam parses the options of every imported PipelineOptions class (RecordOptions too) for
    # every pipeline; no record flag is given here, and none is needed.
    assert record.RecordOptions in PipelineOptions.__subclasses__()
    options = PipelineOptions(["--job_name", "unrelated"])
    with beam.Pipeline(runner=fn_api_runner.FnApiRunner(), options=options) as p:
        words = p | beam.Create(["a", "bb", "ccc"]) | beam.Map(len)
        assert_that(words, equal_to([1, 2, 3]))


def test_help_lists_every_record_option(capsys):
    assert record.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m pipelines.record")
    flags = {
        "--no_normalize" if n == "normalize" else f"--{n}" for n in RecordConfig.__annotations__
    }
    assert {"--input_pattern", "--win_len", "--annotations", "--no_normalize"} <= flags
    assert [f for f in sorted(flags) if f not in text] == []


def test_every_input_failing_exits_1_with_one_line_and_writes_the_errors(capsys, tmp_path):
    for name in ("a_x_dog.wav", "b_x_cat.wav"):
        (tmp_path / name).write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    out = tmp_path / "out"
    argv = ["--input_pattern", str(tmp_path / "*.wav"), "--output_dir", str(out)]
    assert record.main([*argv, "--win_len", "1000"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1, err
    assert err[0].startswith("error: every input file failed (2), no window was recorded")
    assert str(tmp_path / "a_x_dog.wav") in err[0]
    manifest = load_manifest(out)
    assert manifest["num_examples"] == 0
    assert sorted(e["path"] for e in manifest["errors"]) == [
        str(tmp_path / "a_x_dog.wav"),
        str(tmp_path / "b_x_cat.wav"),
    ]


def test_keywords_and_command_line_plan_the_same_run(tmp_path):
    pattern, out = str(SAMPLE_DIR / "*.wav"), str(tmp_path / "o")
    argv = ["--input_pattern", pattern, "--output_dir", out, "--win_len", "4000"]
    argv += ["--features", "log_mel,mfcc", "--splits", "train=80,test=20", "--no_normalize"]
    from_cli = plan_record(PipelineOptions(argv).view_as(record.RecordOptions))
    from_python = plan_record(
        RecordConfig(
            input_pattern=pattern,
            output_dir=out,
            win_len=4000,
            features=["log_mel", "mfcc"],
            splits="train=80,test=20",
            normalize=False,
        )
    )
    assert from_python == from_cli
    assert from_python.params["features"] == ["log_mel", "mfcc"]


def test_record_dataset_refuses_unknown_names_and_bad_values_before_any_work(tmp_path):
    out = tmp_path / "o"
    with pytest.raises(TypeError, match="unknown option 'win_length'"):
        record_dataset(input_pattern="x/*.wav", output_dir=str(out), win_length=16000)
    with pytest.raises(UsageError, match=r"^--channel_mode must be one of \('first'"):
        record_dataset(input_pattern="x/*.wav", output_dir=str(out), channel_mode="left")
    assert not out.exists()
