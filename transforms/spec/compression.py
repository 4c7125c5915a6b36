"""The shards' compression: ``--compression`` NONE, GZIP, ZLIB or AUTO (measured on a sample).

Pure: the write stage (`transforms.stages.write_shards`) compresses with `COMPRESSION_LEVEL`, and
the ``ChooseCompression`` stage applies `choose_compression` to a sample of encoded records.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

COMPRESSION_LEVEL = 1  # zlib level 1: level 6's ratio on PCM, much faster (docs/performance.md)
# AUTO compresses (GZIP) only when a sample at least halves: a smaller saving costs more record
# and replay time than it saves (docs/performance.md); PCM and float features rarely do better.
AUTO_MIN_SAVING = 0.5
AUTO_SAMPLE_SIZE = 64  # examples sampled to decide AUTO compression
COMPRESSIONS = ("AUTO", "GZIP", "ZLIB", "NONE")


def choose_compression(requested: str, sample: Sequence[bytes]) -> str:
    """NONE, GZIP or ZLIB. AUTO measures a sample of serialized records.

    Compressing near-incompressible PCM and float features costs CPU at write and at every read
    for little space, so AUTO picks GZIP only when zlib level 1 saves at least half the sample.
    """
    if requested != "AUTO":
        return requested
    raw = b"".join(sample)
    if not raw:
        return "NONE"
    ratio = len(zlib.compress(raw, COMPRESSION_LEVEL)) / len(raw)
    return "GZIP" if ratio <= 1 - AUTO_MIN_SAVING else "NONE"
