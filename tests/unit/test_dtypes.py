"""`transforms.audio.dtypes.resolve` over many files: decided on the distinct headers, the same
dtype and the same refusal line (files named in order, counted) as file by file."""

from __future__ import annotations

import pytest

from transforms.audio import dtypes, wav

INT16 = wav.WavInfo(16000, 1, 16000, "PCM_16", "int16", 2.0**15)
INT32 = wav.WavInfo(16000, 1, 16000, "PCM_32", "int32", 2.0**31)
FLOAT = wav.WavInfo(16000, 1, 16000, "FLOAT", "float32", 1.0)
WIDE = wav.WavInfo(8000, 1, 10, "PCM_64", "int64", 2.0**63)  # not a real encoding: fits none


def _by_file(requested: str, files: list[tuple[str, wav.WavInfo]]) -> str:
    """The rule file by file, as `resolve` words it (the reference)."""
    works = [d for d in dtypes.STORED_DTYPES if all(dtypes.holds(d, i) for _, i in files)]
    if requested == "auto":
        if works:
            return works[0]
        widest = max(dtypes.STORED_DTYPES, key=lambda d: sum(dtypes.holds(d, i) for _, i in files))
        lost = [(p, i) for p, i in files if not dtypes.holds(widest, i)]
        return (
            f"--signal_dtype auto: no signal dtype holds every file exactly: {dtypes._named(lost)}"
        )
    lost = [(p, i) for p, i in files if not dtypes.holds(requested, i)]
    if not lost:
        return requested
    return f"--signal_dtype {requested} would round the samples of {len(lost)} file(s): " + (
        dtypes._named(lost)
    )


def _copies(info: wav.WavInfo) -> wav.WavInfo:
    """An equal header that is another object (headers read apart, not shared)."""
    return wav.WavInfo(*(getattr(info, name) for name in info.__slots__))


@pytest.mark.parametrize("requested", dtypes.SIGNAL_DTYPES)
@pytest.mark.parametrize(
    "mix",
    [
        (INT16,),
        (INT16, INT32),
        (INT16, FLOAT),
        (INT32, FLOAT),
        (INT16, INT32, FLOAT),
        (INT16, WIDE),
    ],
)
def test_many_files_resolve_as_file_by_file(requested, mix):
    files = [(f"/d/{n:05d}.wav", _copies(mix[n % 7 % len(mix)])) for n in range(2000)]
    want = _by_file(requested, files)
    try:
        got = dtypes.resolve(requested, files)
    except ValueError as e:
        assert str(e).startswith(want) and "\n" not in str(e), (str(e), want)
        assert " more; " in str(e) or len(mix) == 1
    else:
        assert got == want


def test_a_refusal_names_the_first_files_in_order_and_counts_the_rest():
    files = [(f"/d/{n}.wav", INT32 if n in (5, 7, 9, 11) else INT16) for n in range(20)]
    with pytest.raises(ValueError) as e:
        dtypes.resolve("int16", files)
    assert str(e.value) == (
        "--signal_dtype int16 would round the samples of 4 file(s): /d/5.wav (PCM_32 fits int32 "
        "or float64), /d/7.wav (PCM_32 fits int32 or float64), /d/9.wav (PCM_32 fits int32 or "
        "float64) and 1 more; every file fits --signal_dtype int32 or float64 or auto"
    )
