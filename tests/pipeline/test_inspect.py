"""`python -m pipelines.inspect`: the text summary, the HTML report / PNG plots, and its errors."""

from __future__ import annotations

import base64
import html.parser
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipelines import inspect

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ("classes", "examples", "files", "feature_stats")
HEAVY = ("apache_beam", "tensorflow_transform")


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def dataset(sample_dataset) -> Path:
    return sample_dataset  # the README's recording of the bundled sample (tests/conftest.py)


@pytest.fixture(scope="module")
def rendered(dataset, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("report")
    argv = [str(dataset), "--report", str(out / "r.html"), "--plots", str(out / "plots")]
    assert inspect.run(argv) == 0
    return {"html": (out / "r.html").read_text(), "plots": out / "plots"}


class _Images(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: dict[str, str] = {}
        self.tags: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        attr = dict(attrs)
        if tag == "img":
            self.images[attr.get("id") or ""] = attr.get("src") or ""
        self.links += [v for k, v in attrs if k in ("src", "href") and v]


def _decode_png(payload: bytes) -> np.ndarray:
    import matplotlib.image

    assert payload.startswith(b"\x89PNG\r\n\x1a\n")
    return matplotlib.image.imread(io.BytesIO(payload), format="png")


def _check_png(payload: bytes) -> None:
    pixels = _decode_png(payload)
    assert pixels.size > 0 and pixels.shape[0] > 50 and pixels.shape[1] > 50
    assert float(pixels.std()) > 0.01  # not a blank image


@pytest.mark.slow
def test_summary_lists_counts_classes_shapes_and_compression(dataset, capsys):
    assert inspect.run([str(dataset)]) == 0
    out = capsys.readouterr().out
    assert "18 windows in 1 split(s), 3 classes, from 6 source files (0 failed)" in out
    assert "compression:  NONE" in out
    for line in ("signal         int16    [16000]", "log_mel        float32  [98, 64]"):
        assert line in out
    sections = {block.split(":")[0]: block.splitlines()[1:] for block in out.split("\n\n")}
    classes = [line.split() for line in sections["Classes (windows per split)"]]
    assert classes == [
        ["target", "class", "all"],
        ["0", "bird", "6"],
        ["1", "engine", "6"],
        ["2", "rain", "6"],
    ]  # class ids are the labels sorted by name
    shard = sections["Splits (shard file sizes)"][1].split()
    assert shard[:3] == ["all", "18", "1"] and shard[-1] == "MB"
    for text in ("Parameters:", "win_len=16000", "Versions:", "apache_beam 2.77", "created:"):
        assert text in out


@pytest.mark.slow
def test_summary_needs_no_tensorflow_and_the_report_no_beam(dataset):
    proc = _python(
        "import sys; from pipelines import inspect\n"
        f"assert inspect.run([{str(dataset)!r}]) == 0\n"
        "print('SUMMARY', [m for m in ('tensorflow', *HEAVY) if m in sys.modules])\n"
        "from pipelines.tools import report_html, report_plots, report_sample\n"
        "print('REPORT', [m for m in HEAVY if m in sys.modules])\n".replace("HEAVY", repr(HEAVY))
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SUMMARY []" in proc.stdout and "REPORT []" in proc.stdout


@pytest.mark.slow
def test_report_is_self_contained_with_every_figure(rendered):
    parser = _Images()
    parser.feed(rendered["html"])
    assert set(parser.images) == {f"fig-{name}" for name in FIGURES}
    for src in parser.images.values():
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        _check_png(base64.b64decode(src[len(prefix) :], validate=True))
    assert not parser.tags & {"script", "link", "iframe"}
    assert all(link.startswith(("data:", "#")) for link in parser.links), parser.links
    assert "Element spec (10 keys)" in rendered["html"]  # the text summary is on the page


@pytest.mark.slow
def test_plots_dir_holds_the_same_pngs(rendered):
    for name in FIGURES:
        payload = (rendered["plots"] / f"{name}.png").read_bytes()
        _check_png(payload)
        assert base64.b64encode(payload).decode() in rendered["html"]


def _fails(capsys, *argv: str) -> str:
    assert inspect.run(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_missing_or_incomplete_dataset_is_one_error_line(tmp_path, capsys):
    assert "does not exist" in _fails(capsys, str(tmp_path / "nope"))
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in _fails(capsys, str(tmp_path / "file"))
    (tmp_path / "partial").mkdir()
    assert "incomplete dataset" in _fails(capsys, str(tmp_path / "partial"))
    (tmp_path / "partial" / "manifest.json").write_text('{"format": "audiorecords"')
    assert "unreadable manifest" in _fails(capsys, str(tmp_path / "partial"))


def test_command_line_exit_code(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.inspect", str(tmp_path / "nope")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'nope'}: dataset directory does not exist"
    ]
