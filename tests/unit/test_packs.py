"""transforms.record.packs and file_rows.rows_to_batch_many: short files' chunks in one job.

The packing rule on literal item streams (what shares a job, what passes through in order), and
the promise that makes packing safe: a pack's RecordBatch is the concatenation of its chunks'
own batches, byte for byte (features of a row depend on that row alone), on real WAV files of
two sample formats (full scales).
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pyarrow as pa
import pytest

from pipelines.config import RecordConfig
from pipelines.plan import one_task, plan_record
from tests.support import wavgen
from transforms.audio import wav
from transforms.record.file_rows import (
    FeatureRangeError,
    file_rows,
    rows_to_batch,
    rows_to_batch_many,
)
from transforms.record.packs import PackedChunk, packs


def _chunk(name: str, rows: int, key: object = 16000) -> dict:
    return {"name": name, "starts": list(range(rows)), "key": key}


def _run(items, *, max_rows=4):
    """Packs `items`; returns (the jobs' chunk names, the items with chunks shown by name)."""
    jobs: list[list[str]] = []

    def submit(chunks):
        jobs.append([c["name"] for c in chunks])
        done: Future = Future()
        done.set_result([c["name"] if c["name"] != "bad" else ValueError("bad") for c in chunks])
        return done

    out = []
    for group in packs(items, submit=submit, max_rows=lambda c: max_rows, key=lambda c: c["key"]):
        shown = []
        for segment, x in group:
            if isinstance(x, PackedChunk):
                try:
                    x = x.result()
                except ValueError as e:
                    x = f"raised {e}"
            shown.append((segment, x))
        out.append(shown)
    return jobs, out


def test_short_chunks_share_a_job_up_to_max_rows_and_keep_their_order():
    items = [(0, _chunk("a", 1)), (0, None), (1, _chunk("b", 2)), (1, None)]
    items += [(2, _chunk("c", 1)), (2, None), (3, _chunk("d", 1)), (3, None)]
    jobs, out = _run(items)
    assert jobs == [["a", "b", "c"], ["d"]]  # a + b + c = 4 rows: full
    assert out == [  # a full pack is submitted at once; what follows passes on in order
        [(0, "a"), (0, None), (1, "b"), (1, None), (2, "c")],
        [(2, None)],
        [(3, "d"), (3, None)],
    ]


def test_a_full_chunk_is_a_job_of_its_own_and_errors_pass_in_order():
    items = [(0, _chunk("a", 1)), (0, None), (1, _chunk("long1", 4)), (1, _chunk("long2", 3))]
    items += [(1, None), (2, RuntimeError("unreadable")), (3, _chunk("bad", 1)), (3, None)]
    jobs, out = _run(items)
    assert jobs == [["a"], ["long1"], ["long2", "bad"]]
    flat = [(s, x if not isinstance(x, Exception) else f"error {x}") for g in out for s, x in g]
    assert flat == [
        (0, "a"),
        (0, None),
        (1, "long1"),
        (1, "long2"),
        (1, None),
        (2, "error unreadable"),  # a failed segment's item, not a chunk: passed through
        (3, "raised bad"),  # one chunk's exception is that chunk's alone
        (3, None),
    ]


def test_chunks_of_another_rate_or_annotated_are_not_packed_together():
    items = [(0, _chunk("a", 1, key=16000)), (0, None), (1, _chunk("b", 1, key=8000)), (1, None)]
    items += [(2, _chunk("c", 1, key=None)), (2, None), (3, _chunk("d", 1)), (3, None)]
    jobs, _ = _run(items)
    assert jobs == [["a"], ["b"], ["c"], ["d"]]


def test_segment_ends_without_a_pending_chunk_pass_at_once():
    jobs, out = _run([(0, None), (1, RuntimeError("x")), (2, _chunk("a", 1)), (2, None)])
    assert jobs == [["a"]] and [len(g) for g in out] == [1, 1, 2]


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Five short files of two sample formats (16- and 24-bit: other full scales), decoded."""
    d = tmp_path_factory.mktemp("clips")
    for i in range(5):
        subtype = "PCM_24" if i % 2 else "PCM_16"
        samples = wavgen.synth(3000 + 700 * i, seed=i)
        wavgen.write_wav(d / f"c{i}_x.wav", samples, sample_rate=8000, subtype=subtype)
    config = RecordConfig(
        input_pattern=str(d / "*.wav"),
        output_dir=str(d / "out"),
        win_len=1000,
        features="log_mel,mfcc,spectrogram",
        frame_length=256,
        frame_step=128,
        fft_length=256,
    )
    plan = one_task(plan_record(config))
    chunks = []
    for seg in plan.tasks[0].segments:
        with open(seg.file.path, "rb") as fh:
            for starts, channels, signal in file_rows(
                fh, path=seg.file.path, info=seg.file.info, config=plan.read
            ):
                chunks.append(
                    {"f": seg.file, "starts": starts, "channels": channels, "signal": signal}
                )
    return plan.read, chunks


def test_a_packs_batch_is_its_chunks_batches_joined_byte_for_byte(clips):
    config, chunks = clips
    assert len({c["f"].info.full_scale for c in chunks}) == 2 and len(chunks) == 5
    packed = rows_to_batch_many(chunks, config=config)
    alone = [rows_to_batch(**c, config=config) for c in chunks]
    joined = pa.Table.from_batches(alone).combine_chunks().to_batches()[0]
    assert packed.num_rows == sum(len(c["starts"]) for c in chunks) == joined.num_rows
    assert packed.equals(joined)
    for name in ("log_mel", "mfcc", "spectrogram"):  # float bits, not only values
        a = packed.column(name).flatten().to_numpy().view(np.uint32)
        b = joined.column(name).flatten().to_numpy().view(np.uint32)
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_a_float16_overflow_in_a_pack_names_its_file(clips):
    import dataclasses

    config, chunks = clips
    narrow = dataclasses.replace(
        config, layout=dataclasses.replace(config.layout, feature_dtype="float16")
    )
    f = chunks[2]["f"]  # a file whose samples are read at full scale 1: far beyond float16
    loud = dict(chunks[2], f=dataclasses.replace(f, info=dataclasses.replace(f.info, full_scale=1)))
    assert issubclass(FeatureRangeError, wav.WavDecodeError)  # a per-file error, as decoding's
    with pytest.raises(FeatureRangeError, match="spectrogram: .* beyond float16") as e:
        rows_to_batch_many([chunks[0], loud, chunks[4]], config=narrow)
    assert e.value.path == loud["f"].path
