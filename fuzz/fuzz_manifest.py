#!/usr/bin/env python3
"""atheris (libFuzzer) over the manifest loader: `python fuzz/fuzz_manifest.py CORPUS [SEEDS...]`.

Instruments `replay` (the loader and the schema) and feeds each input to
`fuzz.manifest_target.check_manifest_bytes` on a private copy of the real record run's dataset
in tests/fixtures/fuzz_manifest_dataset/ (raw JSON, or edits of that manifest: see
`fuzz.manifest_target.decode_input`). An exception other than `ReplayError`, a failed
assertion (a file opened outside the dataset, raw markup in the report, ...) or a hang is a
finding. See fuzz/README.md for the runs behind the committed corpus.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Only the loader is instrumented (replay: load_info, the manifest schema); the harness and
# the report code run uninstrumented (each instrumented module costs executions per second).
with atheris.instrument_imports(include=["replay.info", "replay.manifest"]):
    import replay.info  # noqa: E402,F401
    import replay.manifest  # noqa: E402,F401
from fuzz import manifest_target  # noqa: E402

_SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None  # rewriting a file on disk: ~1 ms
_WORK = Path(tempfile.mkdtemp(prefix="fuzz_manifest_", dir=_SHM)) / "dataset"
shutil.copytree(manifest_target.BASE_DATASET, _WORK)
_BASE = json.loads((manifest_target.BASE_DATASET / "manifest.json").read_text())


def test_one_input(data: bytes) -> None:
    raw = manifest_target.decode_input(data, _BASE)
    manifest_target.check_manifest_bytes(raw, _WORK, in_memory=True)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
