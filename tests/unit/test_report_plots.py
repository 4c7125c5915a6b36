"""`inspect`'s figures (`pipelines.tools.report_plots`), rendered with matplotlib's Agg backend and
decoded back: a sample of waveforms only (no feature) still renders a grid."""

from __future__ import annotations

import io

import numpy as np

from pipelines.tools import report_plots
from pipelines.tools.report_sample import Example, Sample


def _check_png(payload: bytes) -> None:
    import matplotlib.image

    assert payload.startswith(b"\x89PNG\r\n\x1a\n")
    pixels = matplotlib.image.imread(io.BytesIO(payload), format="png")
    assert pixels.size > 0 and pixels.shape[0] > 50 and pixels.shape[1] > 50
    assert float(pixels.std()) > 0.01  # not a blank image


def test_a_waveform_only_grid_renders():
    wave = np.sin(np.linspace(0, 60, 4000)).astype(np.float32)
    example = Example("cat", "in/a_cat.wav", 0, 8000, wave, None)
    sample = Sample(1, None, ["cat"], {"cat": [example]}, {})
    _check_png(report_plots.render_png(report_plots.example_grid_figure(sample)))
