"""The documentation holds together: every relative link of README.md and docs/*.md reaches an
existing file (and, with `#anchor`, a heading of it), and docs/code-layout.md matches the tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.docs import DOCS_DIR, README, ROOT, anchors, outside_code_blocks, pages

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _links(path: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", outside_code_blocks(path.read_text()))  # not in code spans
    return [m.group(1) for m in LINK.finditer(text)]


def test_the_docs_anchor_rule_is_githubs():
    text = "# Quick start (the two commands)\n## `tests/unit/`\n## Same\n## Same\n```\n# not\n```"
    assert anchors(text) == {"quick-start-the-two-commands", "testsunit", "same", "same-1"}


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path):
    for link in _links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # https:, mailto: ...: not ours to check
            continue
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        assert file.exists(), f"{path.name}: {link}: no {file}"
        assert file.is_relative_to(ROOT), f"{path.name}: {link} leaves the repository"
        if anchor:
            assert file.suffix == ".md", f"{path.name}: {link}: an anchor into a non-Markdown file"
            assert anchor in anchors(file.read_text()), f"{path.name}: {link}: no such heading"


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / link.partition("#")[0]).resolve() for link in _links(README)}
    missing = [p.name for p in DOCS_DIR.glob("*.md") if p.resolve() not in linked]
    assert not missing, f"README.md does not link {missing}"


def _layout() -> dict[str, set[str]]:
    """{directory: the file names its "## `dir/`" section's tables name} of docs/code-layout.md."""
    sections = re.split(r"^## `([^`]+)/`\n", (DOCS_DIR / "code-layout.md").read_text(), flags=re.M)
    layout = {}
    for directory, body in zip(sections[1::2], sections[2::2], strict=True):
        names = set()
        for row in re.findall(r"^\| ([^|]+) \|", body, flags=re.M):
            names |= set(re.findall(r"`([^`]+)`", row))
        layout[directory] = names
    return layout


def test_code_layout_names_existing_files_and_every_module():
    layout = _layout()
    expected = {
        "pipelines", "pipelines/plan", "pipelines/resume", "pipelines/tools", "transforms/audio",
        "transforms/spec", "transforms/stages", "runners",
        "replay", "tests", "tests/unit", "tests/pipeline", "tests/reliability", "tests/engines",
        "tests/support", "benchmarks", "fuzz", "data",
    }  # fmt: skip
    assert expected <= set(layout), expected - set(layout)
    for directory, names in layout.items():
        base = ROOT / directory
        missing = sorted(n for n in names if not (base / n.rstrip("/")).exists())
        assert not missing, f"docs/code-layout.md names {missing} under {directory}/: not there"
        modules = {
            p.name for p in base.glob("*.py") if p.name != "__init__.py" or p.read_text().strip()
        }
        subdirs = {
            p.name + "/"
            for p in base.iterdir()
            if p.is_dir() and not p.name.startswith((".", "__"))
        }
        unnamed = sorted((modules | subdirs) - names)
        assert not unnamed, f"docs/code-layout.md leaves out {unnamed} of {directory}/"
