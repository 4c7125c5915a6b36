"""Pure planning of splits and shards: which split a file goes to, which shard a window goes to.

- Splits (``--splits train=80,validation=10,test=10``) take whole source files, by a stable hash
  (blake2b) of the file's path relative to the input pattern's fixed prefix, so no window of one
  recording leaks across splits and moving the corpus elsewhere keeps the assignment.
- Shards (``--shard_by``): ``hash`` spreads windows by a hash of (index, channel, win_start_idx);
  ``file`` keeps all windows of a file in one shard; ``class`` gives each class its own disjoint
  set of shards; a Python ``shard_func(element) -> int`` (the snapshot contract) chooses freely.
- ``--elements_per_shard N`` / ``--max_elements M`` work on the element *rank*: elements ordered
  by (file index, channel, win_start_idx), counted within their split; shards then hold exactly N
  consecutive elements (the last one the rest) and only the first M elements are kept. No element
  is dropped at a shard or file boundary.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from replay import format as fmt

SHARD_BY = ("hash", "file", "class")
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")


@dataclasses.dataclass(frozen=True)
class Sharding:
    """How windows are assigned to splits and shards (picklable; shipped to workers).

    Attributes:
      shard_by: hash, file or class (ignored when `shard_func` is set).
      splits: ((name, fraction), ...) summing to 1; empty for the single split "all".
      split_base: prefix stripped from paths before hashing them into splits.
      classes: sorted class labels (``shard_by="class"``).
      elements_per_shard: exact shard size by element rank (None: count from planning).
      max_elements: keep only the first that many elements (by rank, over all splits).
      channel_split: elements are per channel (``--channel_mode split``).
      hop_len: window hop, to turn win_start_idx into a window number.
      shard_func: user callable element dict -> int (Python API only).
    """

    shard_by: str = "hash"
    splits: tuple[tuple[str, float], ...] = ()
    split_base: str = ""
    classes: tuple[str, ...] = ()
    elements_per_shard: int | None = None
    max_elements: int | None = None
    channel_split: bool = False
    hop_len: int = 1
    shard_func: Callable[[dict], int] | None = None

    @property
    def by_rank(self) -> bool:
        return self.elements_per_shard is not None or self.max_elements is not None

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.splits) or (fmt.ALL_SPLIT,)


def parse_splits(value: str | None) -> tuple[tuple[str, float], ...]:
    """``train=80,validation=10,test=10`` -> (("train", .8), ...); None/"" -> ().

    Raises:
      ValueError: malformed, duplicate or reserved names, or non-positive weights.
    """
    if not value:
        return ()
    parts = []
    for item in value.split(","):
        name, sep, weight = item.partition("=")
        name = name.strip()
        if not sep or not _SPLIT_NAME.match(name) or name == fmt.ALL_SPLIT:
            raise ValueError(f"--splits: bad item {item!r}; expected name=weight, e.g. train=80")
        try:
            w = float(weight)
        except ValueError:
            raise ValueError(f"--splits: weight of {name!r} is not a number: {weight!r}") from None
        if not w > 0:
            raise ValueError(f"--splits: weight of {name!r} must be > 0")
        parts.append((name, w))
    names = [n for n, _ in parts]
    if len(set(names)) != len(names):
        raise ValueError(f"--splits: duplicate split names in {value!r}")
    total = sum(w for _, w in parts)
    return tuple((n, w / total) for n, w in parts)


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


def _hash_int(*parts: Any) -> int:
    key = ":".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


def file_offsets(files: Iterable[Mapping[str, Any]], sharding: Sharding) -> dict[int, tuple]:
    """{file index: (global rank offset, split rank offset, windows per channel)}.

    Ranks order elements by (file index, channel, window number): the basis of
    ``--max_elements`` and ``--elements_per_shard``.
    """
    out: dict[int, tuple] = {}
    total, per_split = 0, dict.fromkeys(sharding.split_names, 0)
    for f in sorted(files, key=lambda f: f["index"]):
        channels = f["num_channels"] if sharding.channel_split else 1
        split = split_of(f["path"], sharding)
        out[f["index"]] = (total, per_split[split], f["num_windows"] // max(channels, 1))
        total += f["num_windows"]
        per_split[split] += f["num_windows"]
    return out


def rank_of(
    index: int, channel: int, win_start: int, offsets: Mapping[int, tuple], sharding: Sharding
) -> tuple[int, int]:
    """(global rank, rank within its split) of one window."""
    global_off, split_off, per_channel = offsets[index]
    pos = channel * per_channel + win_start // sharding.hop_len
    return global_off + pos, split_off + pos


def rank_shard_counts(
    offsets: Mapping[int, tuple], files: Iterable[Mapping[str, Any]], sharding: Sharding
) -> dict[str, int]:
    """Shards per split under ``--elements_per_shard`` (after ``--max_elements``)."""
    kept = dict.fromkeys(sharding.split_names, 0)
    limit = math.inf if sharding.max_elements is None else sharding.max_elements
    for f in files:
        global_off = offsets[f["index"]][0]
        n = max(0, min(f["num_windows"], limit - global_off))
        kept[split_of(f["path"], sharding)] += int(n)
    per = sharding.elements_per_shard
    return {s: max(1, math.ceil(n / per)) for s, n in kept.items()}


def shard_of(
    element_key: tuple[int, int, int],
    *,
    label: str,
    split_rank: int,
    num_shards: int,
    sharding: Sharding,
) -> int:
    """Shard of one window within its split (not for `shard_func`, see `EncodeFn`)."""
    index, channel, win_start = element_key
    if sharding.elements_per_shard is not None:
        return split_rank // sharding.elements_per_shard
    if sharding.shard_by == "file":
        return _hash_int(index) % num_shards
    if sharding.shard_by == "class":
        k = len(sharding.classes)
        i = sharding.classes.index(label)
        lo, hi = i * num_shards // k, (i + 1) * num_shards // k
        return lo + _hash_int(index, channel, win_start) % (hi - lo)
    return _hash_int(index, channel, win_start) % num_shards


def validate_shard_by(shard_by: str, *, classes: Sequence[str], num_shards: int) -> int:
    """Checks --shard_by; returns the shard count to use (class mode needs >= one per class)."""
    if shard_by not in SHARD_BY:
        raise ValueError(f"--shard_by must be one of {', '.join(SHARD_BY)}, got {shard_by!r}")
    if shard_by == "class":
        return max(num_shards, len(classes))
    return num_shards
