"""The run's ``signal`` dtype: which stored dtype holds which file exactly, and what `auto` picks.

A file holds integer samples of some bits (8/16-bit PCM, G.711, ADPCM, GSM: at most 16; 24-bit
PCM: 24; 32-bit PCM: 32) or float samples (float32, float64; lossy codecs decode to float32).
A stored dtype holds a file exactly when every possible sample survives the cast unchanged:

=========  =============================  ===============================================
dtype      holds integers of              holds floats of
=========  =============================  ===============================================
int16      up to 16 bits                  none
int32      up to 32 bits                  none
float32    up to 24 bits (its mantissa)   float32
float64    up to 53 bits                  float32, float64
=========  =============================  ===============================================

``auto`` takes the first of int16, int32, float32, float64 that holds every file: 16-bit only ->
int16; up to 32-bit integers -> int32; floats with integers up to 24 bits -> float32; 32-bit
integers next to floats, or any float64 file -> float64. It is decided from the headers, at
planning, so a run never rounds a sample. An explicit ``--signal_dtype`` that cannot hold some
file exactly stops the run before any work, naming the files and the dtypes that would hold them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from transforms.audio import wav

SIGNAL_DTYPES = ("auto", "int16", "int32", "float32", "float64")
STORED_DTYPES = SIGNAL_DTYPES[1:]  # auto takes the first that holds every file
_INT_BITS = {"int16": 16, "int32": 32}
_FLOAT_INT_BITS = {"float32": 24, "float64": 53}  # integers of up to this many bits are exact
_FLOAT_BITS = {"float32": 32, "float64": 64}
NAMED_FILES = 3  # files named in a refusal, then "and N more"


def integer_bits(info: wav.WavInfo) -> int:
    """Bits of a file's integer samples: they lie in [-full_scale, full_scale)."""
    return int(info.full_scale).bit_length()


def holds(dtype: str, info: wav.WavInfo) -> bool:
    """Whether `dtype` stores every sample of a file with this header exactly."""
    native = info.signal_dtype
    if native in _FLOAT_BITS:
        return _FLOAT_BITS.get(dtype, 0) >= _FLOAT_BITS[native]
    bits = _INT_BITS.get(dtype) or _FLOAT_INT_BITS.get(dtype, 0)
    return integer_bits(info) <= bits


def holding(info: wav.WavInfo) -> tuple[str, ...]:
    """Every stored dtype that holds the file exactly, narrowest first."""
    return tuple(d for d in STORED_DTYPES if holds(d, info))


def _named(files: Sequence[tuple[str, wav.WavInfo]]) -> str:
    shown = [
        f"{path} ({info.subtype} fits {' or '.join(holding(info)) or 'none'})"
        for path, info in files
    ]
    more = len(shown) - NAMED_FILES
    return ", ".join(shown[:NAMED_FILES]) + (f" and {more} more" if more > 0 else "")


def resolve(requested: str, files: Collection[tuple[str, wav.WavInfo]]) -> str:
    """The run's signal dtype: `requested`, or auto's choice over the files' headers.

    Decided over the distinct headers (files of one format share one `wav.WavInfo`: planning's
    `scan_headers`); `files` is gone through again, in order, only to name the files refused.

    Args:
      requested: one of SIGNAL_DTYPES.
      files: (path, header) of every usable input file (a collection: iterated again when
        files are refused).

    Returns:
      A stored dtype that holds every file exactly (int16 when there are no files).

    Raises:
      ValueError: one line: no dtype (auto) or not `requested` holds every file; names the files
        (with the dtypes each fits) and the --signal_dtype values that would work.
    """
    if requested not in SIGNAL_DTYPES:
        raise ValueError(f"--signal_dtype must be one of {SIGNAL_DTYPES}, got {requested!r}")
    distinct = set({id(info): info for _, info in files}.values())  # one look-up a file
    works = [d for d in STORED_DTYPES if all(holds(d, info) for info in distinct)]
    if requested == "auto":
        if works:
            return works[0]
        widest = max(STORED_DTYPES, key=lambda d: sum(holds(d, i) for _, i in files))
        lost = [(p, i) for p, i in files if not holds(widest, i)]
        raise ValueError(
            "--signal_dtype auto: no signal dtype holds every file exactly: "
            f"{_named(lost)}; record them in a separate run"
        )
    if requested in works:
        return requested
    lost = [(p, i) for p, i in files if not holds(requested, i)]
    works_for_all = (
        f"every file fits --signal_dtype {' or '.join([*works, 'auto'])}"
        if works
        else "no signal dtype holds every file: split the run"
    )
    raise ValueError(
        f"--signal_dtype {requested} would round the samples of {len(lost)} file(s): "
        f"{_named(lost)}; {works_for_all}"
    )


def convert(samples: np.ndarray, *, target: str, info: wav.WavInfo, path: str) -> np.ndarray:
    """Samples in the run's signal dtype, every value unchanged.

    Raises:
      wav.WavDecodeError: `target` cannot hold the file exactly (planning refuses such runs).
    """
    if samples.dtype == np.dtype(target):
        return samples
    if not holds(target, info):
        raise wav.WavDecodeError(
            path, f"{info.subtype} samples ({info.signal_dtype}) do not fit --signal_dtype {target}"
        )
    return samples.astype(target)
