"""Regenerates the bundled sample in data/sample/ (deterministic; run from the project root).

Three classes with different spectra, two 3-second 16 kHz 16-bit mono files each, written with
soundfile. The label is the last ``_``-separated word of the file name.
"""

from pathlib import Path

import numpy as np
import soundfile as sf

SAMPLE_RATE = 16000
SECONDS = 3.0


def engine(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    f0 = 55 + 5 * np.sin(2 * np.pi * 0.5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    harmonics = sum(np.sin(k * phase) / k for k in range(1, 8))
    return harmonics * 0.3 + 0.02 * rng.standard_normal(len(t))


def bird(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    chirp = np.sin(2 * np.pi * (3000 * t + 1500 * np.sin(2 * np.pi * 4 * t)))
    envelope = (np.sin(2 * np.pi * 2 * t) > 0.3).astype(float)
    return 0.4 * chirp * envelope + 0.01 * rng.standard_normal(len(t))


def rain(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    white = rng.standard_normal(len(t))
    spectrum = np.fft.rfft(white) / np.sqrt(np.arange(1, len(t) // 2 + 2))  # pink-ish
    return 0.3 * np.fft.irfft(spectrum, n=len(t)) / np.std(np.fft.irfft(spectrum, n=len(t)))


def main() -> None:
    out = Path(__file__).resolve().parent / "sample"
    out.mkdir(exist_ok=True)
    t = np.arange(int(SAMPLE_RATE * SECONDS)) / SAMPLE_RATE
    for seed, (name, fn) in enumerate([("engine", engine), ("bird", bird), ("rain", rain)]):
        for take in range(2):
            rng = np.random.default_rng(100 * seed + take)
            x = np.clip(fn(t + take * 0.37, rng), -0.99, 0.99)
            sf.write(out / f"take{take}_{seed}{take}_{name}.wav", x, SAMPLE_RATE, subtype="PCM_16")


if __name__ == "__main__":
    main()
