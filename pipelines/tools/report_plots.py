"""The report's figures, drawn with matplotlib (Agg, no pyplot state) and returned as PNG bytes.

Each ``*_figure`` function takes plain data (`pipelines.tools.report` summaries or a
`pipelines.tools.report_sample.Sample`) and returns a `matplotlib.figure.Figure`; `render_png`
turns one into PNG bytes and releases it.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Mapping

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from pipelines.tools import report_annotations  # noqa: E402
from pipelines.tools.report import FileStats, class_counts, file_stats, printable  # noqa: E402
from pipelines.tools.report_sample import Sample  # noqa: E402
from replay import DatasetInfo  # noqa: E402

DPI = 80
MAX_FILE_BARS = 30  # more source files than this: histograms instead of one bar per file
_WAVE_POINTS = 600  # waveforms are drawn as a min/max envelope of this many columns
_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")


@dataclasses.dataclass(frozen=True)
class Plot:
    """One rendered figure.

    Attributes:
      name: file-name stem and HTML id (e.g. "classes").
      title: heading shown above it.
      caption: one sentence under it.
      png: the PNG bytes.
    """

    name: str
    title: str
    caption: str
    png: bytes


def render_png(fig: Figure, dpi: int = DPI) -> bytes:
    """`fig` as PNG bytes (the figure is cleared afterwards to free its memory).

    Labels, file names and keys come from the manifest (untrusted): they are drawn literally,
    never as mathtext (a ``$`` pair in a label would be parsed, and bad TeX raises), and a lone
    surrogate (any JSON string may hold one; Agg raises on it) is drawn escaped.
    """
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            formatter = axis.get_major_formatter()
            if isinstance(formatter, FuncFormatter):  # set_ticks(labels=...); made at draw time
                formatter.func = _printable_labels(formatter.func)
    for text in fig.findobj(Text):
        text.set_text(printable(text.get_text()))
        text.set_parse_math(False)
    buf = io.BytesIO()
    with matplotlib.rc_context({"text.parse_math": False}):  # tick labels made while drawing
        fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    fig.clear()
    return buf.getvalue()


def _printable_labels(func: Callable[[float, int | None], str]) -> Callable:
    return lambda x, pos=None: printable(str(func(x, pos)))


def _message(fig: Figure, text: str) -> Figure:
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=12, color="#555")
    ax.set_axis_off()
    return fig


def class_histogram_figure(counts: Mapping[str, Mapping[str, int]]) -> Figure:
    """Windows per class, one stacked bar segment per split.

    Args:
      counts: class -> split -> windows (`report.class_counts`).
    """
    classes = list(counts)
    fig = Figure(figsize=(max(6.0, 0.35 * len(classes) + 2), 3.6))
    if not classes:
        return _message(fig, "no classes")
    ax = fig.add_subplot()
    splits = list(next(iter(counts.values())))
    x = np.arange(len(classes))
    bottom = np.zeros(len(classes))
    for i, split in enumerate(splits):
        values = np.array([counts[c][split] for c in classes], dtype=float)
        ax.bar(x, values, bottom=bottom, color=_COLORS[i % len(_COLORS)], label=split)
        bottom += values
    for xi, total in zip(x, bottom, strict=True):
        ax.annotate(f"{int(total)}", (xi, total), ha="center", va="bottom", fontsize=8)
    rotate = len(classes) > 8
    ax.set_xticks(x, classes, rotation=45 if rotate else 0, ha="right" if rotate else "center")
    ax.set_ylabel("windows")
    ax.set_ylim(0, max(bottom.max(), 1) * 1.15)
    ax.set_title("windows per class")
    if len(splits) > 1:
        ax.legend(title="split", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return fig


def file_distribution_figure(files: FileStats) -> Figure:
    """Duration and window count of each source file (bars per file, or histograms)."""
    fig = Figure(figsize=(11, max(3.0, min(0.28 * files.count + 1.4, 9.0))))
    if not files.count:
        return _message(fig, "no decoded source files")
    ax_dur, ax_win = fig.subplots(1, 2)
    panels = (
        (ax_dur, np.asarray(files.durations), "duration (s)", _COLORS[0]),
        (ax_win, np.asarray(files.num_windows), "windows", _COLORS[1]),
    )
    for ax, values, label, color in panels:
        if files.count <= MAX_FILE_BARS:
            y = np.arange(files.count)
            ax.barh(y, values, color=color)
            ax.set_yticks(y, files.names if ax is ax_dur else [""] * files.count, fontsize=8)
            ax.invert_yaxis()
            ax.set_xlabel(label)
            ax.grid(axis="x", alpha=0.3)
        else:
            ax.hist(values, bins=min(40, max(5, files.count // 10)), color=color)
            ax.set_xlabel(label)
            ax.set_ylabel("files")
            ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"{label} per source file (total {values.sum():.4g})", fontsize=10)
    return fig


def _shorten(text: str, limit: int = 28) -> str:
    """`text`, or its last `limit` - 1 characters after an ellipsis."""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def _envelope(wave: np.ndarray, points: int = _WAVE_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(min, max) of `points` equal column groups of `wave` (a readable, light waveform)."""
    n = len(wave) // points * points
    if n == 0:
        return wave, wave
    cols = wave[:n].reshape(points, -1)
    return cols.min(axis=1), cols.max(axis=1)


