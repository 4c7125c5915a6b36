#!/usr/bin/env python3
"""atheris (libFuzzer) over the WAV/RIFF decoder: `python fuzz/fuzz_wav.py CORPUS_DIR [SEEDS...]`.

Instruments `transforms.audio.wav` and `transforms.audio.riff` (libsndfile itself is C and not
instrumented) and feeds byte strings to `fuzz.wav_target.check_wav`. Any exception other than
`WavDecodeError`, a failed assertion, a hang (``-timeout``) or memory beyond ``-rss_limit_mb`` is a
finding; libFuzzer writes the input to ``crash-*`` / ``timeout-*`` / ``oom-*``. See fuzz/README.md
for the runs behind the committed corpus.
"""

from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy  # noqa: E402,F401 - imported before instrumentation: only our modules are traced
import soundfile  # noqa: E402,F401

with atheris.instrument_imports(include=["transforms", "fuzz"]):
    from fuzz.wav_target import check_wav  # noqa: E402


def test_one_input(data: bytes) -> None:
    check_wav(data)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
