"""Replays the coverage-guided fuzzers' saved corpora through their targets (fuzz/README.md).

tests/fixtures/fuzz_wav/ holds every input with which atheris found a new path through the
WAV/RIFF decoder, tests/fixtures/fuzz_manifest/ those for the manifest loader (libFuzzer
``-merge=1``-minimised). Each must still end as the contract says: decoded samples or
`WavDecodeError`; a valid dataset or a `ReplayError`, nothing opened outside the dataset, the
report escaped. No atheris needed: the targets are plain functions.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from fuzz.manifest_target import BASE_DATASET, check_manifest_bytes, corpus, decode_input
from fuzz.wav_target import check_wav
from tests.support.hang_guard import hang_guard

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _replay(directory: Path, target) -> Counter:
    outcomes: Counter = Counter()
    failures = []
    for name, data in corpus(directory):
        try:
            with hang_guard():
                outcomes[target(data)] += 1
        except Exception as e:  # noqa: BLE001 - collected, then reported together
            failures.append(f"{name}: {type(e).__name__}: {e}"[:300])
    assert not failures, "\n".join(failures)
    return outcomes


def test_wav_corpus_decodes_or_is_refused():
    outcomes = _replay(FIXTURES / "fuzz_wav", check_wav)
    assert outcomes["decoded"] >= 10 and sum(outcomes.values()) >= 100, outcomes


def test_manifest_corpus_loads_or_is_refused(tmp_path):
    dataset = tmp_path / "dataset"
    shutil.copytree(BASE_DATASET, dataset)
    base = json.loads((BASE_DATASET / "manifest.json").read_text())

    def target(data: bytes) -> str:
        return check_manifest_bytes(decode_input(data, base), dataset)

    outcomes = _replay(FIXTURES / "fuzz_manifest", target)
    assert outcomes["valid"] >= 5 and outcomes["refused ManifestError"] >= 20, outcomes


@pytest.mark.parametrize("directory", ["fuzz_wav", "fuzz_manifest"])
def test_corpus_stays_small(directory):
    files = [p for p in (FIXTURES / directory).iterdir() if p.name != "README.md"]
    assert 0 < len(files) <= 600 and sum(p.stat().st_size for p in files) < 400_000