def example_grid_figure(sample: Sample) -> Figure:
    """Example windows per class: a row per class, waveform above its feature image."""
    rows = [c for c in sample.classes if sample.examples.get(c)]
    per_row = max((len(sample.examples[c]) for c in rows), default=0)
    with_image = sample.image_key is not None
    height = (2.6 if with_image else 1.3) * len(rows) + 0.6
    fig = Figure(figsize=(4.0 * max(per_row, 1) + 0.8, max(height, 2.0)))
    if not rows:
        return _message(fig, "no elements to show")
    sub = 2 if with_image else 1
    grid = fig.add_gridspec(
        len(rows) * sub, per_row, height_ratios=[1, 2] * len(rows) if with_image else None
    )
    for r, label in enumerate(rows):
        for c, ex in enumerate(sample.examples[label]):
            ax = fig.add_subplot(grid[r * sub, c])
            low, high = _envelope(ex.waveform)
            t = np.linspace(0, len(ex.waveform) / max(ex.sample_rate, 1), len(low))
            ax.fill_between(t, low, high, color=_COLORS[r % len(_COLORS)], linewidth=0.5)
            ax.set_xlim(t[0], t[-1])
            report_annotations.draw_events(ax, ex, sample.classes)  # --annotations: shaded
            ax.tick_params(labelsize=7)
            name = _shorten(ex.filepath.rsplit("/", 1)[-1])
            ax.set_title(f"{label} | {name} @ {ex.win_start}", fontsize=8)
            if c == 0:
                ax.set_ylabel("amplitude", fontsize=7)
            if with_image and ex.image is not None:
                img_ax = fig.add_subplot(grid[r * sub + 1, c])
                img_ax.imshow(ex.image.T, origin="lower", aspect="auto", cmap="magma")
                img_ax.tick_params(labelsize=7)
                if c == 0:
                    img_ax.set_ylabel(f"{sample.image_key} bin", fontsize=7)
    fig.suptitle(
        "example windows per class (waveform" + (f" + {sample.image_key})" if with_image else ")"),
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def feature_stats_figure(sample: Sample) -> Figure:
    """Mean ± std of each feature per bin (over frames) and per time frame (over bins)."""
    keys = list(sample.stats)
    fig = Figure(figsize=(11, 2.6 * max(len(keys), 1) + 0.4))
    if not keys or sample.num_elements == 0:
        return _message(fig, "no [frames, bins] features recorded")
    axes = fig.subplots(len(keys), 2, squeeze=False)
    for row, key in enumerate(keys):
        stats = sample.stats[key]
        mean_all, std_all = stats.overall()
        panels = ((stats.per_bin(), "bin"), (stats.per_frame(), "time frame"))
        for col, ((mean, std), axis_name) in enumerate(panels):
            ax = axes[row][col]
            x = np.arange(len(mean))
            ax.plot(x, mean, color=_COLORS[row % len(_COLORS)], linewidth=1.2, label="mean")
            ax.fill_between(
                x, mean - std, mean + std, color=_COLORS[row % len(_COLORS)], alpha=0.25, lw=0
            )
            ax.set_xlim(0, max(len(mean) - 1, 1))
            ax.set_xlabel(axis_name, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            ax.set_title(
                f"{key} per {axis_name} (overall mean {mean_all:.3g}, std {std_all:.3g})",
                fontsize=9,
            )
    fig.suptitle(f"feature mean ± std over {sample.num_elements} sampled windows", fontsize=11)
    fig.tight_layout()
    return fig


def build_plots(info: DatasetInfo, sample: Sample) -> list[Plot]:
    """Every figure of the report, rendered, in page order."""
    files = file_stats(info)
    shown = [c for c in sample.classes if sample.examples.get(c)]
    per_class = max(map(len, sample.examples.values()), default=0)
    more = (
        f" (first {len(sample.classes)} of {info.num_classes} classes)"
        if (info.num_classes > len(sample.classes))
        else ""
    )
    image = sample.image_key or "no feature recorded: waveform only"
    specs = [
        (
            "classes",
            "Class histogram",
            "Windows per class (stacked by split), from the manifest's source file list.",
            lambda: class_histogram_figure(class_counts(info)),
        ),
        (
            "examples",
            "Example windows per class",
            f"{len(shown)} classes{more}, up to {per_class} windows each (distinct source files "
            f"first) from {sample.num_elements} sampled elements; waveform scaled to full "
            f"scale above {image}.",
            lambda: example_grid_figure(sample),
        ),
        (
            "files",
            "Source files",
            f"Duration and window count of the {files.count} decoded source files "
            f"({files.failed} failed).",
            lambda: file_distribution_figure(files),
        ),
        (
            "feature_stats",
            "Feature statistics",
            f"Mean ± std of each [frames, bins] feature per bin and per time frame, over "
            f"{sample.num_elements} sampled windows (of {info.num_examples()}).",
            lambda: feature_stats_figure(sample),
        ),
    ]
    # Drawn one at a time: only one figure is alive at once.
    return [Plot(name, title, caption, render_png(draw())) for name, title, caption, draw in specs]
