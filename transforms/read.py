"""Read stage: one input file -> Arrow RecordBatches of its windows (+ features), or an error.

Each file is decoded in blocks (bounded memory), cut into windows, converted to the run's signal
dtype, and its features are computed once per chunk of windows (vectorised, never per window).
A file either yields all its windows plus a ``files`` summary, or no window and an ``errors``
entry with a specific reason: nothing vanishes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa

from replay import format as fmt
from transforms import features as feats
from transforms import wav
from transforms.preprocessing import RecordLayout
from transforms.progress import ProgressFile
from transforms.windows import WindowConfig, frame_blocks

CHANNEL_MODES = ("first", "mean", "split")
SIGNAL_DTYPES = ("auto", "int16", "int32", "float32")
FILES_TAG = "files"
ERRORS_TAG = "errors"

_CHUNK_BYTES = 8 << 20  # 8 MiB of int/float samples per RecordBatch (a chunk of windows)
_MAX_CHUNK_WINDOWS = 1024
_DTYPE_ORDER = ("int16", "int32", "float32")  # "auto" takes the widest dtype any file needs


@dataclasses.dataclass(frozen=True)
class InputFile:
    """One matched input file. `label_error` is set when no label could be derived."""

    index: int
    path: str
    size_bytes: int
    label: str | None = None
    label_error: str | None = None
    split: str = "all"


@dataclasses.dataclass(frozen=True)
class ReadConfig:
    """Everything the read stage needs (picklable, shipped to workers)."""

    window: WindowConfig
    layout: RecordLayout
    features: feats.FeatureConfig
    channel_mode: str = "first"
    sample_rate: int | None = None  # resample every file to this rate (scipy resample_poly)
    strict: bool = False


def widest_dtype(dtypes: Iterable[str]) -> str:
    """The signal dtype that holds every file's samples exactly (int16 when there are none)."""
    return max(dtypes, key=_DTYPE_ORDER.index, default="int16")


def file_signal_dtype(f: InputFile) -> Iterator[str]:
    """Header-only look at a file: the dtype its samples need (nothing if unreadable)."""
    try:
        with beam.io.filesystems.FileSystems.open(f.path, compression_type="uncompressed") as fh:
            yield wav.read_info(fh, path=f.path).signal_dtype
    except Exception:  # noqa: BLE001 - the read stage reports this file's error
        return


def convert_dtype(samples: np.ndarray, *, target: str, info: wav.WavInfo, path: str) -> np.ndarray:
    """Converts samples to the run's signal dtype without changing any value.

    Raises:
      wav.WavDecodeError: when the values do not fit `target` (e.g. 24-bit PCM into int16).
    """
    if samples.dtype == np.dtype(target):
        return samples
    if _DTYPE_ORDER.index(info.signal_dtype) > _DTYPE_ORDER.index(target):
        raise wav.WavDecodeError(
            path,
            f"{info.subtype} samples ({info.signal_dtype}) do not fit --signal_dtype {target}",
        )
    return samples.astype(target)


def _mix(windows: np.ndarray, mode: str) -> list[tuple[int | None, np.ndarray]]:
    """[k, win, channels] -> [(channel or None, [k, win])] per channel mode."""
    if mode == "split":
        return [(c, windows[:, :, c]) for c in range(windows.shape[2])]
    if mode == "mean" and windows.shape[2] > 1:
        mean = windows.mean(axis=2, dtype=np.float64)
        if np.issubdtype(windows.dtype, np.integer):
            mean = np.rint(mean)
        return [(None, mean.astype(windows.dtype))]
    return [(None, windows[:, :, 0])]


def _list_column(values: np.ndarray, per_row: int, value_type: pa.DataType) -> pa.ListArray:
    rows = len(values) // per_row if per_row else 0
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * per_row, pa.int32())
    return pa.ListArray.from_arrays(offsets, pa.array(values, value_type))


def _bytes_rows(rows: np.ndarray) -> pa.ListArray:
    """[k, n] array -> list<binary> column, one little-endian bytes value per row (zero-copy)."""
    k = rows.shape[0]
    data = np.ascontiguousarray(rows.astype(rows.dtype.newbyteorder("<"), copy=False))
    width = data.itemsize * (data.shape[1] if data.ndim > 1 else 1)
    offsets = pa.py_buffer(np.arange(k + 1, dtype=np.int32) * width)
    values = pa.Array.from_buffers(pa.binary(), k, [None, offsets, pa.py_buffer(data)])
    return pa.ListArray.from_arrays(pa.array(np.arange(k + 1, dtype=np.int32)), values)


def windows_to_batch(
    *,
    f: InputFile,
    starts: np.ndarray,
    signal: np.ndarray,
    channel: int | None,
    sample_rate: int,
    full_scale: float,
    config: ReadConfig,
) -> pa.RecordBatch:
    """One RecordBatch (schema `config.layout.arrow_schema()`) for k windows of one channel.

    Args:
      f: the source file.
      starts: int64 [k] window start offsets.
      signal: [k, win_len] samples in the run's signal dtype.
      channel: channel number (``--channel_mode split``) or None.
      sample_rate: the windows' sample rate.
      full_scale: divisor mapping samples to [-1, 1) for features.
      config: the read configuration.
    """
    k = len(starts)
    ones = lambda v: np.full(k, v, dtype=np.int64)  # noqa: E731
    columns = {
        fmt.CLASS_KEY: _list_column(np.full(k, f.label.encode(), dtype=object), 1, pa.binary()),
        fmt.FILEPATH_KEY: _list_column(np.full(k, f.path.encode(), dtype=object), 1, pa.binary()),
        fmt.INDEX_KEY: _list_column(ones(f.index), 1, pa.int64()),
        fmt.WIN_START_KEY: _list_column(starts.astype(np.int64), 1, pa.int64()),
        fmt.SAMPLE_RATE_KEY: _list_column(ones(sample_rate), 1, pa.int64()),
        fmt.CHANNEL_KEY: _list_column(ones(channel or 0), 1, pa.int64()),
        fmt.SIGNAL_KEY: _bytes_rows(signal),
    }
    if config.features.names:
        waveforms = signal.astype(np.float32) / np.float32(full_scale)
        computed = feats.compute_features(
            waveforms, sample_rate=sample_rate, config=config.features
        )
        for name, shape in config.layout.feature_shapes.items():
            columns[name] = _list_column(
                computed[name].reshape(-1), int(np.prod(shape)), pa.float32()
            )
    schema = config.layout.arrow_schema()
    return pa.RecordBatch.from_arrays([columns[n] for n in schema.names], schema=schema)


