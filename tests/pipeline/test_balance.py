"""Class-balanced replay (`replay.balance`): classes of very different sizes come out uniform
within the tolerance the module documents, from a real record run."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from tests.support.record_helpers import record


def _tolerance(p: float, n: int) -> float:
    """3 binomial standard deviations: the bound `replay.balance` documents."""
    return 3 * (p * (1 - p) / n) ** 0.5


@pytest.mark.slow
def test_balanced_replay_single_label_within_tolerance(tmp_path):
    """Classes of 12, 3 and 1 windows (filename labels) come out uniform within 3 sigma."""
    from replay import load_info, replay_dataset

    rate = 8000
    rng = np.random.default_rng(0)
    for name, windows in (("x_common", 12), ("y_rare", 3), ("z_single", 1)):
        noise = (rng.standard_normal(windows * 800) * 1000).astype(np.int16)
        sf.write(tmp_path / f"{name}.wav", noise, rate, subtype="PCM_16")
    record(str(tmp_path / "*.wav"), tmp_path / "out", "--win_len", "800", "--features", "none")
    info = load_info(tmp_path / "out")
    assert info.classes == ("common", "rare", "single") and info.num_examples() == 16
    n = 3000
    ds = replay_dataset(
        tmp_path / "out", features=["signal"], balance="class", seed=1, batch_size=50
    )
    assert set(ds.element_spec) == {"signal"}  # the class key is read, not returned
    targets = replay_dataset(tmp_path / "out", features=["target"], balance="class", seed=1)
    counts = np.bincount([int(e["target"]) for e in targets.take(n)], minlength=3)
    assert np.all(np.abs(counts / n - 1 / 3) <= _tolerance(1 / 3, n)), counts
    with pytest.raises(ValueError, match="balance"):
        replay_dataset(tmp_path / "out", balance="class", repeat=True)
    with pytest.raises(ValueError, match="balance must be"):
        replay_dataset(tmp_path / "out", balance="file")
