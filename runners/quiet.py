"""Quiet command output: TensorFlow's C++ start-up chatter filtered out of our commands.

Importing TensorFlow 2.21 and initialising its devices prints, on a machine without a GPU,
"All log messages before absl::InitializeLog() ...", "Could not find cuda drivers", the
cpu_feature_guard notice and "failed call to cuInit" (twice each per run). Most of it comes
from absl's C++ logging, which ``TF_CPP_MIN_LOG_LEVEL`` does not reach in this version and no
other setting or API controls before the first line is printed. So a command imports TensorFlow
with its stderr file descriptor captured, then writes back every captured line except these
known start-up notices: real warnings and errors still show, in order.

Only commands call it (``python -m pipelines.record`` / ``verify``), never library code, and
only when the user has not set ``TF_CPP_MIN_LOG_LEVEL`` (then nothing is filtered).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
# Lines TensorFlow prints at start-up on a CPU-only machine; nothing else is dropped.
STARTUP_NOISE = (
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called"),
    re.compile(r"cudart_stub\.cc:\d+\] Could not find cuda drivers"),
    re.compile(r"cuda_platform\.cc:\d+\] failed call to cuInit"),
    re.compile(r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized"),
    re.compile(r"^To enable the following instructions: .* rebuild TensorFlow"),
    re.compile(r"\] oneDNN custom operations are on"),
    re.compile(r"\] Unable to register cu(DNN|FFT|BLAS) factory"),
)


def is_startup_noise(line: str) -> bool:
    """Whether `line` is one of TensorFlow's known start-up notices."""
    return any(p.search(line) for p in STARTUP_NOISE)


@contextlib.contextmanager
def _stderr_captured() -> Iterator[list[str]]:
    """Captures what this process writes to file descriptor 2 (C++ included) into a list."""
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(tmp.read().decode("utf-8", "replace").splitlines(keepends=True))


def quiet_tensorflow() -> None:
    """Imports TensorFlow and initialises its devices without the start-up chatter.

    Does nothing when the user set ``TF_CPP_MIN_LOG_LEVEL`` or TensorFlow is already loaded.
    Otherwise sets it to 1 (TensorFlow's own INFO lines off; warnings and errors on) for this
    process and the workers it starts, and filters the captured start-up output.
    """
    if LOG_LEVEL_ENV in os.environ or "tensorflow" in sys.modules or sys.stderr is None:
        return  # the user's choice, too late, or no stderr to keep clean
    os.environ[LOG_LEVEL_ENV] = "1"
    captured: list[str] = []
    try:
        with _stderr_captured() as captured:
            import tensorflow as tf

            tf.config.list_physical_devices()  # the CUDA probe prints its notices here
    finally:  # also when the import fails: its own messages come before the traceback
        kept = [line for line in captured if not is_startup_noise(line)]
        if kept:
            sys.stderr.write("".join(kept))
            sys.stderr.flush()
