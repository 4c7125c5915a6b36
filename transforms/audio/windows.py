"""Windowing: pure planning of window positions and streaming framing of decoded blocks.

The rule (the familiar helper's defaults, plus `pad`):

- windows of ``win_len`` frames start every ``hop_len`` frames: 0, hop, 2*hop, ...
- without ``pad`` only whole windows are kept: ``1 + (n - win_len) // hop_len`` of them, none
  when the file is shorter than one window;
- with ``pad`` every start below ``n`` gets a window and missing frames are zeros
  (``tf.signal.frame(pad_end=True)`` semantics): ``ceil(n / hop_len)`` windows;
- ``max_windows`` keeps the first that many.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import numpy as np


@dataclasses.dataclass(frozen=True)
class WindowConfig:
    """How a signal is cut into windows.

    Attributes:
      win_len: window length in frames (> 0).
      hop_len: distance between window starts in frames (> 0); None means win_len.
      pad: zero-pad trailing partial windows instead of dropping them.
      max_windows: keep at most this many windows per signal (None: all).
    """

    win_len: int
    hop_len: int | None = None
    pad: bool = False
    max_windows: int | None = None

    def __post_init__(self) -> None:
        if self.win_len <= 0:
            raise ValueError(f"win_len must be > 0, got {self.win_len}")
        if self.hop_len is not None and self.hop_len <= 0:
            raise ValueError(f"hop_len must be > 0, got {self.hop_len}")
        if self.max_windows is not None and self.max_windows <= 0:
            raise ValueError(f"max_windows_per_signal must be > 0, got {self.max_windows}")

    @property
    def hop(self) -> int:
        return self.win_len if self.hop_len is None else self.hop_len


def num_windows(num_frames: int, config: WindowConfig) -> int:
    """How many windows a signal of `num_frames` frames yields under `config`."""
    if num_frames <= 0:
        count = 0
    elif config.pad:
        count = -(-num_frames // config.hop)
    elif num_frames < config.win_len:
        count = 0
    else:
        count = 1 + (num_frames - config.win_len) // config.hop
    return count if config.max_windows is None else min(count, config.max_windows)


def window_starts(num_frames: int, config: WindowConfig) -> np.ndarray:
    """Start offsets (int64 [num_windows]) of the windows of a `num_frames`-frame signal."""
    return np.arange(num_windows(num_frames, config), dtype=np.int64) * config.hop


def frame_blocks(
    blocks: Iterable[np.ndarray], config: WindowConfig, *, max_windows_per_chunk: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Cuts a stream of consecutive sample blocks into windows, in bounded memory.

    Args:
      blocks: consecutive, non-overlapping blocks of one signal, each [frames, channels].
      config: the window rule.
      max_windows_per_chunk: at most this many windows per yielded chunk.

    Yields:
      (starts, windows): int64 [k] start offsets and [k, win_len, channels] windows (a copy, in
      the blocks' dtype), in order; together exactly the windows `window_starts` plans.
    """
    if max_windows_per_chunk <= 0:
        raise ValueError(f"max_windows_per_chunk must be > 0, got {max_windows_per_chunk}")
    win, hop = config.win_len, config.hop
    limit = np.inf if config.max_windows is None else config.max_windows
    buf: np.ndarray | None = None  # frames [buf_start, buf_start + len(buf)) of the signal
    buf_start = 0
    next_start = 0  # start offset of the next window to emit
    emitted = 0
    for block in blocks:
        if emitted >= limit:
            break
        buf = block if buf is None else np.concatenate([buf, block])
        end = buf_start + len(buf)
        while emitted < limit and next_start + win <= end:
            count = min((end - next_start - win) // hop + 1, max_windows_per_chunk, limit - emitted)
            yield (
                next_start + hop * np.arange(count, dtype=np.int64),
                _cut(buf, next_start - buf_start, count, config),
            )
            next_start += count * hop
            emitted += count
        drop = min(next_start - buf_start, len(buf))
        buf, buf_start = buf[drop:], buf_start + drop
    if config.pad and buf is not None:
        end = buf_start + len(buf)
        while emitted < limit and next_start < end:
            count = min(-(-(end - next_start) // hop), max_windows_per_chunk, limit - emitted)
            padded = np.zeros(
                (next_start - buf_start + (count - 1) * hop + win,) + buf.shape[1:], buf.dtype
            )
            padded[: len(buf)] = buf
            yield (
                next_start + hop * np.arange(count, dtype=np.int64),
                _cut(padded, next_start - buf_start, count, config),
            )
            next_start += count * hop
            emitted += count


def _cut(buf: np.ndarray, offset: int, count: int, config: WindowConfig) -> np.ndarray:
    """`count` windows of `buf` starting at `offset`, every hop frames: a contiguous copy."""
    hop, win = config.hop, config.win_len
    view = np.lib.stride_tricks.sliding_window_view(buf[offset:], win, axis=0)[::hop][:count]
    return np.ascontiguousarray(np.moveaxis(view, -1, 1))  # [count, win, channels]
