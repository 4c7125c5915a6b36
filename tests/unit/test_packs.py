"""transforms.stages.packs and file_rows.rows_to_batch_many: short files' chunks in one job.

The packing rule on literal item streams (what shares a job, what passes through in order), and
the promise that makes packing safe: a pack's RecordBatch is the concatenation of its chunks'
own batches, byte for byte (features of a row depend on that row alone), on real WAV files of
two sample formats (full scales). And the key the read stage itself packs by
(`read_windows.ReadTaskFn._pack_key`) on files at two rates: one output rate a pack, every
rate together with ``--sample_rate``, an annotated file's chunk alone. The stage falls back to
chunk-by-chunk computing when a pack is refused, so a wrong key would only be slower there:
here each pack is computed whole, as the key promises it can be.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future

import numpy as np
import pyarrow as pa
import pytest

from pipelines.config import RecordConfig
from pipelines.plan import one_task, plan_record
from tests.support import wavgen
from transforms.audio import wav
from transforms.stages.file_rows import (
    FeatureRangeError,
    file_rows,
    rows_to_batch,
    rows_to_batch_many,
)
from transforms.stages.packs import PackedChunk, packs


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


# --- the read stage's own key: read_windows.ReadTaskFn._pack_key on real files ----------------


def _mixed_rates_fn(directory, **options):
    """The read stage's DoFn (not run: its key and chunks) on six short files at 8 and 16 kHz
    in turn, and the chunks it decodes from them (one task)."""
    from transforms.stages.read_windows import ReadTaskFn

    directory.mkdir()
    for i in range(6):
        rate = (8000, 16000)[i % 2]
        samples = wavgen.synth(1500 + 300 * i, seed=i)
        wavgen.write_wav(directory / f"c{i}_x.wav", samples, sample_rate=rate, subtype="PCM_16")
    config = RecordConfig(
        input_pattern=str(directory / "*.wav"),
        output_dir=str(directory / "out"),
        win_len=1000,
        features="log_mel",
        frame_length=256,
        frame_step=128,
        fft_length=256,
        **options,
    )
    plan = one_task(plan_record(config))
    fn = ReadTaskFn(plan.read, plan.sharding, classes=plan.classes, output_dir=plan.output_dir)
    chunks = [x for _, x in fn._task_chunks(plan.tasks[0]) if isinstance(x, dict)]
    assert len(chunks) == 6
    return fn, plan.read, chunks


def _stage_packs(fn, config, chunks):
    """The chunks packed with the read stage's key, each pack computed as one batch (no
    chunk-by-chunk fallback): the jobs' chunk counts and their batches' sample rates."""
    from transforms.stages.file_rows import chunk_rows

    jobs = []

    def submit(pack):
        batch = rows_to_batch_many(pack, config=config)  # refuses a pack of mixed rates
        rates = batch.column("sample_rate").flatten().to_numpy().tolist()
        jobs.append((len(pack), sorted(set(rates))))
        done: Future = Future()
        done.set_result([None] * len(pack))
        return done

    items = [(i, x) for i, c in enumerate(chunks) for x in (c, None)]
    max_rows = lambda c: chunk_rows(c["f"].info, config)  # noqa: E731 - the stage's own
    for _ in packs(items, submit=submit, max_rows=max_rows, key=fn._pack_key):
        pass
    return jobs


def test_the_read_stage_packs_only_chunks_of_one_output_rate(tmp_path):
    """Without ``--sample_rate`` each file is read at its own rate: 8 and 16 kHz files in turn
    are never packed together (a pack is one feature computation at one rate)."""
    fn, config, chunks = _mixed_rates_fn(tmp_path / "in")
    assert [fn._pack_key(c) for c in chunks] == [c["f"].info.sample_rate for c in chunks]
    assert _stage_packs(fn, config, chunks) == [(1, [c["f"].info.sample_rate]) for c in chunks]


def test_with_sample_rate_the_read_stage_packs_every_rate_together(tmp_path):
    """With ``--sample_rate`` every file comes out at that rate: their chunks share one job."""
    fn, config, chunks = _mixed_rates_fn(tmp_path / "in", sample_rate=16000)
    assert {fn._pack_key(c) for c in chunks} == {16000}
    assert _stage_packs(fn, config, chunks) == [(6, [16000])]


def test_the_read_stage_never_packs_an_annotated_files_chunk(tmp_path):
    from transforms.spec.types import FileAnnotation

    fn, _, chunks = _mixed_rates_fn(tmp_path / "in", sample_rate=16000)
    f = chunks[1]["f"]
    annotation = FileAnnotation(
        starts=np.zeros(1, np.int64),
        channels=1,
        classes=("a",),
        labels=np.zeros((1, 1), np.float32),
        events=np.zeros((1, 1, 3), np.int64),
        num_events=np.ones(1, np.int64),
    )
    annotated = dict(chunks[1], f=dataclasses.replace(f, annotation=annotation))
    assert fn._pack_key(annotated) is None and fn._pack_key(chunks[0]) == 16000
