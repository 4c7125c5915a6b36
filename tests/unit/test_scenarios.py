"""The benchmark tool (`benchmarks.scenarios`): ``python -m benchmarks`` lists every scenario
with its question, each scenario resolves to an importable runner whose ``--help`` exits 0,
and the shared table printer (`benchmarks.table`) writes well-formed markdown. No benchmark
runs here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import scenarios
from benchmarks.table import ratio, spread, table

ROOT = Path(__file__).resolve().parents[2]


def test_python_m_benchmarks_lists_every_scenario_with_its_question():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for scenario in scenarios.SCENARIOS:
        (line,) = [x for x in lines if x.split()[:1] == [scenario.name]]
        assert scenario.question in line


def test_an_unknown_scenario_is_refused_with_the_listing():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "no_such"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: no scenario 'no_such'")
    assert "byte_identity" in done.stderr


def test_scenario_names_are_unique_and_modules_exist():
    names = [s.name for s in scenarios.SCENARIOS]
    assert len(names) == len(set(names))
    for scenario in scenarios.SCENARIOS:
        assert (ROOT / "benchmarks" / f"{scenario.module}.py").is_file(), scenario
        assert scenario.question and scenario.example.split()[0] == scenario.name


@pytest.mark.parametrize("name", [s.name for s in scenarios.SCENARIOS])
def test_each_scenario_runs_its_help(name, capsys):
    assert callable(scenarios.BY_NAME[name].runner())
    with pytest.raises(SystemExit) as done:
        scenarios.run(name, ["--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m benchmarks {name}")


def test_the_readme_names_every_scenario():
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    missing = [s.name for s in scenarios.SCENARIOS if f"`{s.name}`" not in readme]
    assert not missing, f"benchmarks/README.md does not name {missing}"


def test_table_is_markdown_with_figures_right_aligned():
    shown = table(("system", "s", "ratio"), [("ours", 1.5, ratio(3, 2)), ("peer", None, "-")])
    assert shown.splitlines() == [
        "| system | s | ratio |",
        "| --- | ---: | ---: |",
        "| ours | 1.5 | 1.50x |",
        "| peer | - | - |",
    ]
    assert ratio(1.0, None) == ratio(None, 2.0) == ratio(1.0, 0) == "-"
    assert spread([1.0, 3.0, 2.0], unit="x") == "1.00, 3.00, 2.00; median 2.00x"
    with pytest.raises(ValueError, match="2 cells, the header 3"):
        table(("a", "b", "c"), [("x", "y")])
