"""The element sample `inspect` draws (`pipelines.tools.report_sample`): feature statistics
accumulated chunk by chunk equal numpy's over all the rows (per bin, per frame, overall)."""

from __future__ import annotations

import numpy as np

from pipelines.tools.report_sample import FeatureStats


def test_feature_stats_match_numpy():
    rng = np.random.default_rng(0)
    data = rng.normal(2.0, 3.0, size=(40, 7, 5))
    stats = FeatureStats.empty("f", (7, 5))
    for chunk in np.split(data, 4):
        stats.update(chunk)
    np.testing.assert_allclose(stats.per_bin()[0], data.mean(axis=(0, 1)))
    np.testing.assert_allclose(stats.per_frame()[1], data.std(axis=(0, 2)))
    np.testing.assert_allclose(stats.overall(), (data.mean(), data.std()))
