"""The Hugging Face `datasets` baseline of clips_bench.py: audiofolder, log-mel map, save_to_disk.

    python -m benchmarks hf --data_dir ROOT --output_dir OUT [--num_proc 2]

What a `datasets` user writes for a folder of labelled clips (``ROOT/<class>/*.wav``):
``load_dataset("audiofolder", data_dir=ROOT)`` (class labels from the folder names), a batched
``map(num_proc=2)`` that cuts each clip into 1-s windows (partial windows dropped) and computes
log-mel with librosa with our parameters (`baselines.py`: 400-sample periodic Hann frames, hop
160, 512-point FFT, 64 HTK mel bands 20 Hz .. rate/2, magnitude (power 1), log(mel + 1e-6), 98
frames a window as tf.signal's: the window padded by 56 zeros each side, so librosa's 400-sample
window centred in its 512-sample frame sits where tf.signal's does; librosa's triangles are in Hz
where tf.signal's are in mel: the same work, not the same bits; on 20 clips its mel energies are
within 0.2% of ours in total, median |log_mel difference| 1.3e-3), then ``save_to_disk``. It
stores per window `signal` (int16 [16000]), `log_mel` (float32 [98, 64], ``Array2D``),
`label` (``ClassLabel``: the index of the class in the sorted class list, our `target`) and
`filepath` (the clip's path, as ours stores it; replay_clips_bench.py reads these four keys).

Audio decoding: datasets 3.x decodes the audio column with soundfile; 4.x needs torch and
torchcodec for that, so with 4.x (benchmarks/requirements-hf.txt: 3.x cannot be installed beside
the project's pins) the column is read undecoded (``Audio(decode=False)``) and decoded with
soundfile in the map: the same library doing the same work.

Run it offline (``HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1``) and with a fresh ``HF_HOME``: a
second run would otherwise reuse the cached Arrow files of the first. Prints one JSON line:
windows, seconds (load to saved), bytes written, the library versions.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from typing import Any

import numpy as np

from benchmarks.baselines import BINS, FFT, FRAME, FRAMES, LOG_OFFSET, LOWER, STEP, WIN, _du

PAD = (FFT - FRAME) // 2  # librosa centres the 400-sample window in its 512-sample frame


def load(data_dir: str) -> Any:
    """The audiofolder dataset of `data_dir` (train split), its audio column decodable by us."""
    import datasets

    ds = datasets.load_dataset("audiofolder", data_dir=data_dir, split="train")
    if int(datasets.__version__.split(".")[0]) >= 4:  # 4.x decodes with torchcodec only
        ds = ds.cast_column("audio", datasets.Audio(decode=False))
    return ds


def decode(audio: dict) -> tuple[np.ndarray, int]:
    """(int16 samples of the first channel, sample rate) of one audio column value."""
    if "array" in audio:  # datasets 3.x: decoded by soundfile, float in [-1, 1)
        x = np.asarray(audio["array"], dtype=np.float64)
        x = x if x.ndim == 1 else x[0]
        return np.clip(np.rint(x * 32768), -32768, 32767).astype(np.int16), audio["sampling_rate"]
    import soundfile as sf

    source = audio["path"] if audio["bytes"] is None else io.BytesIO(audio["bytes"])
    data, rate = sf.read(source, dtype="int16", always_2d=True)
    return data[:, 0], rate


def log_mel(windows: np.ndarray, rate: int) -> np.ndarray:
    """float32 [k, FRAMES, BINS] log-mel of int16 [k, WIN] windows (librosa)."""
    import librosa

    x = np.pad(windows.astype(np.float32) / 32768.0, ((0, 0), (PAD, PAD)))
    mel = librosa.feature.melspectrogram(
        y=x,
        sr=rate,
        n_fft=FFT,
        hop_length=STEP,
        win_length=FRAME,
        window="hann",
        center=False,
        power=1.0,
        n_mels=BINS,
        fmin=LOWER,
        fmax=rate / 2,
        htk=True,
        norm=None,
    )  # [k, BINS, FRAMES]
    return np.log(mel + LOG_OFFSET).transpose(0, 2, 1).astype(np.float32)


def features(batch: dict) -> dict:
    """Batched map: one output row per 1-s window of the batch's clips."""
    by_rate: dict[int, list[tuple[np.ndarray, int, str]]] = {}
    for audio, label in zip(batch["audio"], batch["label"], strict=True):
        samples, rate = decode(audio)
        k = len(samples) // WIN
        if k:
            clip = (samples[: k * WIN].reshape(k, WIN), label, audio["path"])
            by_rate.setdefault(rate, []).append(clip)
    out: dict[str, list] = {"signal": [], "log_mel": [], "label": [], "filepath": []}
    for rate, clips in by_rate.items():
        windows = np.concatenate([w for w, _, _ in clips])
        out["signal"].extend(windows)
        out["log_mel"].extend(log_mel(windows, rate))
        out["label"].extend(label for w, label, _ in clips for _ in range(len(w)))
        out["filepath"].extend(path for w, _, path in clips for _ in range(len(w)))
    return out


def run(data_dir: str, output_dir: str, num_proc: int) -> dict:
    """Load, map, save; the result line."""
    import datasets
    import librosa

    start = time.perf_counter()
    ds = load(data_dir)
    schema = datasets.Features(
        {
            "signal": datasets.Sequence(datasets.Value("int16")),
            "log_mel": datasets.Array2D((FRAMES, BINS), "float32"),
            "label": ds.features["label"],
            "filepath": datasets.Value("string"),
        }
    )
    ds = ds.map(
        features, batched=True, num_proc=num_proc, remove_columns=ds.column_names, features=schema
    )
    ds.save_to_disk(output_dir)
    seconds = time.perf_counter() - start
    return {
        "windows": len(ds),
        "seconds": seconds,
        "bytes": _du(output_dir),
        "datasets": datasets.__version__,
        "librosa": librosa.__version__,
        "classes": len(ds.features["label"].names),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", required=True, help="ROOT of ROOT/<class>/*.wav")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--num_proc", type=int, default=2)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.data_dir, args.output_dir, args.num_proc)))


if __name__ == "__main__":
    main()
