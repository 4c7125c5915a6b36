"""Commands print our lines, not TensorFlow's C++ start-up chatter (runners/quiet.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners import quiet
from tests.support.record_helpers import SAMPLE_DIR

ROOT = Path(__file__).resolve().parents[2]
# Seen on this machine from `import tensorflow` and its device start-up (TensorFlow 2.21).
NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795378794.473643    6142 cudart_stub.cc:31] Could not find cuda drivers on your "
    "machine, GPU will not be used.\n",
    "I0000 00:00:1795378794.656882    6142 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.\n",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with "
    "the appropriate compiler flags.\n",
    "E0000 00:00:1795378799.676033    6142 cuda_platform.cc:52] failed call to cuInit: INTERNAL: "
    "CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n",
    "2026-11-22 10:00:00.000000: I tensorflow/core/util/port.cc:153] oneDNN custom operations are "
    "on. You may see slightly different numerical results due to floating-point round-off "
    "errors.\n",
]
REAL = [
    "E0000 00:00:1795378799.676033    6142 op_kernel.cc:1857] OP_REQUIRES failed at "
    "example_parsing_ops.cc:98 : INVALID_ARGUMENT: Key: signal.\n",
    "W0000 00:00:1795378799.676033    6142 loader.cc:12] could not open /data/x.tfrecord\n",
    "UserWarning: something the user should see\n",
]
MARKERS = ("absl::InitializeLog", "cuda drivers", "cuInit", "cpu_feature_guard", "oneDNN")


def test_only_the_known_startup_notices_are_noise():
    assert all(quiet.is_startup_noise(line) for line in NOISE)
    assert not any(quiet.is_startup_noise(line) for line in REAL)


def test_capture_sees_what_cpp_writes_to_the_descriptor():
    with quiet._stderr_captured() as lines:  # (pytest owns sys.stderr here: write to fd 2)
        os.write(2, b"from C++\n")
        os.write(2, b"and more\n")
    assert lines == ["from C++\n", "and more\n"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != quiet.LOG_LEVEL_ENV}
    return {**env, **extra}


@pytest.mark.slow
def test_record_and_verify_commands_print_our_lines_only(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.record", "--input_pattern", str(SAMPLE_DIR / "*.wav")]
        + ["--output_dir", str(tmp_path / "o"), "--win_len", "16000"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("recorded 18 windows from 6 files")
    assert not [m for m in MARKERS if m in proc.stderr], proc.stderr
    proc = subprocess.run(  # verify reads every shard with TensorFlow
        [sys.executable, "-m", "pipelines.verify", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("OK "), proc.stdout + proc.stderr
    assert proc.stderr == "", proc.stderr


@pytest.mark.slow
def test_a_log_level_the_user_set_is_left_alone():
    script = (
        "from runners.quiet import quiet_tensorflow\n"
        "quiet_tensorflow()\n"
        "import os, sys\n"
        "print(os.environ['TF_CPP_MIN_LOG_LEVEL'], 'tensorflow' in sys.modules)\n"
    )
    for env, want in ((_env(), "1 True"), (_env(TF_CPP_MIN_LOG_LEVEL="0"), "0 False")):
        proc = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip() == want
