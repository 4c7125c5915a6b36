"""The WAV/RIFF decoder's contract as one function of a byte string (the fuzz target).

`check_wav` runs `transforms.audio.wav`'s three entry points (`read_info`, `decode`, `read_blocks`)
on an input and asserts what guarantee 1 (docs/guarantees.md) promises: decoded samples
consistent across the three and with libsndfile's decoding where `transforms.audio.pcm` reads
plain PCM (unless libsndfile refuses the file after our walk accepted it: it sniffs the samples
for other codecs' signatures), or `WavDecodeError` with a reason; any other exception propagates
(a finding). Used by `fuzz/fuzz_wav.py` (atheris, coverage-guided) and replayed over the saved
corpus by `tests/reliability/test_fuzz_corpus.py`. Imports neither atheris nor TensorFlow.
"""

from __future__ import annotations

import io

import numpy as np

from transforms.audio import wav

PLAIN = ("PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE")
BLOCK_FRAMES = 97  # odd, so block boundaries fall inside codec blocks and chunk pads


def check_wav(data: bytes) -> str:
    """Decodes `data` every way; returns "decoded" or the rejection reason's first words.

    Raises:
      AssertionError: the three entry points disagree, or a rejection has no reason.
      Any exception other than `wav.WavDecodeError`: a decoder bug.
    """
    try:
        libsndfile = wav._decode(io.BytesIO(data), path="fuzz.wav", plain=False)
    except wav.WavDecodeError as e:
        libsndfile = e.reason
    try:
        info = wav.read_info(io.BytesIO(data), path="fuzz.wav")
        got, samples = wav.decode(io.BytesIO(data), path="fuzz.wav")
        reader = wav.read_blocks(io.BytesIO(data), path="fuzz.wav", block_frames=BLOCK_FRAMES)
        blocks = [block for _, block in reader]
    except wav.WavDecodeError as e:
        assert e.reason and str(e) == f"fuzz.wav: {e.reason}", repr(e)
        assert libsndfile == e.reason, (libsndfile, e.reason)  # plain PCM: the same rejection
        return e.reason.split(" (")[0].split(":")[0]
    assert samples.shape == (got.num_frames, got.num_channels), (samples.shape, got)
    assert str(samples.dtype) == got.signal_dtype == info.signal_dtype, (samples.dtype, info)
    assert got.num_frames <= info.num_frames, (got, info)
    joined = np.concatenate(blocks) if blocks else samples[:0]
    assert joined.shape == samples.shape, (joined.shape, samples.shape)
    assert np.array_equal(joined, samples, equal_nan=samples.dtype.kind == "f")
    if isinstance(libsndfile, str):  # its own refusals of plain PCM it sniffs as another codec
        assert libsndfile.startswith(wav.LIBSNDFILE_REFUSES) and got.subtype in PLAIN, libsndfile
    else:
        assert libsndfile[0] == got and libsndfile[1].tobytes() == samples.tobytes()  # bit for bit
    return "decoded"
