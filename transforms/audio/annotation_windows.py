"""Window labels from time-stamped events: OpenSoundscape's rule, centred and background windows.

The rule (``BoxedAnnotations.one_hot_labels_like`` in OpenSoundscape): an event that overlaps a
window at all (overlap > 0) gives the window its label when the overlap is at least
``min_label_overlap`` seconds **or** at least ``min_label_fraction`` of the event lies inside
the window. A window with no such label is a background window: it gets ``background_class``,
or is dropped (``drop_background``). Overlaps are computed in seconds, the window spanning
``[start / rate, (start + win_len) / rate)``; a value within `TIE_S` of a threshold meets it
(float rounding must not decide a tie).

Event windows (``--event_windows centered``): one window per event, its centre on the event's
centre (rounded to a sample), moved inside the file when the event is nearer an edge than half
a window; plus ``background_per_file`` windows sampled uniformly, without replacement, among the
starts whose window touches no event, seeded per file by a blake2b hash of (seed, path).

Everything here is pure: numpy in, numpy out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from transforms.audio.annotations import Event

TIE_S = 1e-9  # thresholds are met within a nanosecond


@dataclasses.dataclass(frozen=True)
class LabelRule:
    """How events label windows.

    Attributes:
      min_overlap_s: an event of at least this much overlap labels the window (seconds).
      min_fraction: ... or one with at least this fraction of its duration inside it.
      background_class: the class of windows without a label.
      drop_background: drop those windows instead.
    """

    min_overlap_s: float = 0.25
    min_fraction: float = 0.5
    background_class: str = "background"
    drop_background: bool = False

    def __post_init__(self) -> None:
        if not self.min_overlap_s >= 0:
            raise ValueError(f"--min_label_overlap must be >= 0, got {self.min_overlap_s}")
        if not 0 < self.min_fraction <= 1:
            raise ValueError(f"--min_label_fraction must be in (0, 1], got {self.min_fraction}")
        if not self.drop_background and not self.background_class.strip():
            raise ValueError("--background_class must not be empty")


@dataclasses.dataclass(frozen=True)
class WindowLabels:
    """Labels of a file's windows (every planned window; `keep` says which are recorded).

    Attributes:
      labels: per window, its sorted labels (the background class for background windows).
      keep: bool [n]: False for background windows under ``drop_background``.
      events: per window, (start, end, label) of every event overlapping it at all, start/end
        in samples relative to the window start (may be < 0 or > win_len: not clipped),
        sorted.
    """

    labels: tuple[tuple[str, ...], ...]
    keep: np.ndarray
    events: tuple[tuple[tuple[int, int, str], ...], ...]


def label_windows(
    starts: np.ndarray,
    *,
    win_len: int,
    sample_rate: int,
    events: Sequence[Event],
    rule: LabelRule,
) -> WindowLabels:
    """Applies the rule to windows at `starts` (sorted, in samples) of one signal.

    Cost: O(events * log(windows) + overlapping pairs): each event only meets the windows its
    time span reaches (found by binary search), so hours of audio stay cheap.
    """
    starts = np.asarray(starts, np.int64)
    if len(starts) > 1 and np.any(np.diff(starts) < 0):
        raise ValueError("window starts must be sorted")
    n = len(starts)
    found: list[set[str]] = [set() for _ in range(n)]
    touching: list[list[tuple[int, int, str]]] = [[] for _ in range(n)]
    for event in events:
        first_s, last_s = event.start_s * sample_rate, event.end_s * sample_rate  # in samples
        # windows with start < event end and start + win_len > event start
        lo = int(np.searchsorted(starts, first_s - win_len, side="right"))
        hi = int(np.searchsorted(starts, last_s, side="left"))
        if hi <= lo:
            continue
        win_start = starts[lo:hi] / sample_rate
        win_end = (starts[lo:hi] + win_len) / sample_rate
        overlap = np.minimum(win_end, event.end_s) - np.maximum(win_start, event.start_s)
        fraction = overlap / (event.end_s - event.start_s)
        positive = overlap > TIE_S  # OpenSoundscape first keeps events with overlap > 0
        hit = positive & (
            (overlap >= rule.min_overlap_s - TIE_S) | (fraction >= rule.min_fraction - TIE_S)
        )
        on = round(first_s)
        off = round(last_s)
        for j in range(lo, hi):
            if not positive[j - lo]:
                continue
            s = int(starts[j])
            touching[j].append((on - s, off - s, event.label))
            if hit[j - lo]:
                found[j].add(event.label)
    background = (rule.background_class,)
    labels = tuple(tuple(sorted(f)) if f else background for f in found)
    keep = np.array([bool(f) or not rule.drop_background for f in found], dtype=bool)
    return WindowLabels(labels=labels, keep=keep, events=tuple(tuple(sorted(t)) for t in touching))


def multi_hot(labels: Sequence[Sequence[str]], classes: Sequence[str]) -> np.ndarray:
    """float32 [windows, len(classes)]: 1 where the window has the class (labels outside: 0)."""
    index = {c: i for i, c in enumerate(classes)}
    out = np.zeros((len(labels), len(classes)), np.float32)
    for row, names in enumerate(labels):
        for name in names:
            if name in index:
                out[row, index[name]] = 1.0
    return out


def events_array(
    events: Sequence[Sequence[tuple[int, int, str]]],
    classes: Sequence[str],
    *,
    max_events: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Padded per-window events: (int64 [windows, max_events, 3] of (start, end, class id),
    padded with -1; int64 [windows] counts). Events beyond `max_events` are left out (the count
    says how many were kept); an event whose label is not a class has class id -1.
    """
    index = {c: i for i, c in enumerate(classes)}
    out = np.full((len(events), max_events, 3), -1, np.int64)
    counts = np.zeros(len(events), np.int64)
    for row, evs in enumerate(events):
        kept = list(evs)[:max_events]
        counts[row] = len(kept)
        for k, (on, off, label) in enumerate(kept):
            out[row, k] = (on, off, index.get(label, -1))
    return out, counts


