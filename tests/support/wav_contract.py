"""The hostile-input contract of transforms.audio.wav, shared by its fuzz tests.

Any byte string given to `read_info`, `decode` and `read_blocks` ends in samples (consistent
between the three) or in a `WavDecodeError` with a reason; `run_contract` runs the three on one
input, asserts that, and returns what the caller bounds (memory, bytes read), since the bounds
differ between containers (libsndfile's FLAC / Ogg / AIFF probes read more than our RIFF parser).
"""

from __future__ import annotations

import dataclasses
import tracemalloc

import numpy as np

from tests.support.counting_io import CountingBytesIO
from transforms.audio import wav


@dataclasses.dataclass(frozen=True)
class ContractRun:
    """What one input did.

    Attributes:
      outcome: "decoded", or the first words of the WavDecodeError reason (for hypothesis events).
      container: the decoded container ("" when the input was refused).
      output_bytes: bytes of the decoded samples (0 when refused).
      peak_bytes: tracemalloc peak during the three calls, above what was allocated before.
      bytes_read: bytes each of the three calls read from its file object.
    """

    outcome: str
    container: str
    output_bytes: int
    peak_bytes: int
    bytes_read: tuple[int, ...]


def run_contract(raw: bytes, *, path: str = "fuzz.wav") -> ContractRun:
    """Runs read_info, decode and read_blocks on `raw` (each on its own file object).

    Asserts: a refusal is a WavDecodeError whose message is ``<path>: <reason>``; decoded samples
    have the decoded shape and dtype, no more frames than `read_info` announced, and
    `read_blocks` yields exactly them. Any other exception propagates (a contract failure).
    Uses tracemalloc: started here (and stopped) unless the caller already traces.
    """
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    files = [CountingBytesIO(raw) for _ in range(3)]
    container, output = "", 0
    try:
        try:
            info = wav.read_info(files[0], path=path)
            got, samples = wav.decode(files[1], path=path)
            blocks = [b for _, b in wav.read_blocks(files[2], path=path, block_frames=97)]
        except wav.WavDecodeError as e:
            assert e.reason and str(e) == f"{path}: {e.reason}"
            outcome = e.reason.split(" (")[0].split(":")[0]
        else:
            outcome, container, output = "decoded", got.container, samples.nbytes
            assert samples.shape == (got.num_frames, got.num_channels)
            assert str(samples.dtype) == got.signal_dtype == info.signal_dtype
            assert got.num_frames <= info.num_frames
            joined = np.concatenate(blocks) if blocks else samples[:0]
            np.testing.assert_array_equal(joined, samples)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if started:
            tracemalloc.stop()
    return ContractRun(outcome, container, output, peak, tuple(f.bytes_read for f in files))
