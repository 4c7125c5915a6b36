"""One decoded file -> rows (`transforms.stages.file_rows`), on a real stereo WAV file written
here: the windows of each channel mode in (window, channel) order, equal to the file's samples
as soundfile reads them, framed with numpy; a segment's rows whatever the chunks; the row count
planning predicts from the header alone, resampled too; the float16 range check."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from pipelines.config import RecordConfig
from pipelines.plan import one_task, plan_record
from tests.support import wavgen
from transforms.stages import file_rows as fr

RATE = 8000
WIN = 1000
FRAMES = 10 * WIN + 500  # 10 windows and a partial one (dropped: no --pad)


@pytest.fixture(scope="module")
def stereo(tmp_path_factory):
    """(directory, samples [frames, 2] int16 as soundfile reads them) of one stereo file."""
    d = tmp_path_factory.mktemp("stereo")
    path = d / "s_x.wav"
    wavgen.write_wav(
        path, wavgen.synth(FRAMES, num_channels=2, seed=3), sample_rate=RATE, subtype="PCM_16"
    )
    samples, _ = sf.read(str(path), dtype="int16", always_2d=True)
    return d, samples


def _rows(directory, **options):
    """(the file's rows as (starts, channels, signal) joined, the chunks' count, the planned row
    count), read as the read stage reads the one file of `directory`."""
    config = RecordConfig(
        input_pattern=str(directory / "*.wav"),
        output_dir=str(directory / "out"),
        win_len=WIN,
        **options,
    )
    plan = one_task(plan_record(config))
    f = plan.tasks[0].segments[0].file
    with open(f.path, "rb") as fh:
        chunks = list(fr.file_rows(fh, path=f.path, info=f.info, config=plan.read))
    joined = tuple(np.concatenate([c[i] for c in chunks]) for i in range(3))
    return joined, len(chunks), fr.planned_rows(f.info, plan.read), (f, plan.read)


def _windows(samples: np.ndarray, win: int = WIN) -> np.ndarray:
    """[k, win, channels]: the file's whole windows, hop = win."""
    k = len(samples) // win
    return samples[: k * win].reshape(k, win, samples.shape[1])


def test_each_channel_mode_gives_the_files_windows_in_window_channel_order(stereo):
    d, samples = stereo
    windows = _windows(samples)
    starts = np.arange(10, dtype=np.int64) * WIN
    (s, c, signal), _, planned, _ = _rows(d)  # --channel_mode first (the default)
    assert signal.dtype == np.int16 and len(signal) == planned == 10
    np.testing.assert_array_equal(signal, windows[:, :, 0])
    np.testing.assert_array_equal(s, starts)
    assert not c.any()
    (s, c, signal), _, planned, _ = _rows(d, channel_mode="mean")
    mean = np.rint(windows.astype(np.float64).mean(axis=2)).astype(np.int16)
    np.testing.assert_array_equal(signal, mean)
    assert len(signal) == planned == 10 and not c.any()
    (s, c, signal), _, planned, _ = _rows(d, channel_mode="split")
    assert len(signal) == planned == 20
    np.testing.assert_array_equal(signal, windows.transpose(0, 2, 1).reshape(20, WIN))
    np.testing.assert_array_equal(s, np.repeat(starts, 2))
    np.testing.assert_array_equal(c, np.tile([0, 1], 10))


def test_a_segments_rows_are_the_same_whatever_the_chunks(stereo, monkeypatch):
    d, _ = stereo
    (_, _, whole), one, _, (f, config) = _rows(d, channel_mode="split")
    assert one == 1  # 8 MiB of samples a chunk: one chunk here
    monkeypatch.setattr(fr, "_CHUNK_BYTES", 3 * WIN * 2 * 4)  # 3 windows of 2 channels a chunk
    assert fr.chunk_rows(f.info, config) == 3
    (_, _, chunked), many, _, _ = _rows(d, channel_mode="split")
    assert many == 4 and chunked.tobytes() == whole.tobytes()
    for start, stop in [(0, 1), (3, 13), (5, 6), (7, 20), (19, 20), (4, None)]:
        with open(f.path, "rb") as fh:
            part = list(
                fr.file_rows(
                    fh, path=f.path, info=f.info, config=config, row_start=start, row_stop=stop
                )
            )
        got = np.concatenate([signal for _, _, signal in part])
        np.testing.assert_array_equal(got, whole[start:stop])


def test_resampled_rows_are_as_many_as_planned_from_the_header(stereo):
    d, samples = stereo
    (s, _, signal), _, planned, (f, _) = _rows(d, sample_rate=11025)
    resampled = fr.resample(samples, RATE, 11025, full_scale=f.info.full_scale)
    assert len(resampled) == -(-FRAMES * 441 // 320)  # scipy's ceil(n * up / down)
    assert len(signal) == planned == len(resampled) // WIN
    np.testing.assert_array_equal(signal, _windows(resampled)[:, :, 0])
    np.testing.assert_array_equal(s, np.arange(len(signal)) * WIN)


def test_resampling_integers_rounds_and_clips_to_the_source_range():
    loud = np.array([[-32768], [32767], [-32768], [32767]] * 50, np.int16)
    out = fr.resample(loud, 8000, 16000, full_scale=32768.0)
    assert out.dtype == np.int16 and len(out) == 400
    assert out.min() >= -32768 and out.max() <= 32767
    twenty_four = np.array([[-(2**23)], [2**23 - 1]] * 50, np.int32)
    out = fr.resample(twenty_four, 8000, 12000, full_scale=2.0**23)
    assert out.dtype == np.int32 and out.min() >= -(2**23) and out.max() <= 2**23 - 1


def test_mix_keeps_integers_integral():
    windows = np.array([[[1, 2], [3, 4], [-1, -2]]], np.int16)  # 1 window of 3 frames, 2 channels
    signal, channel = fr.mix(windows, "mean")
    assert signal.dtype == np.int16 and signal.tolist() == [[2, 4, -2]]  # halves to even
    assert fr.mix(windows.astype(np.float32), "mean")[0].tolist() == [[1.5, 3.5, -1.5]]
    assert fr.mix(windows, "first")[0].tolist() == [[1, 3, -1]]
    signal, channel = fr.mix(windows, "split")
    assert signal.tolist() == [[1, 3, -1], [2, 4, -2]] and channel.tolist() == [0, 1]


def test_float16_overflow_names_the_largest_finite_magnitude_float16_cannot_hold():
    assert fr.float16_overflow(np.zeros(0, np.float32)) is None
    assert fr.float16_overflow(np.array([65519.9, -65519.9, np.inf, np.nan], np.float32)) is None
    with np.errstate(over="ignore"):  # where float16 starts rounding to inf
        assert np.isinf(np.float16(np.float32(65520.0)))
        assert np.float16(np.float32(65519.9)) == 65504.0
    assert fr.float16_overflow(np.array([1.0, 65520.0], np.float32)) == 65520.0
    values = np.array([-70000.0, 80000.0, -np.inf, np.nan, 3.0], np.float32)
    assert fr.float16_overflow(values) == 80000.0
