"""AUTO compression: GZIP only for data that halves; explicit choices pass through."""

import numpy as np

from transforms.spec.compression import choose_compression


def test_auto_compresses_only_data_that_halves():
    rng = np.random.default_rng(0)
    noise16 = rng.integers(-(2**15), 2**15, 50_000, dtype=np.int64).astype("<i2").tobytes()
    as_int32 = np.frombuffer(noise16, "<i2").astype("<i4").tobytes()  # 16-bit held as int32
    silence = bytes(100_000)
    assert choose_compression("AUTO", [noise16]) == "NONE"
    assert choose_compression("AUTO", [as_int32]) == "NONE"  # saves ~40%: not worth GZIP
    assert choose_compression("AUTO", [silence]) == "GZIP"
    assert choose_compression("AUTO", []) == "NONE"
    assert choose_compression("ZLIB", [noise16]) == "ZLIB"
