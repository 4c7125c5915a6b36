"""Windowing rule and streaming framing, against a direct slicing of the whole signal."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.audio.windows import WindowConfig, frame_blocks, num_windows, window_starts


def test_helper_defaults():
    cfg = WindowConfig(win_len=4)
    assert cfg.hop == 4
    assert num_windows(3, cfg) == 0  # shorter than one window: no window
    assert num_windows(11, cfg) == 2  # trailing partial window dropped
    assert num_windows(11, WindowConfig(win_len=4, pad=True)) == 3  # ... or zero-padded
    assert num_windows(11, WindowConfig(win_len=4, hop_len=2, max_windows=3)) == 3
    assert list(window_starts(11, WindowConfig(win_len=4, hop_len=3))) == [0, 3, 6]


@pytest.mark.parametrize(
    "kwargs", [{"win_len": 0}, {"win_len": 4, "hop_len": 0}, {"win_len": 4, "max_windows": 0}]
)
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        WindowConfig(**kwargs)


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 300),
    win=st.integers(1, 50),
    hop=st.integers(1, 60),
    pad=st.booleans(),
    max_windows=st.one_of(st.none(), st.integers(1, 12)),
    chunk=st.integers(1, 6),
    cuts=st.lists(st.integers(0, 300), max_size=6),
    channels=st.integers(1, 3),
)
def test_streamed_windows_equal_direct_slices(n, win, hop, pad, max_windows, chunk, cuts, channels):
    cfg = WindowConfig(win_len=win, hop_len=hop, pad=pad, max_windows=max_windows)
    x = np.arange(n * channels, dtype=np.int32).reshape(n, channels) + 1
    bounds = [0, *sorted(min(c, n) for c in cuts), n]
    blocks = [x[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=False)]
    chunks = list(frame_blocks(blocks, cfg, max_windows_per_chunk=chunk))
    assert all(len(s) <= chunk for s, _ in chunks)
    starts = np.concatenate([s for s, _ in chunks]) if chunks else np.zeros(0, np.int64)
    np.testing.assert_array_equal(starts, window_starts(n, cfg))
    padded = np.concatenate([x, np.zeros((win + hop, channels), x.dtype)])
    for s, w in chunks:
        assert w.shape[1:] == (win, channels)
        for start, window in zip(s, w, strict=False):
            np.testing.assert_array_equal(window, padded[start : start + win])
