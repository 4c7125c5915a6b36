"""Plain PCM WAV read by `transforms.audio.pcm` against libsndfile, in one process, same files.

    python benchmarks/decode_bench.py [--clips 3000] [--repeats 5]

Files: `clips_bench`'s one-second 16 kHz 16-bit clips (``clips-2727-10240/clips``, made if
missing) and its 10 long files (``long/*.wav``, ~17 minutes each), plus a 24-bit copy of one long
file (made once under ``work/decode/``). Each measurement opens every file through Beam's
``FileSystems.open``, as the launcher and the read stage do, and runs one of
`transforms.audio.wav`'s entry points with plain PCM read by `transforms.audio.pcm` (``pcm``) or
by libsndfile (``libsndfile``: `wav._decode(..., plain=False)`, the path every other encoding
takes); the two alternate, `--repeats` times, and the median is printed:

- header: `wav.read_info` (planning's header read), microseconds a clip;
- clip: `wav.decode` of a whole clip, microseconds a clip;
- long: `wav.read_blocks` of the long files in the read stage's block size, MB of samples a second.

The ratio column is libsndfile / pcm time (above 1: pcm is faster).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _measure import host_line  # noqa: E402
from clips_bench import clips_corpus  # noqa: E402
from corpus import DEFAULT_DIR  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from apache_beam.io.filesystems import FileSystems  # noqa: E402

from transforms.audio import wav  # noqa: E402

BLOCK_FRAMES = 1024 * 16000  # the read stage's block for 16,000-sample windows


def _open(path: str):
    return FileSystems.open(path, compression_type="uncompressed")


def header(paths: list[str], *, plain: bool) -> float:
    start = time.perf_counter()
    for p in paths:
        with _open(p) as f:
            wav._Opened(f, path=p, plain=plain).close()
    return time.perf_counter() - start


def clip(paths: list[str], *, plain: bool) -> float:
    start = time.perf_counter()
    for p in paths:
        with _open(p) as f:
            wav._decode(f, path=p, plain=plain)
    return time.perf_counter() - start


def long(paths: list[str], *, plain: bool) -> float:
    start = time.perf_counter()
    for p in paths:
        with _open(p) as f, wav._Opened(f, path=p, plain=plain) as opened:
            while len(opened.read(BLOCK_FRAMES)):
                pass
    return time.perf_counter() - start


def pcm24_copy(source: str, out: Path) -> str:
    """A 24-bit copy of `source` (made once)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "long24.wav"
    if not path.exists():
        samples, rate = sf.read(source, dtype="int16")
        sf.write(path, samples.astype(np.int32) << 16, rate, subtype="PCM_24")
    return str(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=int, default=3000, help="clips timed (of 10,240)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    base = clips_corpus(10240)
    clips = sorted(str(p) for p in (base / "clips").glob("*/*.wav"))[: args.clips]
    longs = sorted(str(p) for p in (base / "long").glob("*.wav"))
    long24 = [pcm24_copy(longs[0], Path(DEFAULT_DIR) / "work" / "decode")]
    mb16 = sum(os.path.getsize(p) for p in longs) / 1e6
    mb24 = os.path.getsize(long24[0]) / 1e6
    print(host_line())
    rows = [
        ("header (us a clip)", header, clips, 1e6 / len(clips)),
        ("clip decode (us a clip)", clip, clips, 1e6 / len(clips)),
        (f"long 16-bit (s for {mb16:.0f} MB)", long, longs, 1.0),
        (f"long 24-bit (s for {mb24:.0f} MB)", long, long24, 1.0),
    ]
    print("| measurement | pcm | libsndfile | libsndfile / pcm |")
    print("| --- | ---: | ---: | ---: |")
    for name, fn, paths, scale in rows:
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeats):
            for plain in (True, False):
                times[plain].append(fn(paths, plain=plain) * scale)
        ours, theirs = statistics.median(times[True]), statistics.median(times[False])
        print(f"| {name} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f}x |")
    print(host_line())


if __name__ == "__main__":
    main()
