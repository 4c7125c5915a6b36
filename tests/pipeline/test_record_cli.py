"""The record command line: invalid arguments stop the job before any work, with one clear line
(exit code 2); the command loads one Keras (TFT's), not two. (Exit 1 when every input failed,
``--help``: test_record_config.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.record_helpers import SAMPLE_DIR, cli_error

SAMPLE = str(SAMPLE_DIR / "*.wav")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--win_len", "0"], "--win_len must be > 0"),
        (["--win_len", "100", "--hop_len", "200"], "would skip samples"),
        (["--hop_len", "-1"], "--hop_len must be > 0"),
        (["--features", "log_mel,chroma"], "unknown feature chroma"),
        (["--compression", "BZIP2"], "--compression must be one of"),
        (["--label_source", "folder"], "--label_source must be"),
        (["--win_len", "256", "--frame_length", "400"], "feature parameters"),
        (["--runner", "SparkyRunner"], "unknown runner 'SparkyRunner'"),
        (["--channel_mode", "left"], "--channel_mode must be one of"),  # choices: one line too
        (["--annotation_format", "xls", "--annotations", "t/*"], "--annotation_format must be"),
    ],
)
def test_bad_arguments(capsys, tmp_path, extra, message):
    line = cli_error(capsys, "--input_pattern", SAMPLE, "--output_dir", str(tmp_path / "o"), *extra)
    assert message in line
    assert not (tmp_path / "o").exists()  # nothing was written


def test_missing_required_options_are_one_line(capsys):
    line = cli_error(capsys, "--win_len", "16000")
    assert line == "error: the following arguments are required: --input_pattern, --output_dir"


def test_empty_match(capsys, tmp_path):
    line = cli_error(
        capsys,
        "--input_pattern",
        str(tmp_path / "none" / "*.wav"),
        "--output_dir",
        str(tmp_path / "o"),
    )
    assert "matches no file" in line


def test_existing_output_needs_overwrite_and_foreign_dirs_are_never_replaced(capsys, tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "thesis.tex").write_text("precious")
    line = cli_error(capsys, "--input_pattern", SAMPLE, "--output_dir", str(tmp_path / "o"))
    assert "exists; pass --overwrite" in line
    line = cli_error(
        capsys, "--input_pattern", SAMPLE, "--output_dir", str(tmp_path / "o"), "--overwrite"
    )
    assert "not an audiorecords dataset" in line
    assert (tmp_path / "o" / "thesis.tex").read_text() == "precious"


def test_command_line_entry_point_prints_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.record",
            "--input_pattern",
            SAMPLE,
            "--output_dir",
            str(tmp_path),
            "--win_len",
            "-5",
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "error: --win_len must be > 0, got -5"


@pytest.mark.slow
def test_command_loads_only_the_keras_tft_uses(tmp_path):
    script = (
        "import sys\n"
        "from pipelines import record\n"
        "from runners.internals import load_one_keras\n"
        "load_one_keras()\n"
        f"assert record.main(['--input_pattern', {SAMPLE!r}, '--output_dir', {str(tmp_path)!r},"
        " '--win_len', '16000']) == 0\n"
        "print(sorted(m for m in ('keras', 'tf_keras', 'matplotlib') if m in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "['tf_keras']"
    assert (tmp_path / "manifest.json").exists()
