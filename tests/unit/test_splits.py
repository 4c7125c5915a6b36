"""Which split a file goes to (`split_of`): stable, relative to the pattern's fixed prefix, and
pinned as literals in any process."""

import json
import os
import subprocess
import sys
from pathlib import Path

from pipelines.config import parse_splits
from pipelines.plan.splits import pattern_base, split_of
from transforms.spec.types import Sharding

ROOT = Path(__file__).resolve().parents[2]


def test_split_of_is_stable_and_relative_to_the_pattern_base():
    sh = Sharding(splits=parse_splits("train=50,test=50"), split_base="/data/")
    moved = Sharding(splits=sh.splits, split_base="gs://bucket/corpus/")
    names = [f"a/{i}.wav" for i in range(200)]
    here = [split_of("/data/" + n, sh) for n in names]
    assert here == [split_of("gs://bucket/corpus/" + n, moved) for n in names]
    assert 60 < here.count("train") < 140  # roughly half
    assert pattern_base("data/**/*.wav") == "data/"
    assert pattern_base("/x/y/file.wav") == "/x/y/"


# --- splits pinned as literals ---------------------------------------------------------------
# Computed once (2026-11-25, the blake2b rule of `split_of`) and pinned: a split is stored in
# every dataset, so the same path must land in the same split in every process, on every machine
# and in every later version. The unit hash of each path is in the comment.
TWO_WAY = "train=80,test=20"
THREE_WAY = "train=50,validation=25,test=25"
SPLIT_CASES = [  # (path relative to the pattern base, split of TWO_WAY, split of THREE_WAY)
    ("dog/000_dog.wav", "train", "train"),  # 0.0491
    ("cat/001_cat.wav", "train", "validation"),  # 0.5035
    ("cat/007_cat.wav", "train", "validation"),  # 0.6608
    ("rain/008_rain.wav", "test", "test"),  # 0.8561
    ("dog/009_dog.wav", "train", "train"),  # 0.3783
    ("cat/016_cat.wav", "test", "test"),  # 0.8962
    ("rain/026_rain.wav", "train", "validation"),  # 0.7486
    ("dog/030_dog.wav", "test", "test"),  # 0.9694
    ("cat/034_cat.wav", "train", "test"),  # 0.7612
    ("rain/038_rain.wav", "train", "train"),  # 0.4309
]
BASE = "gs://bucket/corpus/"
BASED_CASES = [  # THREE_WAY with split_base BASE: the base is cut off; other paths hash whole
    (BASE + "dog/000_dog.wav", "train"),
    (BASE + "cat/001_cat.wav", "validation"),
    (BASE + "rain/008_rain.wav", "test"),
    ("/elsewhere/dog/000_dog.wav", "validation"),  # 0.7230: not under the base
    ("/elsewhere/cat/001_cat.wav", "test"),  # 0.8561
    ("/elsewhere/cat/007_cat.wav", "train"),  # 0.2822
]


def _pinned_splits() -> dict[str, list[str]]:
    """{case name: [split of each path]}, computed by `split_of` in this process."""
    two = Sharding(splits=parse_splits(TWO_WAY))
    three = Sharding(splits=parse_splits(THREE_WAY))
    based = Sharding(splits=three.splits, split_base=BASE)
    return {
        "two": [split_of(p, two) for p, _, _ in SPLIT_CASES],
        "three": [split_of(p, three) for p, _, _ in SPLIT_CASES],
        "based": [split_of(p, based) for p, _ in BASED_CASES],
    }


EXPECTED_SPLITS = {
    "two": [two for _, two, _ in SPLIT_CASES],
    "three": [three for _, _, three in SPLIT_CASES],
    "based": [split for _, split in BASED_CASES],
}


def test_split_of_gives_the_pinned_split_of_each_path():
    """Pins the split rule: each literal path goes to its literal split (two- and three-way,
    and with a split_base prefix cut off, or not when the path is outside it)."""
    assert _pinned_splits() == EXPECTED_SPLITS


def test_split_of_is_the_same_in_processes_with_other_hash_seeds():
    """Pins that splits do not depend on the process: two interpreters with different
    PYTHONHASHSEED values (Python's salted str hash differs between them) give the literals."""
    probe = (
        "import json\n"
        "from tests.unit.test_splits import _pinned_splits\n"
        "print(json.dumps(_pinned_splits()))\n"
    )
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert json.loads(out.stdout) == EXPECTED_SPLITS, f"PYTHONHASHSEED={seed}"