class ReadWindowsFn(beam.DoFn):
    """InputFile -> RecordBatches of its windows; tagged ``files`` summary or ``errors`` entry."""

    def __init__(self, config: ReadConfig, *, output_dir: str | None = None):
        self._config = config
        self._files = beam.metrics.Metrics.counter("record", "files_read")
        self._failed = beam.metrics.Metrics.counter("record", "files_failed")
        self._windows = beam.metrics.Metrics.counter("record", "windows")
        self._audio_frames = beam.metrics.Metrics.counter("record", "audio_frames")
        self._progress = ProgressFile(output_dir) if output_dir else None

    def _report(self, *, failed: bool, windows: int) -> None:
        """Counts a finished file in this worker's progress file (see transforms.progress)."""
        if self._progress is not None:
            self._progress.add(files=0 if failed else 1, failed=int(failed), windows=windows)

    def finish_bundle(self) -> None:
        if self._progress is not None:
            self._progress.flush()

    def process(self, f: InputFile, signal_dtype: str) -> Iterator:
        count = 0
        try:
            if f.label_error:
                raise wav.WavDecodeError(f.path, f.label_error)
            with beam.io.filesystems.FileSystems.open(
                f.path, compression_type="uncompressed"
            ) as fh:
                info = wav.read_info(fh, path=f.path)
                for batch in self._batches(fh, f, info, signal_dtype):
                    count += batch.num_rows
                    yield batch
        except Exception as e:  # noqa: BLE001 - any bad file becomes an error entry
            if self._config.strict or count:
                # Windows of this file are already out: fail the bundle so the runner retries it
                # (its outputs are discarded) rather than keep part of a file.
                raise
            reason = e.reason if isinstance(e, wav.WavDecodeError) else f"{type(e).__name__}: {e}"
            logging.getLogger("audiorecords").warning("skipping %s: %s", f.path, reason)
            self._failed.inc()
            self._report(failed=True, windows=0)
            yield beam.pvalue.TaggedOutput(ERRORS_TAG, {"path": f.path, "reason": reason})
            return
        self._files.inc()
        self._windows.inc(count)
        self._audio_frames.inc(info.num_frames)
        self._report(failed=False, windows=count)
        yield beam.pvalue.TaggedOutput(
            FILES_TAG,
            {
                "path": f.path,
                "index": f.index,
                "label": f.label,
                "split": f.split,
                "num_windows": count,
                "sample_rate": self._config.sample_rate or info.sample_rate,
                "num_frames": info.num_frames,
                "num_channels": info.num_channels,
                "subtype": info.subtype,
                "full_scale": info.full_scale,
            },
        )

    def _batches(
        self, fh, f: InputFile, info: wav.WavInfo, signal_dtype: str
    ) -> Iterator[pa.RecordBatch]:
        cfg = self._config
        rate = info.sample_rate
        frame_bytes = cfg.window.win_len * max(info.num_channels, 1) * 4
        per_chunk = int(min(_MAX_CHUNK_WINDOWS, max(1, _CHUNK_BYTES // frame_bytes)))
        if cfg.sample_rate and cfg.sample_rate != rate:
            samples = wav.decode(fh, path=f.path)[1]
            blocks = [_resample(samples, rate, cfg.sample_rate, full_scale=info.full_scale)]
            rate = cfg.sample_rate
        else:
            block_frames = max(per_chunk * cfg.window.hop, cfg.window.win_len)
            blocks = (
                b for _, b in wav.read_blocks(fh, path=f.path, block_frames=block_frames, info=info)
            )
        for starts, windows in frame_blocks(blocks, cfg.window, max_windows_per_chunk=per_chunk):
            windows = convert_dtype(windows, target=signal_dtype, info=info, path=f.path)
            for channel, signal in _mix(windows, cfg.channel_mode):
                yield windows_to_batch(
                    f=f,
                    starts=starts,
                    signal=signal,
                    channel=channel,
                    sample_rate=rate,
                    full_scale=info.full_scale,
                    config=cfg,
                )


def _resample(samples: np.ndarray, rate: int, target: int, *, full_scale: float) -> np.ndarray:
    """Resamples [frames, channels] to `target` Hz with scipy.signal.resample_poly.

    Integer samples are rounded and clipped to the source format's range (e.g. 24-bit stays
    within [-2**23, 2**23)); the dtype is kept.
    """
    from math import gcd

    from scipy.signal import resample_poly

    g = gcd(rate, target)
    out = resample_poly(samples.astype(np.float64), target // g, rate // g, axis=0)
    if np.issubdtype(samples.dtype, np.integer):
        out = np.clip(np.rint(out), -full_scale, full_scale - 1)
    return out.astype(samples.dtype)
