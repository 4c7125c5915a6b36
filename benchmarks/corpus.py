"""The benchmark corpus: deterministic synthetic speech-like WAV files plus a real recording.

    python -m benchmarks corpus --minutes 60 [--dir /tmp/audiorecords-bench]

Every file is 16 kHz 16-bit mono, 45-75 s long, labelled by the last ``_``-separated word of its
name (3 classes):

- ``speech``: formant-filtered glottal pulse trains with pitch contours, syllables, fricative
  noise bursts and pauses, mixed with coloured (1/f-like) noise at 15-35 dB SNR;
- ``babble``: 2-4 overlapping speech-like voices in louder coloured noise (0-15 dB SNR);
- ``tug``: the real hydrophone recording of `REAL_RECORDING` resampled to 16 kHz, cut at
  random offsets with random gains and mixed with coloured noise and a quiet voice.

Plus the real recording itself, untouched (64 kHz, 24-bit, 5 s excerpt, class ``tug``), which makes
the record job's ``--signal_dtype auto`` choose int32; ``--pcm16`` leaves it out (every file 16 kHz
16-bit, int16 signals: the setting of issue 18's measurements).

Files are generated once per seed and recording into ``<dir>/pool-<seed>-<recording hash>``
(file i depends only on them and i);
``corpus(minutes)`` returns a directory of symlinks to the first files that add up to
`minutes`, so the 1x / 2x / 4x corpora are prefixes of each other.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

RATE = 16000
_ROOT = Path(__file__).resolve().parents[1]
# The 5 s excerpt of the hydrophone recording in this repository (bytes unchanged), so every
# clone builds the same corpus; AUDIORECORDS_REAL_RECORDING names another copy (RESULTS.md
# figures up to 2026-11-23 used the whole 20.5 s recording, 1561971697.731_..._tug.wav). The
# pool and corpus directories carry the recording's hash: corpora of two recordings never mix.
_EXCERPT = _ROOT / "tests" / "fixtures" / "audio" / "hydrophone_excerpt_tug.wav"
REAL_RECORDING = os.environ.get("AUDIORECORDS_REAL_RECORDING") or str(_EXCERPT)
DEFAULT_DIR = os.environ.get("AUDIORECORDS_BENCH_DIR", "/tmp/audiorecords-bench")
CLASSES = ("speech", "babble", "tug")
SEED = 1234
_VOWELS = np.array(  # (F1, F2, F3) Hz of a few vowels
    [[730, 1090, 2440], [270, 2290, 3010], [530, 1840, 2480], [570, 840, 2410], [300, 870, 2240]]
)


def _resonator(x: np.ndarray, freq: float, bw: float) -> np.ndarray:
    """Two-pole resonator (a formant) at `freq` Hz with bandwidth `bw` Hz."""
    from scipy.signal import lfilter

    r = np.exp(-np.pi * bw / RATE)
    a = [1.0, -2.0 * r * np.cos(2 * np.pi * freq / RATE), r * r]
    return lfilter([1.0 - r], a, x)


def coloured_noise(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit-RMS noise with a roughly 1/f spectrum (a sum of three one-pole low-passes + white)."""
    from scipy.signal import lfilter

    white = rng.standard_normal(n)
    out = 0.3 * white
    for pole, gain in ((0.99, 0.05), (0.9, 0.2), (0.6, 0.5)):
        out += gain * lfilter([1.0], [1.0, -pole], rng.standard_normal(n))
    return out / np.sqrt(np.mean(out**2))


def voice(rng: np.random.Generator, n: int) -> np.ndarray:
    """A speech-like voice of n samples: utterances of syllables separated by pauses."""
    out = np.zeros(n)
    pos = int(rng.uniform(0, 0.5) * RATE)
    base_f0 = rng.uniform(90, 230)
    while pos < n:
        utterance = int(rng.uniform(0.6, 3.0) * RATE)
        end = min(n, pos + utterance)
        t = np.arange(end - pos) / RATE
        contour = base_f0 * (1 + 0.15 * np.sin(2 * np.pi * rng.uniform(0.3, 1.5) * t))
        contour *= 1 + 0.01 * rng.standard_normal(len(t)).cumsum() / np.sqrt(len(t) + 1)
        phase = np.cumsum(contour / RATE)
        pulses = np.diff(np.floor(phase), prepend=0.0)  # one impulse per glottal period
        seg = np.zeros(len(t))
        s = 0
        while s < len(t):  # syllables: a vowel's formants, or a fricative burst
            length = int(rng.uniform(0.08, 0.3) * RATE)
            e = min(len(t), s + length)
            env = np.hanning(e - s) if e - s > 2 else np.ones(e - s)
            if rng.random() < 0.2:
                burst = _resonator(rng.standard_normal(e - s), rng.uniform(3000, 6000), 1500)
                seg[s:e] += 0.3 * burst * env
            else:
                src = _resonator(pulses[s:e], 0.0, 400)  # glottal low-pass (pole at DC)
                f1, f2, f3 = _VOWELS[rng.integers(len(_VOWELS))] * rng.uniform(0.9, 1.1)
                v = _resonator(src, f1, 80) + 0.5 * _resonator(src, f2, 120)
                v += 0.25 * _resonator(src, f3, 160)
                seg[s:e] += v * env
            s = e
        out[pos:end] += seg / (np.sqrt(np.mean(seg**2)) + 1e-9) * rng.uniform(0.3, 1.0)
        pos = end + int(rng.uniform(0.15, 1.2) * RATE)
    return out


