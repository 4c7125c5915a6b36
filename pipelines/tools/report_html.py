"""A self-contained HTML report page: the text summary plus PNG figures inlined as data URIs.

No external CSS, JS, fonts or images: the file opens offline and can be mailed around.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Sequence
from pathlib import Path

from pipelines.tools.report_plots import Plot

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px auto;
       max-width: 1200px; color: #222; background: #fff; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin: 28px 0 6px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta { color: #666; font-size: 13px; }
nav a { margin-right: 14px; font-size: 13px; }
figure { margin: 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 13px; margin-top: 4px; }
pre { background: #f6f8fa; border: 1px solid #e1e4e8; padding: 12px; font-size: 12px;
      overflow-x: auto; line-height: 1.35; }
"""


def data_uri(png: bytes) -> str:
    """`png` as a ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def render_html(*, title: str, subtitle: str, summary: str, plots: Sequence[Plot]) -> str:
    """The report page.

    Args:
      title: page title and heading (e.g. the dataset path).
      subtitle: one line under the heading.
      summary: the text summary (shown preformatted, after the figures).
      plots: the figures, in page order; each becomes ``<img id="fig-<name>">``.

    Returns:
      The HTML document.
    """
    esc = html.escape
    nav = " ".join(f'<a href="#{esc(p.name)}">{esc(p.title)}</a>' for p in plots)
    sections = [
        f'<section id="{esc(p.name)}">\n<h2>{esc(p.title)}</h2>\n<figure>\n'
        f'<img id="fig-{esc(p.name)}" alt="{esc(p.title)}" src="{data_uri(p.png)}">\n'
        f"<figcaption>{esc(p.caption)}</figcaption>\n</figure>\n</section>"
        for p in plots
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(title)}</title>",
            f"<style>{_CSS}</style>",
            "</head>",
            "<body>",
            f"<h1>{esc(title)}</h1>",
            f'<p class="meta">{esc(subtitle)}</p>',
            f'<nav>{nav} <a href="#summary">Summary</a></nav>',
            *sections,
            '<section id="summary">\n<h2>Summary</h2>',
            f"<pre>{esc(summary)}</pre>\n</section>",
            "</body>",
            "</html>",
            "",
        ]
    )


def write_report(path: str | os.PathLike, page: str) -> Path:
    """Writes the page (creating parent directories) and returns its path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8", errors="backslashreplace")  # lone surrogates
    return out


def write_plots(directory: str | os.PathLike, plots: Sequence[Plot]) -> list[Path]:
    """Writes each plot as ``<directory>/<name>.png`` and returns the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for plot in plots:
        path = out / f"{plot.name}.png"
        path.write_bytes(plot.png)
        paths.append(path)
    return paths
