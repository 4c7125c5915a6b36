"""``python -m pipelines.verify`` and ``inspect`` import no Apache Beam (docs/guarantees.md, 4:
verify "does not import Beam"; inspect reads the manifest without Beam): each command runs in a
new interpreter on a real recorded dataset, then reports which of Beam and tensorflow-transform it
loaded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_PROBE = """
import runpy, sys
sys.argv = [{module!r}, {dataset!r}]
try:
    runpy.run_module({module!r}, run_name="__main__")
except SystemExit as e:
    code = e.code
else:
    code = 0
print("exit", code)
print("loaded", sorted(m for m in ("apache_beam", "tensorflow_transform") if m in sys.modules))
"""


@pytest.mark.parametrize("module", ["pipelines.verify", "pipelines.inspect"])
def test_command_imports_no_beam(sample_dataset, module):
    probe = _PROBE.format(module=module, dataset=str(sample_dataset))
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    lines = run.stdout.strip().splitlines()
    assert lines[-2:] == ["exit 0", "loaded []"], run.stdout[-2000:] + run.stderr[-2000:]


def test_importing_runners_alone_imports_no_beam():
    probe = "import sys, runners, runners.quiet; print('apache_beam' in sys.modules)"
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert run.stdout.strip() == "False", run.stderr[-2000:]
