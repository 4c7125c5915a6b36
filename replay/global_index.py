"""The global read order without TensorFlow: run positions -> record indices, in numpy.

`replay.global_order` defines the order with TensorFlow's ops (``RandomIndexShuffle`` keyed by
SipHash words from ``to_hash_bucket_strong``); this module computes the same numbers with numpy
and the standard library, for readers that run without TensorFlow (the PyTorch and Grain
samplers, `replay.samplers`):

- `siphash24`: SipHash-2-4 as ``tf.strings.to_hash_bucket_strong`` computes it
  (``tensorflow/core/platform/default/strong_hash.h``: highwayhash's ``SipHashState``, the key
  the op's two integers as unsigned 64-bit words).
- `index_shuffle`: ``RandomIndexShuffle`` (``tensorflow/core/kernels/random_index_shuffle.cc``):
  a Simon cipher of the smallest even block of at least 16 bits that holds ``max_index``
  (``ceil(log2(max_index))`` bits, rounded up to even), its round keys from the 3 key words,
  cycle-walking until the value is at most ``max_index``; vectorised over the indices.
- `GlobalIndex`: the order over records numbered as `replay.records.Records` numbers them (the
  spans' records in order, 0 to N - 1), for positions of any epoch.
"""

from __future__ import annotations

import functools
import math
import struct
import threading
from collections.abc import Sequence

import numpy as np

from replay.global_order import (
    _BLOCK_KEY,
    _KEY_SALTS,
    BLOCK_LENGTH,
    WINDOW_BLOCKS,
    GlobalOrder,
    plan_blocks,
)

_MASK64 = (1 << 64) - 1
_SIPHASH_KEY1 = 0x676C6F62  # `EpochOrder._key`'s second SipHash key word ("glob")
_MIN_BLOCK_BITS = 16  # random_index_shuffle.cc kMinBlockSize
_ODD_BITS = 0x5555555555555555
_TABLE_BITS = 20  # blocks small enough to encrypt whole (`_op_shuffle`)
_BROKEN_FROM = 4**8  # the op is one value short on powers of 4 from here (`_index_shuffle`)


