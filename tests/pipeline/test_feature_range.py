"""--feature_dtype float16: a file whose feature float16 cannot hold is a per-file error.

A loud float WAV (samples far beyond ±1.0, legal in IEEE float WAV) gives spectrogram values
beyond float16's ±65504; the job lists that file in the manifest's ``errors`` with a one-line
reason, drops its windows whole, and records every other file.
"""

from __future__ import annotations

import numpy as np
import soundfile as sf

from tests.support.record_helpers import load_manifest, read_records

RATE = 16000


def _write(path, samples: np.ndarray, subtype: str) -> str:
    sf.write(str(path), samples, RATE, subtype=subtype)
    return str(path)


def test_a_loud_float_file_is_an_error_entry_and_the_others_are_recorded(tmp_path):
    from pipelines import record as record_pipeline

    inputs = tmp_path / "in"
    inputs.mkdir()
    t = np.arange(3 * RATE) / RATE
    tone = np.sin(2 * np.pi * 440 * t)
    quiet_a = _write(inputs / "a_dog.wav", (0.3 * tone * 32767).astype(np.int16), "PCM_16")
    quiet_b = _write(inputs / "b_cat.wav", (0.5 * tone).astype(np.float32), "FLOAT")
    loud = _write(inputs / "c_cat.wav", (1000.0 * tone).astype(np.float32), "FLOAT")
    assert sf.info(loud).subtype == "FLOAT" and np.abs(sf.read(loud)[0]).max() > 999

    out = tmp_path / "out"
    argv = ["--input_pattern", f"{inputs}/*.wav", "--output_dir", str(out)]
    argv += ["--win_len", "16000", "--features", "spectrogram,log_mel", "--feature_dtype"]
    summary = record_pipeline.run([*argv, "float16"])

    manifest = load_manifest(out)
    assert [e["path"] for e in manifest["errors"]] == [loud]
    (reason,) = [e["reason"] for e in manifest["errors"]]
    assert "\n" not in reason
    assert reason.startswith("spectrogram: ") and reason.endswith(
        "is beyond float16's range (±65504); use --feature_dtype float32 or bfloat16"
    ), reason
    worst = float(reason.split()[1])
    assert worst > 65504
    assert summary.num_failed == 1 and summary.counters["files_failed"] == 1
    assert sorted(f["path"] for f in manifest["files"]) == [quiet_a, quiet_b]

    elements = read_records(out)
    assert sorted({e["filepath"] for e in elements}) == [quiet_a, quiet_b]
    assert len(elements) == manifest["num_examples"] == 6  # 3 windows of each recorded file

    # the same loud file is recorded in full where its values fit (bfloat16)
    wide = record_pipeline.run([*argv[:3], str(tmp_path / "wide"), *argv[4:], "bfloat16"])
    assert wide.num_failed == 0 and wide.num_examples == 9
    assert load_manifest(tmp_path / "wide")["errors"] == []
