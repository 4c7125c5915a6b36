"""The project's documentation as the tests read it: README.md (the front page) and docs/*.md
(the reference). Tests that check a documented promise read the page that now holds it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS_DIR = ROOT / "docs"


def pages() -> list[Path]:
    """README.md, then every docs page, by name."""
    return [README, *sorted(DOCS_DIR.glob("*.md"))]


def page(name: str) -> str:
    """The text of docs/<name> (e.g. "options.md"), or of README.md for "README.md"."""
    return (README if name == "README.md" else DOCS_DIR / name).read_text()


def outside_code_blocks(text: str) -> str:
    """`text` without its fenced code blocks (their lines blanked, so line numbers hold)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors of a Markdown page: lowercase, punctuation other than '-' and
    '_' dropped, spaces as '-'; a repeated heading gets -1, -2, ..."""
    seen: dict[str, int] = {}
    found = set()
    for m in re.finditer(r"^#{1,6} +(.+?) *#* *$", outside_code_blocks(text), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found
