"""The protobuf wire format of a serialized ``tf.train.Example``, read without protobuf or
TensorFlow: `example_features`, {key: (kind, values)} of the keys asked for (the kinds `BYTES`,
`FLOATS`, `INTS`, a ``Feature``'s oneof field numbers), and `ExampleError`, what a record that
is no such Example raises. `replay.example_decoder` turns the values into arrays.

Every loop reads a one-byte varint inline (tags and short lengths) and calls `_varint` for
longer ones; a length that overruns its message is refused where it is read, and a read past
the end of the record (an IndexError) becomes `ExampleError` in `example_features`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import numpy as np

_FLOAT = struct.Struct("<f")


_INT64_MASK = (1 << 64) - 1


_INT64_SIGN = 1 << 63


class ExampleError(ValueError):
    """A serialized record that is not the Example its specs describe (`decode_example`);
    `key` names the key at fault (None: the Example's structure itself)."""

    def __init__(self, reason: str, key: str | None = None):
        super().__init__(f"key {key!r}: {reason}" if key is not None else reason)
        self.key = key


BYTES, FLOATS, INTS = 1, 2, 3  # Feature's oneof field numbers: bytes_list, float_list, ...


KIND_NAMES = {
    0: "no value",
    BYTES: "a bytes_list",
    FLOATS: "a float_list",
    INTS: "an int64_list",
}


_LEN1 = 0x0A  # field 1, wire type 2 (length-delimited): the tag of every field read here


_LEN2 = 0x12  # field 2, wire type 2: a map entry's value


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` of `buf` (as uint64) and the position after it."""
    result, shift = 0, 0
    while shift < 70:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & _INT64_MASK, pos
        shift += 7
    raise ExampleError(f"a varint longer than 10 bytes at byte {pos - 10}")


def _skip(buf: bytes, pos: int, end: int) -> int:
    """The position after the unknown field whose tag is at `pos` (within `end`)."""
    tag, pos = _varint(buf, pos)
    wire = tag & 7
    if tag >> 3 == 0:
        raise ExampleError(f"field number 0 at byte {pos}")
    if wire == 0:
        pos = _varint(buf, pos)[1]
    elif wire == 2:
        n, pos = _varint(buf, pos)
        pos += n
    elif wire == 1 or wire == 5:
        pos += 8 if wire == 1 else 4
    else:
        raise ExampleError(f"wire type {wire} at byte {pos} (no Example field has it)")
    if pos > end:
        raise ExampleError(f"a field overruns its message (ends at byte {pos}, not {end})")
    return pos


def example_features(data: bytes | memoryview, wanted: Mapping[bytes, str]) -> tuple[bytes, dict]:
    """The record's bytes and {key: (kind, values)} of the features of the Example `data`
    whose key is in `wanted` (encoded key -> key), the last entry of a key winning, as
    protobuf's maps; other keys are skipped unparsed, as TensorFlow's parser skips them."""
    buf = data if isinstance(data, bytes) else bytes(data)
    try:
        return buf, _example(buf, wanted)
    except IndexError:
        raise ExampleError("truncated: a field runs past the record's end") from None


def _example(buf: bytes, wanted: Mapping[bytes, str]) -> dict[str, tuple]:
    end = len(buf)
    out: dict[str, tuple] = {}
    pos = 0
    while pos < end:  # Example: 1 features (Features), given once or merged
        if buf[pos] != _LEN1:
            pos = _skip(buf, pos, end)
            continue
        n = buf[pos + 1]
        pos += 2
        if n >= 0x80:
            n, pos = _varint(buf, pos - 1)
        stop = pos + n
        if stop > end:
            raise ExampleError(f"Features of {n} bytes at byte {pos} overrun the record")
        while pos < stop:  # Features: 1 feature (a map entry, repeated)
            if buf[pos] != _LEN1:
                pos = _skip(buf, pos, stop)
                continue
            n = buf[pos + 1]
            pos += 2
            if n >= 0x80:
                n, pos = _varint(buf, pos - 1)
            entry_end = pos + n
            if entry_end > stop:
                raise ExampleError(f"a feature of {n} bytes at byte {pos} overruns Features")
            if buf[pos] == _LEN1 and buf[pos + 1] < 0x80:  # the writers' entry: key, value
                key_end = pos + 2 + buf[pos + 1]
                if key_end < entry_end and buf[key_end] == _LEN2:
                    n = buf[key_end + 1]
                    value = key_end + 2
                    if n >= 0x80:
                        n, value = _varint(buf, key_end + 1)
                    if value + n == entry_end:
                        name = wanted.get(buf[pos + 2 : key_end])
                        if name is not None:
                            out[name] = _one_list(buf, value, entry_end) or _feature(
                                buf, [(value, entry_end)], name
                            )
                        pos = entry_end
                        continue
            key, parts = _map_entry(buf, pos, entry_end)  # any other layout
            pos = entry_end
            name = wanted.get(key)
            if name is not None:
                out[name] = _feature(buf, parts, name)
    return out


def _one_list(buf: bytes, pos: int, end: int) -> tuple[int, list] | None:
    """(kind, values) of the Feature ``buf[pos:end]`` when it is as the writers write it, one
    list holding one field of values (one bytes value, or packed numbers) and nothing else;
    None for any other layout (then `_feature` reads it)."""
    tag = buf[pos]
    if tag != 0x0A and tag != 0x12 and tag != 0x1A:
        return None
    n = buf[pos + 1]
    pos += 2
    if n >= 0x80:
        n, pos = _varint(buf, pos - 1)
    if pos + n != end or n == 0 or buf[pos] != _LEN1:
        return None
    n = buf[pos + 1]
    pos += 2
    if n >= 0x80:
        n, pos = _varint(buf, pos - 1)
    if pos + n != end:
        return None
    if tag == 0x0A:
        return BYTES, [(pos, end)]
    if tag == 0x12:
        return (FLOATS, [np.frombuffer(buf, "<f4", n // 4, pos)]) if n % 4 == 0 else None
    values = []
    while pos < end:
        value = buf[pos]
        if value < 0x80:
            pos += 1
        else:
            value, pos = _varint(buf, pos)
            value -= (value & _INT64_SIGN) << 1
        values.append(value)
    return (INTS, values) if pos == end else None


def _map_entry(buf: bytes, pos: int, end: int) -> tuple[bytes, list[tuple[int, int]]]:
    """(key, the (start, end) of each part of its Feature) of a map entry: a missing key is
    empty, a value given more than once is merged (protobuf's rule for embedded messages)."""
    key, parts = b"", []
    while pos < end:
        tag = buf[pos]
        if tag != _LEN1 and tag != _LEN2:
            pos = _skip(buf, pos, end)
            continue
        n = buf[pos + 1]
        pos += 2
        if n >= 0x80:
            n, pos = _varint(buf, pos - 1)
        if pos + n > end:
            raise ExampleError(f"a field of {n} bytes at byte {pos} overruns its map entry")
        if tag == _LEN1:
            key = buf[pos : pos + n]
        else:
            parts.append((pos, pos + n))
        pos += n
    return key, parts


def _feature(buf: bytes, parts: list[tuple[int, int]], key: str) -> tuple[int, list]:
    """(kind, values) of the Feature given in `parts` (read as their concatenation): the
    (start, end) of each bytes value, float32 arrays, or ints. The last kind set wins (a
    oneof); one kind given twice is merged (its values concatenated)."""
    kind, values = 0, []
    try:
        for pos, end in parts:
            while pos < end:
                tag = buf[pos]
                field = tag >> 3
                if tag & 7 != 2 or field not in (BYTES, FLOATS, INTS):
                    pos = _skip(buf, pos, end)
                    continue
                n = buf[pos + 1]
                pos += 2
                if n >= 0x80:
                    n, pos = _varint(buf, pos - 1)
                stop = pos + n
                if stop > end:
                    raise ExampleError(f"a list of {n} bytes at byte {pos} overruns its Feature")
                if field != kind:
                    kind, values = field, []
                if field == BYTES:
                    _bytes_list(buf, pos, stop, values)
                elif field == FLOATS:
                    _float_list(buf, pos, stop, values)
                else:
                    _int64_list(buf, pos, stop, values)
                pos = stop
    except ExampleError as e:
        raise ExampleError(str(e), key) from None
    except IndexError:
        raise ExampleError("truncated: a field runs past the record's end", key) from None
    return kind, values


def _bytes_list(buf: bytes, pos: int, end: int, out: list) -> None:
    while pos < end:
        if buf[pos] != _LEN1:  # BytesList: 1 value (bytes, repeated)
            pos = _skip(buf, pos, end)
            continue
        n = buf[pos + 1]
        pos += 2
        if n >= 0x80:
            n, pos = _varint(buf, pos - 1)
        if pos + n > end:
            raise ExampleError(f"a bytes value of {n} bytes at byte {pos} overruns its list")
        out.append((pos, pos + n))
        pos += n


def _float_list(buf: bytes, pos: int, end: int, out: list) -> None:
    while pos < end:  # FloatList: 1 value (float, repeated: packed or not)
        tag = buf[pos]
        if tag == _LEN1:
            n = buf[pos + 1]
            pos += 2
            if n >= 0x80:
                n, pos = _varint(buf, pos - 1)
            if pos + n > end or n % 4:
                raise ExampleError(f"packed floats of {n} bytes at byte {pos}")
            out.append(np.frombuffer(buf, "<f4", n // 4, pos))
            pos += n
        elif tag == 0x0D:  # field 1, wire type 5: one float
            if pos + 5 > end:
                raise ExampleError(f"a float at byte {pos} overruns its list")
            out.append(np.array(_FLOAT.unpack_from(buf, pos + 1), "<f4"))
            pos += 5
        else:
            pos = _skip(buf, pos, end)


def _int64_list(buf: bytes, pos: int, end: int, out: list) -> None:
    while pos < end:  # Int64List: 1 value (int64, repeated: packed or not)
        tag = buf[pos]
        if tag == _LEN1:
            n = buf[pos + 1]
            pos += 2
            if n >= 0x80:
                n, pos = _varint(buf, pos - 1)
            stop = pos + n
            if stop > end:
                raise ExampleError(f"packed ints of {n} bytes at byte {pos} overrun their list")
            while pos < stop:
                value, pos = _varint(buf, pos)
                out.append(value - ((value & _INT64_SIGN) << 1))
            if pos != stop:
                raise ExampleError(f"a varint crosses the end of its packed ints at byte {stop}")
        elif tag == 0x08:  # field 1, wire type 0: one int
            value, pos = _varint(buf, pos + 1)
            if pos > end:
                raise ExampleError(f"an int at byte {pos} overruns its list")
            out.append(value - ((value & _INT64_SIGN) << 1))
        else:
            pos = _skip(buf, pos, end)