def _rotl64(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK64


def siphash24(key0: int, key1: int, data: bytes) -> int:
    """SipHash-2-4 of `data` keyed by the two 64-bit words (`key0`, `key1`)."""
    v0 = key0 ^ 0x736F6D6570736575
    v1 = key1 ^ 0x646F72616E646F6D
    v2 = key0 ^ 0x6C7967656E657261
    v3 = key1 ^ 0x7465646279746573

    def rounds(n: int) -> None:
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & _MASK64
            v1 = _rotl64(v1, 13) ^ v0
            v0 = _rotl64(v0, 32)
            v2 = (v2 + v3) & _MASK64
            v3 = _rotl64(v3, 16) ^ v2
            v0 = (v0 + v3) & _MASK64
            v3 = _rotl64(v3, 21) ^ v0
            v2 = (v2 + v1) & _MASK64
            v1 = _rotl64(v1, 17) ^ v2
            v2 = _rotl64(v2, 32)

    whole = len(data) - len(data) % 8
    for (m,) in struct.iter_unpack("<Q", data[:whole]):
        v3 ^= m
        rounds(2)
        v0 ^= m
    m = int.from_bytes(data[whole:], "little") | ((len(data) & 0xFF) << 56)
    v3 ^= m
    rounds(2)
    v0 ^= m
    v2 ^= 0xFF
    rounds(4)
    return v0 ^ v1 ^ v2 ^ v3


@functools.lru_cache(maxsize=4096)
def order_key(seed: int, epoch: int, key: int) -> tuple[int, int, int]:
    """The 3 key words of (seed, epoch, key): `replay.global_order.EpochOrder._key`."""
    text = f"{int(epoch)}:{int(key)}".encode()
    return tuple(
        siphash24(seed & _MASK64, _SIPHASH_KEY1, salt + text) & 0xFFFFFFFF for salt in _KEY_SALTS
    )


def _round_keys(key: Sequence[int], bits: int, rounds: int) -> list[int]:
    """The Simon round keys of a `bits`-bit word (``simon_key_schedule``)."""
    mask = (1 << bits) - 1

    def rotr(x: int, r: int) -> int:
        return ((x >> r) | (x << (bits - r))) & mask

    c = 0xFFFFFFFC & mask
    z = 0x7369F885192C0EF5 & mask
    keys = [int(k) & 0xFFFFFFFF & mask for k in key[:3]]
    for i in range(3, rounds):
        keys.append(c ^ (z & 1) ^ keys[i - 3] ^ rotr(keys[i - 1], 3) ^ rotr(keys[i - 1], 4))
        z >>= 1
    return keys


def _encrypt(value: np.ndarray, keys: Sequence[int], bits: int) -> np.ndarray:
    """``simon_encrypt`` of each of `value` with words of `bits` bits: uint64, or uint32 where
    ``2 * bits <= 32`` (the same numbers, half the memory traffic)."""
    word = value.dtype.type
    mask = word((1 << bits) - 1)
    w = word(bits)

    def rotl(x: np.ndarray, r: int) -> np.ndarray:
        return ((x << word(r)) | (x >> word(bits - r))) & mask

    def f(x: np.ndarray) -> np.ndarray:
        return (rotl(x, 1) & rotl(x, 8)) ^ rotl(x, 2)

    left = (value >> w) & mask
    right = value & mask
    for i in range(0, len(keys) - 1, 2):
        left = left ^ f(right) ^ word(keys[i])
        right = right ^ f(left) ^ word(keys[i + 1])
    return (left << w) | right


def _op_shuffle(index: np.ndarray, key: Sequence[int], max_index: int, rounds: int) -> np.ndarray:
    """``RandomIndexShuffle`` of uint64 `index` (each at most ``2**bits - 1``), as TF computes it
    (not a bijection of [0, max_index] on powers of 4 from 4**8)."""
    if max_index == 0:
        return np.zeros_like(index)
    bits = math.ceil(math.log2(float(max_index)))
    bits = max(bits + bits % 2, _MIN_BLOCK_BITS)
    bits = bits if bits <= 62 else 64
    keys = _round_keys(key, bits // 2, rounds)
    top = np.uint64(max_index)
    if bits <= _TABLE_BITS and (max_index + 1) * 8 < 1 << bits:
        # a walk of ~2**bits / max_index steps: follow the cipher's cycles over its whole block
        # instead (`stop[y]`: the first value at most max_index from y on), by pointer doubling
        # on uint32 words and intp tables; it stops once every walk asked for has ended (a walk
        # from an index in [0, max_index] ends at the latest back at it)
        domain = np.arange(1 << bits, dtype=np.uint32)
        step = _encrypt(domain, keys, bits // 2).astype(np.intp)
        stop = np.where(domain <= max_index, domain.astype(np.intp), step)
        want = step[index.astype(np.intp)]
        for _ in range(bits + 1):  # a cycle is at most 2**bits long
            ended = stop[want]
            if ended.size == 0 or ended.max() <= max_index:
                break
            stop = stop[stop]
        return stop[want].astype(np.uint64)
    out = _encrypt(index, keys, bits // 2)
    over = np.flatnonzero(out > top)
    while over.size:  # cycle-walking: encrypt again until the value is in range
        out[over] = _encrypt(out[over], keys, bits // 2)
        over = over[out[over] > top]
    return out


def index_shuffle(
    index: np.ndarray | Sequence[int], key: Sequence[int], max_index: int, *, rounds: int = 4
) -> np.ndarray:
    """`index`'s places in a permutation of [0, max_index] keyed by `key` (3 words): the numbers
    of `replay.global_order._index_shuffle`, its fix-up on powers of 4 from 4**8 included
    (int64, the shape of `index`)."""
    index = np.asarray(index, dtype=np.int64).astype(np.uint64)
    top = int(max_index)
    broken = top >= _BROKEN_FROM and not top & (top - 1) and bool(top & _ODD_BITS)
    if broken:
        top += 1
    places = _op_shuffle(index, key, top, rounds)
    if broken:
        places[places == np.uint64(top)] = _op_shuffle(np.array([top], np.uint64), key, top, rounds)
    return places.astype(np.int64)


class GlobalIndex:
    """The global order over spans of `counts` records: run position -> record index, the
    record numbered across the spans in order (`replay.records.Records`' numbering, and
    `replay.global_reader`'s record ids).

    The same numbers as `replay.global_order.positions_records` on ``plan_blocks(counts)``
    (record index = the span's first index + the record in the span) and as the tf.data
    reader's ``replay_dataset(order=GlobalOrder(...))``. Picklable; thread-safe (Grain's
    loader asks its sampler from several threads); caches the layout of the last epochs and
    the permutations of the last windows it was asked for.
    """

    _EPOCHS_KEPT = 2
    _WINDOWS_KEPT = 16

    def __init__(
        self,
        counts: Sequence[int],
        *,
        seed: int,
        block_length: int = BLOCK_LENGTH,
        window_blocks: int = WINDOW_BLOCKS,
    ):
        GlobalOrder(seed=seed, block_length=block_length, window_blocks=window_blocks)  # checks
        self.seed = seed
        self.window_blocks = window_blocks
        self.counts = tuple(int(n) for n in counts)
        blocks = plan_blocks(self.counts, block_length=block_length)
        base = np.cumsum((0, *self.counts), dtype=np.int64)
        self._count = np.asarray(blocks.count, np.int64)
        shard = np.asarray(blocks.shard, np.int64)
        self._first_id = base[shard] + np.asarray(blocks.first, np.int64) if len(blocks) else shard
        self.num_blocks = len(blocks)
        self.num_records = int(base[-1])
        self._epochs: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._windows: dict[tuple[int, int], np.ndarray] = {}
        self._lock = threading.Lock()  # the two caches

    @classmethod
    def of(cls, source: object, order: GlobalOrder) -> GlobalIndex:
        """The order `order` over a source's records: `Records` (or an object with its
        ``spans``, or a ``records`` attribute that has them); with blocks of one record, any
        source of ``len(source)`` records (the order then depends on their number alone)."""
        try:
            counts = span_counts(source)
        except TypeError:
            if order.block_length != 1:
                raise
            counts = [len(source)]
        return cls(
            counts,
            seed=order.seed,
            block_length=order.block_length,
            window_blocks=order.window_blocks,
        )

    def __getstate__(self) -> dict:
        state = {**self.__dict__, "_epochs": {}, "_windows": {}}
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def block_order(self, epoch: int) -> np.ndarray:
        """The epoch's blocks in read order (`EpochOrder.block_order`)."""
        key = order_key(self.seed, epoch, _BLOCK_KEY)
        return index_shuffle(np.arange(self.num_blocks), key, max(self.num_blocks - 1, 0))

    def _layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(block order, each window's first record in the epoch, each window's size)."""
        with self._lock:
            got = self._epochs.get(epoch)
        if got is None:
            order = self.block_order(epoch)
            sizes = np.add.reduceat(
                self._count[order], np.arange(0, len(order), self.window_blocks)
            )
            firsts = np.cumsum(sizes) - sizes
            got = (order, firsts, sizes)
            with self._lock:
                if len(self._epochs) >= self._EPOCHS_KEPT:
                    self._epochs.pop(next(iter(self._epochs)))
                self._epochs[epoch] = got
        return got

    def _permutation(self, epoch: int, window: int, size: int) -> np.ndarray:
        """The window's record at each of its positions (`EpochOrder.window_permutation`),
        whole: one sampler call a position would otherwise shuffle a window's cipher block
        each time."""
        with self._lock:
            got = self._windows.get((epoch, window))
        if got is None:
            key = order_key(self.seed, epoch, window + 1)
            got = index_shuffle(np.arange(size), key, max(size - 1, 0))
            with self._lock:
                if len(self._windows) >= self._WINDOWS_KEPT:
                    self._windows.pop(next(iter(self._windows)))
                self._windows[epoch, window] = got
        return got

    def window_records(self, epoch: int, window: int, at: np.ndarray) -> np.ndarray:
        """The record index at each of the window's positions `at` (counted in the window)."""
        order, _, sizes = self._layout(epoch)
        blocks = order[window * self.window_blocks : (window + 1) * self.window_blocks]
        source = self._permutation(epoch, window, int(sizes[window]))[at]
        counts = self._count[blocks]
        block_first = np.cumsum(counts) - counts
        owner = np.searchsorted(block_first, source, side="right") - 1
        return self._first_id[blocks[owner]] + source - block_first[owner]

    def records(self, positions: Sequence[int] | np.ndarray) -> np.ndarray:
        """The record index of each of the run's `positions` (int64, positions' shape)."""
        pos = np.asarray(positions, dtype=np.int64)
        flat = pos.reshape(-1)
        if flat.size and flat.min() < 0:
            raise ValueError(f"GlobalIndex: positions must be >= 0, not {int(flat.min())}")
        if flat.size and not self.num_records:
            raise ValueError("GlobalIndex: no records to order")
        out = np.empty_like(flat)
        if not flat.size:
            return out.reshape(pos.shape)
        epochs, q = np.divmod(flat, self.num_records)
        for epoch in np.unique(epochs).tolist():
            in_epoch = np.flatnonzero(epochs == epoch)
            _, firsts, _ = self._layout(epoch)
            windows = np.searchsorted(firsts, q[in_epoch], side="right") - 1
            for window in np.unique(windows).tolist():
                at = in_epoch[windows == window]
                out[at] = self.window_records(epoch, window, q[at] - firsts[window])
        return out.reshape(pos.shape)


def span_counts(source: object) -> list[int]:
    """The records of each span of `source`, in order: `Records.spans`' counts, or those of
    its ``records`` attribute (a source built on `Records`)."""
    for candidate in (source, getattr(source, "records", None)):
        spans = getattr(candidate, "spans", None)
        if spans is not None:
            return [int(span.count) for span in spans]
    raise TypeError(
        f"{type(source).__name__}: not a dataset's records (no `spans`, no `records.spans`): "
        "pass its span counts"
    )


__all__ = ["GlobalIndex", "index_shuffle", "order_key", "siphash24", "span_counts"]
