"""From one decoded file to rows: windows -> run dtype -> channel mode -> Arrow RecordBatches.

No Beam here: pure functions plus one generator over a file object. A *row* is one element of
the dataset: a window of one channel (``--channel_mode split``) or of the mixed signal. Rows of a
file come in the canonical order (window, channel), i.e. row ``r`` is window ``r // C``,
channel ``r % C`` where C is the number of channels emitted (1 unless split). Features are
computed once per chunk of rows (vectorised, never per window).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from math import gcd
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from replay import format as fmt
from transforms.audio import dtypes, wav
from transforms.audio import features as feats
from transforms.audio.annotation_windows import cut_at
from transforms.audio.windows import frame_blocks, num_windows
from transforms.spec.annotation_columns import annotation_columns
from transforms.spec.types import InputFile, ReadWindowsConfig

_CHUNK_BYTES = 8 << 20  # 8 MiB of samples per chunk of windows (one RecordBatch)
_MAX_CHUNK_WINDOWS = 1024
FLOAT16_MAX = 65504.0  # the largest finite float16
_FLOAT16_ROUNDS_TO_INF = 65520.0  # float16(x) is inf from here (round to nearest even)


class FeatureRangeError(wav.WavDecodeError):
    """A file's feature holds a value its ``--feature_dtype`` cannot store: a per-file error,
    reported like a decode failure (`path`, one-line `reason` naming the feature, the value and
    the way out)."""


def float16_overflow(values: np.ndarray) -> float | None:
    """The largest finite magnitude in `values` that float16 would store as infinity, or None.

    float16 rounds to nearest, so values below 65520 round to ±65504; NaN and infinity pass.
    """
    if values.size == 0:
        return None
    if max(float(values.max()), -float(values.min())) < _FLOAT16_ROUNDS_TO_INF:
        return None  # the common case: two reductions, no temporary array
    magnitude = np.abs(values)
    finite = magnitude[(magnitude >= _FLOAT16_ROUNDS_TO_INF) & np.isfinite(magnitude)]
    return float(finite.max()) if finite.size else None


def channels_emitted(info: wav.WavInfo, config: ReadWindowsConfig) -> int:
    """C: rows per window of this file (its channel count under ``split``, else 1)."""
    return info.num_channels if config.channel_mode == "split" else 1


def output_rate(info: wav.WavInfo, config: ReadWindowsConfig) -> int:
    return config.sample_rate or info.sample_rate


def planned_rows(info: wav.WavInfo, config: ReadWindowsConfig) -> int:
    """Rows the file yields, from its header alone (resampling: scipy's ceil(n * up / down))."""
    frames = info.num_frames
    if config.sample_rate and config.sample_rate != info.sample_rate:
        g = gcd(info.sample_rate, config.sample_rate)
        up, down = config.sample_rate // g, info.sample_rate // g
        frames = -(-frames * up // down)
    return num_windows(frames, config.window) * channels_emitted(info, config)


def mix(windows: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """[k, win, channels] -> (signal [k*C, win], channel [k*C]) in (window, channel) order."""
    k, win, channels = windows.shape
    if mode == "split":
        rows = np.ascontiguousarray(np.moveaxis(windows, 2, 1)).reshape(k * channels, win)
        return rows, np.tile(np.arange(channels, dtype=np.int64), k)
    if mode == "mean" and channels > 1:
        mean = windows.mean(axis=2, dtype=np.float64)
        if np.issubdtype(windows.dtype, np.integer):
            mean = np.rint(mean)
        return mean.astype(windows.dtype), np.zeros(k, np.int64)
    return np.ascontiguousarray(windows[:, :, 0]), np.zeros(k, np.int64)


def resample(samples: np.ndarray, rate: int, target: int, *, full_scale: float) -> np.ndarray:
    """Resamples [frames, channels] to `target` Hz with scipy.signal.resample_poly.

    Integer samples are rounded and clipped to the source format's range (e.g. 24-bit stays
    within [-2**23, 2**23)); the dtype is kept.
    """
    from scipy.signal import resample_poly

    g = gcd(rate, target)
    out = resample_poly(samples.astype(np.float64), target // g, rate // g, axis=0)
    if np.issubdtype(samples.dtype, np.integer):
        out = np.clip(np.rint(out), -full_scale, full_scale - 1)
    return out.astype(samples.dtype)


def chunk_rows(info: wav.WavInfo, config: ReadWindowsConfig) -> int:
    """Rows per chunk of this file: ~8 MiB of samples (4 bytes a sample), 1024 at most.

    One chunk is one feature computation and one RecordBatch; the read stage also packs the
    chunks of consecutive short files up to this many rows (`transforms.stages.packs`).
    """
    frame_bytes = config.window.win_len * max(info.num_channels, 1) * 4
    return int(min(_MAX_CHUNK_WINDOWS, max(1, _CHUNK_BYTES // frame_bytes)))


def file_rows(
    fh: BinaryIO,
    *,
    path: str,
    info: wav.WavInfo,
    config: ReadWindowsConfig,
    row_start: int = 0,
    row_stop: int | None = None,
    planned_starts: np.ndarray | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Rows [row_start, row_stop) of one file, in chunks, in bounded memory.

    `planned_starts` (``--annotations``): the planned window starts, instead of the regular grid.

    Yields:
      (starts int64 [k], channels int64 [k], signal [k, win_len] in the run's dtype).
    """
    cfg = config
    channels = channels_emitted(info, cfg)
    per_chunk = chunk_rows(info, cfg)
    if cfg.sample_rate and cfg.sample_rate != info.sample_rate:
        samples = wav.decode(fh, path=path)[1]
        blocks = [resample(samples, info.sample_rate, cfg.sample_rate, full_scale=info.full_scale)]
    else:
        block_frames = max(per_chunk * cfg.window.hop, cfg.window.win_len)
        blocks = (
            b for _, b in wav.read_blocks(fh, path=path, block_frames=block_frames, info=info)
        )
    row = 0
    stop = np.inf if row_stop is None else row_stop
    if planned_starts is None:
        framed = frame_blocks(blocks, cfg.window, max_windows_per_chunk=per_chunk)
    else:
        win = cfg.window.win_len
        framed = cut_at(blocks, planned_starts, win_len=win, max_windows_per_chunk=per_chunk)
    for starts, windows in framed:
        first, n = row, len(starts) * channels
        row += n
        if row <= row_start:
            continue  # before this segment: decoded, never featurised
        if first >= stop:
            break
        signal, channel = mix(
            dtypes.convert(windows, target=cfg.signal_dtype, info=info, path=path), cfg.channel_mode
        )
        lo, hi = max(row_start - first, 0), int(min(stop - first, n))
        yield np.repeat(starts, channels)[lo:hi], channel[lo:hi], signal[lo:hi]


def list_column(values: np.ndarray, per_row: int, value_type: pa.DataType) -> pa.ListArray:
    """Flat `values` -> a list<value_type> column of `per_row` values per row."""
    rows = len(values) // per_row if per_row else 0
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * per_row, pa.int32())
    return pa.ListArray.from_arrays(offsets, pa.array(values, value_type))


def bytes_rows(rows: np.ndarray) -> pa.ListArray:
    """[k, n] array -> list<binary> column, one little-endian bytes value per row (zero-copy)."""
    k = rows.shape[0]
    data = np.ascontiguousarray(rows.astype(rows.dtype.newbyteorder("<"), copy=False))
    width = data.itemsize * (data.shape[1] if data.ndim > 1 else 1)
    offsets = pa.py_buffer(np.arange(k + 1, dtype=np.int32) * width)
    values = pa.Array.from_buffers(pa.binary(), k, [None, offsets, pa.py_buffer(data)])
    return pa.ListArray.from_arrays(pa.array(np.arange(k + 1, dtype=np.int32)), values)


def _check_float16(computed: dict, names, *, path: str) -> None:
    """Refuses the file when a feature exceeds float16, with a reason naming the feature and the
    way out (the file becomes an error entry; the encoder's own check would say less)."""
    for name in names:
        worst = float16_overflow(computed[name])
        if worst is not None:
            raise FeatureRangeError(
                path,
                f"{name}: {worst:.6g} is beyond float16's range (±{FLOAT16_MAX:g}); "
                "use --feature_dtype float32 or bfloat16",
            )


def rows_to_batch(
    *,
    f: InputFile,
    starts: np.ndarray,
    channels: np.ndarray,
    signal: np.ndarray,
    config: ReadWindowsConfig,
) -> pa.RecordBatch:
    """One raw RecordBatch (schema `config.layout.arrow_schema()`) for k rows of one file.

    Args:
      f: the source file (with its header `info`).
      starts: int64 [k] window start offsets.
      channels: int64 [k] channel of each row (0 unless ``--channel_mode split``).
      signal: [k, win_len] samples in the run's signal dtype.
      config: the read stage's configuration.
    """
    chunk = {"f": f, "starts": starts, "channels": channels, "signal": signal}
    return rows_to_batch_many([chunk], config=config)


def rows_to_batch_many(chunks: Sequence[Mapping], *, config: ReadWindowsConfig) -> pa.RecordBatch:
    """One raw RecordBatch of the rows of several chunks, in order, features computed once.

    Args:
      chunks: keyword arguments of `rows_to_batch` (``f``, ``starts``, ``channels``,
        ``signal``), all at one output rate; a chunk of an annotated file only alone.
      config: the read stage's configuration.

    Raises:
      FeatureRangeError: a chunk's feature exceeds ``--feature_dtype float16`` (naming its file).
    """
    files = [c["f"] for c in chunks]
    counts = [len(c["starts"]) for c in chunks]
    rate = output_rate(files[0].info, config)
    if len(chunks) > 1 and (
        any(f.annotation is not None for f in files)
        or any(output_rate(f.info, config) != rate for f in files)
    ):
        raise ValueError("only chunks at one output rate and without annotations share a batch")

    def joined(key: str) -> np.ndarray:
        return chunks[0][key] if len(chunks) == 1 else np.concatenate([c[key] for c in chunks])

    def per_row(values: list, dtype: Any) -> np.ndarray:
        return np.repeat(np.array(values, dtype=dtype), counts)

    k = sum(counts)
    signal = joined("signal")
    columns = {
        fmt.CLASS_KEY: list_column(
            per_row([f.label.encode() for f in files], object), 1, pa.binary()
        ),
        fmt.FILEPATH_KEY: list_column(
            per_row([f.path.encode() for f in files], object), 1, pa.binary()
        ),
        fmt.INDEX_KEY: list_column(per_row([f.index for f in files], np.int64), 1, pa.int64()),
        fmt.WIN_START_KEY: list_column(joined("starts").astype(np.int64), 1, pa.int64()),
        fmt.SAMPLE_RATE_KEY: list_column(np.full(k, rate, np.int64), 1, pa.int64()),
        fmt.CHANNEL_KEY: list_column(joined("channels").astype(np.int64), 1, pa.int64()),
        fmt.SIGNAL_KEY: bytes_rows(signal),
    }
    if config.features.names:
        scales = per_row([f.info.full_scale for f in files], np.float32)[:, None]
        waveforms = signal.astype(np.float32) / scales
        computed = feats.compute_features(waveforms, sample_rate=rate, config=config.features)
        if config.layout.feature_dtype == "float16":
            offset = 0
            for f, n in zip(files, counts, strict=True):
                part = {name: computed[name][offset : offset + n] for name in computed}
                _check_float16(part, config.layout.feature_shapes, path=f.path)
                offset += n
        for name, shape in config.layout.feature_shapes.items():
            columns[name] = list_column(
                computed[name].reshape(-1), int(np.prod(shape)), pa.float32()
            )
    f = files[0]
    if f.annotation is not None:  # --annotations: per-row class, labels, events (one file)
        for name, (values, per_row_values, kind) in annotation_columns(
            f.annotation, chunks[0]["starts"], chunks[0]["channels"]
        ).items():
            columns[name] = list_column(values, per_row_values, kind)
    schema = config.layout.arrow_schema()
    return pa.RecordBatch.from_arrays([columns[n] for n in schema.names], schema=schema)
