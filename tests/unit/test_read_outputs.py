"""The read stage's small per-row outputs (`transforms.stages.read_outputs`): batches joined for
TFT's analysis up to a row count, and a batch's first row as its key and as the bytes an AUTO
compression sample takes, on the RecordBatches the read stage builds from real WAV files
(`file_rows.rows_to_batch`, with features)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from pipelines.config import RecordConfig
from pipelines.plan import one_task, plan_record
from replay import format as fmt
from tests.support import wavgen
from transforms.stages.file_rows import file_rows, rows_to_batch
from transforms.stages.read_outputs import Batcher, first_key, sample_bytes

WIN = 1000


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    """[(segment, batch)]: two stereo files' rows (split channels, log_mel), a batch a chunk of
    3 windows, and each segment's rows from its second one (a segment that starts mid-file)."""
    d = tmp_path_factory.mktemp("clips")
    for i in range(2):
        samples = wavgen.synth(7 * WIN + 100 * i, num_channels=2, seed=i)
        wavgen.write_wav(d / f"c{i}_x.wav", samples, sample_rate=8000, subtype="PCM_24")
    config = RecordConfig(
        input_pattern=str(d / "*.wav"),
        output_dir=str(d / "out"),
        win_len=WIN,
        channel_mode="split",
        features="log_mel",
        frame_length=256,
        frame_step=128,
        fft_length=256,
    )
    plan = one_task(plan_record(config))
    out = []
    for seg in plan.tasks[0].segments:
        f = seg.file
        with open(f.path, "rb") as fh:
            for starts, channels, signal in file_rows(
                fh, path=f.path, info=f.info, config=plan.read, row_start=1
            ):
                for lo in range(0, len(starts), 6):
                    rows = slice(lo, lo + 6)
                    batch = rows_to_batch(
                        f=f,
                        starts=starts[rows],
                        channels=channels[rows],
                        signal=signal[rows],
                        config=plan.read,
                    )
                    out.append((seg, batch))
    return out


def test_first_key_and_sample_bytes_are_the_first_rows(batches):
    seg, batch = batches[0]
    assert first_key(batch, seg) == [seg.file.index, 0, 1]  # row 1: window 0, channel 1
    seg, batch = batches[1]
    assert first_key(batch, seg) == [seg.file.index, 3 * WIN, 1]
    row = batch.slice(0, 1).to_pydict()
    signal = row[fmt.SIGNAL_KEY][0][0]
    assert len(signal) == WIN * 4  # 24-bit samples in int32
    log_mel = np.asarray(row["log_mel"][0], np.float32)
    assert sample_bytes(batch) == signal + log_mel.tobytes()
    other = [sample_bytes(b) for _, b in batches]
    assert len(set(other)) == len(other)  # every batch's first row its own


def test_a_batch_without_a_channel_column_is_channel_0(batches):
    seg, batch = batches[1]
    unsplit = batch.drop_columns([fmt.CHANNEL_KEY])
    assert first_key(unsplit, seg) == [seg.file.index, 3 * WIN, 0]


def test_batcher_joins_batches_up_to_min_rows_in_order(batches):
    every = [b for _, b in batches]
    assert [b.num_rows for b in every] == [6, 6, 1, 6, 6, 1]
    batcher = Batcher(min_rows=7)
    out = [joined for b in every for joined in batcher.add(b)]
    out += list(batcher.flush())
    assert [b.num_rows for b in out] == [12, 7, 7]
    assert list(batcher.flush()) == []  # nothing pending: nothing
    joined = pa.Table.from_batches(out).combine_chunks()
    assert joined.equals(pa.Table.from_batches(every).combine_chunks())
    alone = Batcher(min_rows=1)
    assert [b is every[0] for b in alone.add(every[0])] == [True]  # one batch passes as it is