def centered_starts(
    events: Sequence[Event], *, sample_rate: int, win_len: int, num_frames: int
) -> np.ndarray:
    """Start (int64, one per event, in event order) of a window centred on each event.

    The window's centre sample ``start + win_len // 2`` is the event's centre rounded to a
    sample; a window that would leave the file is moved inside it. None when the file is
    shorter than a window.
    """
    if num_frames < win_len:
        return np.zeros(0, np.int64)
    centre = np.array([round((e.start_s + e.end_s) / 2 * sample_rate) for e in events], np.int64)
    return np.clip(centre - win_len // 2, 0, num_frames - win_len).astype(np.int64)


def background_starts(
    events: Sequence[Event],
    *,
    sample_rate: int,
    win_len: int,
    num_frames: int,
    count: int,
    seed_key: str,
) -> np.ndarray:
    """Up to `count` sorted starts of windows that touch no event, drawn without replacement.

    Allowed starts are 0 .. num_frames - win_len minus, for every event spanning samples
    [floor(start * rate), ceil(end * rate)), the starts within win_len before it or inside it.
    Fewer than `count` when fewer starts are free. `seed_key` (e.g. "<seed>:<path>") fixes
    the draw through a blake2b hash, so it is the same on every run and worker.
    """
    last = num_frames - win_len
    if count <= 0 or last < 0:
        return np.zeros(0, np.int64)
    blocked = sorted(
        (math.floor(e.start_s * sample_rate) - win_len + 1, math.ceil(e.end_s * sample_rate) - 1)
        for e in events
    )
    free: list[tuple[int, int]] = []  # inclusive ranges of allowed starts
    pos = 0
    for lo, hi in blocked:
        if lo > pos:
            free.append((pos, min(lo - 1, last)))
        pos = max(pos, hi + 1)
        if pos > last:
            break
    if pos <= last:
        free.append((pos, last))
    free = [(a, b) for a, b in free if a <= b]
    sizes = np.array([b - a + 1 for a, b in free], np.int64)
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    digest = hashlib.blake2b(seed_key.encode("utf-8"), digest_size=8).digest()
    rng = np.random.default_rng(int.from_bytes(digest, "little"))
    picks = np.sort(rng.choice(total, size=min(count, total), replace=False))
    ends = np.cumsum(sizes)
    which = np.searchsorted(ends, picks, side="right")
    firsts = np.array([a for a, _ in free], np.int64)
    return (firsts[which] + picks - (ends[which] - sizes[which])).astype(np.int64)


def cut_at(
    blocks: Iterable[np.ndarray],
    starts: np.ndarray,
    *,
    win_len: int,
    max_windows_per_chunk: int,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Windows at explicit sorted `starts` from a stream of consecutive blocks, bounded memory.

    The counterpart of `transforms.audio.windows.frame_blocks` for windows that are not on a regular
    grid (centred event windows, background windows, a grid with windows left out). Frames past
    the end of the signal are zeros (``--pad``).

    Args:
      blocks: consecutive, non-overlapping blocks of one signal, each [frames, channels].
      starts: int64 [n] sorted window starts (repeats allowed).
      win_len: window length in frames.
      max_windows_per_chunk: at most this many windows per yielded chunk.

    Yields:
      (starts, windows): int64 [k] and [k, win_len, channels] copies, in order.
    """
    starts = np.asarray(starts, np.int64)
    ends = starts + win_len
    buf: np.ndarray | None = None  # frames [buf_start, buf_start + len(buf)) of the signal
    buf_start, i = 0, 0
    for block in blocks:
        buf = block if buf is None else np.concatenate([buf, block])
        j = int(np.searchsorted(ends, buf_start + len(buf), side="right"))  # windows now whole
        yield from _emit(buf, buf_start, starts[i:j], win_len, max_windows_per_chunk)
        i = j
        keep_from = int(starts[i]) if i < len(starts) else buf_start + len(buf)
        drop = min(max(keep_from - buf_start, 0), len(buf))
        buf, buf_start = buf[drop:], buf_start + drop
    if i < len(starts):  # windows reaching past the end: zero-padded
        buf = np.zeros((0, 1), np.float32) if buf is None else buf
        padded = np.zeros((int(ends[-1]) - buf_start, *buf.shape[1:]), buf.dtype)
        padded[: len(buf)] = buf
        yield from _emit(padded, buf_start, starts[i:], win_len, max_windows_per_chunk)


def _emit(
    buf: np.ndarray, buf_start: int, starts: np.ndarray, win_len: int, per_chunk: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for lo in range(0, len(starts), per_chunk):
        chunk = starts[lo : lo + per_chunk]
        index = (chunk - buf_start)[:, None] + np.arange(win_len)[None, :]
        yield chunk, buf[index]  # fancy indexing: a [k, win_len, channels] copy
