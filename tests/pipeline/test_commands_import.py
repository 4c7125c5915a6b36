"""``python -m pipelines.verify`` and ``inspect`` import no Apache Beam (docs/guarantees.md, 4:
verify "does not import Beam"; inspect reads the manifest without Beam): each command runs in a
new interpreter on a real recorded dataset, then reports which of Beam and tensorflow-transform it
loaded. Nor do the modules that hold no Beam code: `runners.quiet`, the record result, and
planning (`pipelines.config`, `pipelines.plan`) and what it hands the stages (`transforms.spec`).
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


@pytest.mark.parametrize(
    "imports",
    [
        "import runners, runners.quiet",
        "import pipelines.verify, pipelines.inspect",
        "import pipelines, pipelines.result; pipelines.RecordResult",
        # planning: options, the plan and its types (Beam's FileSystems load when first used)
        "import pipelines.config, pipelines.plan, pipelines.plan.reads",
        "import pipelines.plan.splits, pipelines.plan.tasks, pipelines.plan.shard_counts",
        "import pipelines.plan.annotated",
        "import transforms.spec.types, transforms.spec.sharding",
        "import transforms.spec.layout, transforms.spec.compression",
        "import transforms.spec.annotation_columns",
    ],
)
def test_importing_imports_no_beam(imports):
    probe = f"import sys; {imports}; print([m for m in sys.modules if m.startswith('apache_beam')])"
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert run.stdout.strip() == "[]", run.stdout[-2000:] + run.stderr[-2000:]