def _hydrophone_16k() -> np.ndarray:
    import soundfile as sf
    from scipy.signal import resample_poly

    data, rate = sf.read(REAL_RECORDING, dtype="float64", always_2d=True)
    return resample_poly(data[:, 0], RATE, rate)


def make_file(index: int, seed: int = SEED) -> tuple[str, np.ndarray]:
    """(class, int16 samples) of pool file `index` (deterministic in seed and index)."""
    rng = np.random.default_rng([seed, index])
    label = CLASSES[index % len(CLASSES)]
    n = int(rng.uniform(45, 75) * RATE)
    if label == "speech":
        x = voice(rng, n) + coloured_noise(rng, n) * 10 ** (-rng.uniform(15, 35) / 20)
    elif label == "babble":
        x = sum(voice(rng, n) for _ in range(rng.integers(2, 5)))
        x = x / np.sqrt(np.mean(x**2)) + coloured_noise(rng, n) * 10 ** (-rng.uniform(0, 15) / 20)
    else:
        hyd = _hydrophone_16k()
        x = np.zeros(n)
        pos = 0
        while pos < n:
            start = int(rng.integers(0, len(hyd) - RATE))
            piece = hyd[start : start + min(n - pos, int(rng.uniform(2, 10) * RATE))]
            x[pos : pos + len(piece)] = piece / (np.sqrt(np.mean(piece**2)) + 1e-12)
            pos += len(piece)
        x += 0.5 * coloured_noise(rng, n) + 0.1 * voice(rng, n)
    x *= rng.uniform(0.05, 0.3) / (np.sqrt(np.mean(x**2)) + 1e-12)  # RMS -26..-10 dBFS
    return label, np.clip(np.rint(x * 32768), -32768, 32767).astype(np.int16)


def _write(args: tuple[int, int, str]) -> tuple[str, int]:
    import soundfile as sf

    index, seed, pool = args
    label, samples = make_file(index, seed)
    path = Path(pool) / f"f{index:05d}_{label}.wav"
    tmp = path.with_suffix(".tmp")
    sf.write(tmp, samples, RATE, subtype="PCM_16", format="WAV")
    os.replace(tmp, path)
    return str(path), len(samples)


def _duration(path: Path) -> float:
    import soundfile as sf

    info = sf.info(str(path))
    return info.frames / info.samplerate


def corpus(
    minutes: float,
    *,
    root: str = DEFAULT_DIR,
    seed: int = SEED,
    workers: int = 0,
    pcm16: bool = False,
) -> Path:
    """Directory of symlinks: the first pool files adding up to >= `minutes`, + the real file.

    Generates missing pool files in parallel (`workers` processes, 0: one per core). With
    `pcm16`, without the real (24-bit 64 kHz) file.
    """
    tag = hashlib.sha256(Path(REAL_RECORDING).read_bytes()).hexdigest()[:8]
    pool = Path(root) / f"pool-{seed}-{tag}"
    pool.mkdir(parents=True, exist_ok=True)
    need = minutes * 60.0
    chosen: list[Path] = []
    total, index = 0.0, 0
    while total < need:
        batch = range(index, index + 16)
        missing = [i for i in batch if not list(pool.glob(f"f{i:05d}_*.wav"))]
        if missing:
            with ProcessPoolExecutor(max_workers=workers or os.cpu_count()) as ex:
                list(ex.map(_write, [(i, seed, str(pool)) for i in missing]))
        for i in batch:
            path = next(pool.glob(f"f{i:05d}_*.wav"))
            if total < need:
                chosen.append(path)
                total += _duration(path)
        index += 16
    out = Path(root) / f"corpus-{seed}-{tag}-{minutes:g}min{'-pcm16' if pcm16 else ''}"
    if not out.exists():
        tmp = Path(f"{out}.tmp{os.getpid()}")
        tmp.mkdir(parents=True)
        for path in chosen:
            (tmp / path.name).symlink_to(path)
        if not pcm16:
            (tmp / "real_tug.wav").symlink_to(REAL_RECORDING)
        os.replace(tmp, out)
    return out


def corpus_stats(directory: Path) -> dict:
    """Files, audio seconds and input bytes of a corpus directory."""
    import soundfile as sf

    files = sorted(directory.glob("*.wav"))
    seconds = sum(sf.info(str(p)).duration for p in files)
    return {
        "files": len(files),
        "audio_seconds": seconds,
        "input_bytes": sum(os.path.getsize(os.path.realpath(p)) for p in files),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--pcm16", action="store_true", help="leave out the 24-bit real file")
    args = parser.parse_args(argv)
    out = corpus(args.minutes, root=args.dir, seed=args.seed, pcm16=args.pcm16)
    print(out, corpus_stats(out))


if __name__ == "__main__":
    main()
