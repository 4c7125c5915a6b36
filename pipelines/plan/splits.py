"""Which split a file goes to: ``--splits train=80,validation=10,test=10`` takes whole files.

A file's split comes from a stable hash (blake2b) of its path relative to the input pattern's
fixed prefix (`pattern_base`), so no window of one recording leaks across splits and moving the
corpus elsewhere keeps the assignment (`split_of`). The options themselves (the split weights,
the splits TFT's statistics come from) are parsed with the other options, in `pipelines.config`.
"""

from __future__ import annotations

import glob
import hashlib

from replay import format as fmt
from transforms.spec.types import Sharding


def pattern_base(pattern: str) -> str:
    """The fixed directory prefix of a glob (``data/**/*.wav`` -> ``data/``)."""
    cut = len(pattern)
    for i, ch in enumerate(pattern):
        if glob.has_magic(ch):
            cut = i
            break
    return pattern[: pattern[:cut].rfind("/") + 1]


def _unit_hash(text: str) -> float:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def split_of(path: str, sharding: Sharding) -> str:
    """The split a source file belongs to (all its windows go there)."""
    if not sharding.splits:
        return fmt.ALL_SPLIT
    key = path[len(sharding.split_base) :] if path.startswith(sharding.split_base) else path
    u, acc = _unit_hash(key), 0.0
    for name, fraction in sharding.splits:
        acc += fraction
        if u < acc:
            return name
    return sharding.splits[-1][0]
