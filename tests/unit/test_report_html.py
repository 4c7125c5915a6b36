"""`inspect`'s HTML page (`pipelines.tools.report_html`): self-contained (every figure a PNG data
URI, no script, stylesheet or outside link), every figure's section linked from the navigation,
text escaped; the page and the figures written to files."""

from __future__ import annotations

import base64
import html.parser

from matplotlib.figure import Figure

from pipelines.tools import report_html
from pipelines.tools.report_plots import Plot, render_png


class _Page(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.images: dict[str, str] = {}
        self.links: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        attr = dict(attrs)
        if tag == "img":
            self.images[attr.get("id") or ""] = attr.get("src") or ""
        self.links += [v for k, v in attrs if k in ("src", "href") and v]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _plots() -> list[Plot]:
    plots = []
    for name, title in (("classes", "Windows <per> class"), ("files", "Files & lengths")):
        fig = Figure(figsize=(2, 2))
        fig.subplots().plot([0, 1, 2], [2, 0, 1])
        plots.append(Plot(name, title, f"a caption of {name}", render_png(fig)))
    return plots


def test_the_page_is_self_contained_and_escapes_its_text():
    plots = _plots()
    summary = "Classes:\n  <b>bird</b> & rain\n"
    page = report_html.render_html(
        title="out/<ds>", subtitle="3 windows & 1 split", summary=summary, plots=plots
    )
    parser = _Page()
    parser.feed(page)
    assert page.startswith("<!DOCTYPE html>")
    assert set(parser.images) == {"fig-classes", "fig-files"}
    for plot in plots:
        src = parser.images[f"fig-{plot.name}"]
        assert src == report_html.data_uri(plot.png)
        assert base64.b64decode(src.removeprefix("data:image/png;base64,")) == plot.png
    assert not set(parser.tags) & {"script", "link", "iframe"}
    assert "b" not in parser.tags  # the summary's markup is text
    assert [link for link in parser.links if not link.startswith("data:")] == [
        "#classes",
        "#files",
        "#summary",
    ]
    text = "".join(parser.text)
    assert summary in text and "out/<ds>" in text and "Windows <per> class" in text


def test_the_page_and_the_figures_are_written_to_files(tmp_path):
    plots = _plots()
    page = report_html.render_html(title="t", subtitle="s", summary="\udcff", plots=plots)
    path = report_html.write_report(tmp_path / "a" / "b" / "r.html", page)
    assert path == tmp_path / "a" / "b" / "r.html"
    assert "\\udcff" in path.read_text(encoding="utf-8")  # a lone surrogate kept visible
    written = report_html.write_plots(tmp_path / "plots", plots)
    assert written == [tmp_path / "plots" / "classes.png", tmp_path / "plots" / "files.png"]
    assert [p.read_bytes() for p in written] == [p.png for p in plots]
