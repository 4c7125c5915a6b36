"""Split slicing: a part of the recorded splits, spelled as TFDS and Hugging Face users spell it.

``split="train[:10%]"``, ``"train[1000:2000]"``, ``"train[-10%:]"``, ``"train[:50%]+eval"``: the
spellings of `tfds.Split` / ``tfds.core.ReadInstruction.from_spec`` (and of Hugging Face
datasets, which took them from TFDS). A spelling is one or more parts joined by ``+`` (spaces
around it allowed); a list of spellings is their concatenation, as a list of split names is
today. A part is

- ``name``: every record of the split;
- ``name[a:b]``: records ``a`` to ``b`` (``b`` excluded) of the split, counted in its recorded
  order (the manifest's shard order, records in file order); ``a`` / ``b`` absolute integers,
  negative ones counted from the end, either left out (``[:b]``, ``[a:]``);
- ``name[a%:b%]``: the same in percent of the split's records (``[:10%]``, ``[-10%:]``,
  ``[10%:20%]``, ``[:33.5%]``), each bound rounded to the closest record as TFDS's default
  ``rounding="closest"`` does: ``int(round(p * n / 100))`` (Python's round: halves to even);
- ``name[a shard:b shard]`` written ``name[1shard:3shard]``, and ``name[2shard]``: whole shards
  of the split by index in the manifest's order (TFDS's ``shard`` unit).

Each part's records are resolved as TFDS's ``_rel_to_abs_instr`` does: a bound past the split's
size (``abs(bound) > n``) or a percent past 100 is an error, a negative bound counts from the
end, and ``a >= b`` selects nothing. Refused, each with one `SplitSliceError` naming the
spelling: anything not of this grammar, a step (``[::2]``), ``[:]``, a single index other than a
shard's (``[5]``), bounds in two units (``[10:50%]``: TFDS reads it as percent), and a spelling
with a slice that selects no record at all (TFDS's "corresponds to no data"). An unknown split
name is an `UnknownSplitError` listing the available ones, as before slicing.

Differences from TFDS, kept on purpose: ``all`` is no union of every split here (a run without
``--splits`` has one split named ``all``; ``split=None`` reads every split); a part given twice
(``train+train``, ``["eval", "eval"]``) is read once, as a repeated split name always was, and
two parts that select some of the same records (``train+train[:10%]``) are refused rather than
read twice.

No TensorFlow here: `split_spans` works on a `DatasetInfo` (the manifest) alone.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from replay.errors import SplitSliceError, UnknownSplitError
from replay.info import DatasetInfo, ShardInfo

UNITS = ("abs", "%", "shard")
_PLUS = re.compile(r"\s*\+\s*")
_PART = re.compile(r"(?P<name>[^\[\]]*)\[(?P<selector>[^\[\]]*)\]")
_NUMBER = r"-?\d+(?:_\d+)*"
_BOUND = re.compile(rf"(?P<value>{_NUMBER}(?:\.\d+)?)(?P<unit>%|shard)?")
_SLICE_CHARACTERS = frozenset("[]+")


@dataclasses.dataclass(frozen=True)
class SplitSlice:
    """One part of a split spelling: records ``[start, stop)`` of `split` in `unit`, as written.

    Attributes:
      split: the split name.
      start: the first bound as written (None: the split's start); negative: from the end.
      stop: the second bound as written (None: the split's end); negative: from the end.
      unit: "abs" (records), "%" (percent of the split's records) or "shard" (shards).
      text: the part as written (``train[:10%]``).
    """

    split: str
    start: int | float | None = None
    stop: int | float | None = None
    unit: str = "abs"
    text: str = ""

    @property
    def whole(self) -> bool:
        """No bounds: every record of the split."""
        return self.start is None and self.stop is None


@dataclasses.dataclass(frozen=True)
class ShardSpan:
    """A run of one shard's records: records [first, first + count) of `shard`."""

    shard: ShardInfo
    first: int
    count: int

    @property
    def whole(self) -> bool:
        """The span is every record of its shard."""
        return self.first == 0 and self.count == self.shard.num_examples


def is_sliced(split: str | Sequence[str] | None) -> bool:
    """Whether `split` is more than split names: a spelling with a ``[...]`` or a ``+``."""
    if split is None:
        return False
    texts = [split] if isinstance(split, str) else list(split)
    return any(_SLICE_CHARACTERS & set(text) for text in texts if isinstance(text, str))


def parse_split(text: str) -> tuple[SplitSlice, ...]:
    """The parts of one split spelling (module docstring), in order; split names unchecked.

    Raises:
      SplitSliceError: not a spelling of the grammar (names it and says why).
      TypeError: `text` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"split must be a split name or spelling (str), not {type(text).__name__}")
    parts = _PLUS.split(text)
    if len(parts) > 1 and not all(parts):
        raise _bad(text, text, "a '+' needs a split on either side")
    return tuple(_parse_part(part, text) for part in parts)


def _parse_part(part: str, text: str) -> SplitSlice:
    """One ``+`` part of `text`."""
    if not _SLICE_CHARACTERS & set(part):  # a split name (checked against the manifest later)
        return SplitSlice(split=part, text=part)
    m = _PART.fullmatch(part)
    if not m or not m["name"]:
        raise _bad(text, part, "is neither a split name nor name[start:stop]")
    name, selector = m["name"], m["selector"]
    bounds = selector.split(":")
    if len(bounds) > 2:
        raise _bad(text, part, "a step is not supported (name[start:stop] only)")
    parsed = [_parse_bound(b.strip(), part, text) if b.strip() else None for b in bounds]
    units = sorted({bound[1] for bound in parsed if bound is not None})
    if len(units) > 1:
        raise _bad(text, part, f"its bounds are in different units ({', '.join(units)})")
    unit = units[0] if units else "abs"
    values = [None if bound is None else bound[0] for bound in parsed]
    if len(values) == 1:  # name[k]: TFDS takes a single index only as a shard's
        if unit != "shard" or values[0] is None:
            raise _bad(text, part, "a single index is only a shard's (name[2shard])")
        k = int(values[0])
        return SplitSlice(name, k, None if k == -1 else k + 1, unit, part)
    start, stop = values
    if start is None and stop is None:
        raise _bad(text, part, "a slice needs a start or a stop (or no brackets)")
    if unit == "%" and any(v is not None and abs(v) > 100 for v in values):
        raise _bad(text, part, "a percent bound is between -100% and 100%")
    return SplitSlice(name, start, stop, unit, part)


def _parse_bound(bound: str, part: str, text: str) -> tuple[int | float, str]:
    """A bound's value and unit ("abs" without one)."""
    m = _BOUND.fullmatch(bound)
    if not m:
        raise _bad(text, part, f"bound {bound!r} is not an integer, a percent or a shard")
    unit = m["unit"] or "abs"
    if unit == "%":
        value = float(m["value"])
        return (int(value) if value.is_integer() else value), unit
    if "." in m["value"]:
        raise _bad(text, part, f"bound {bound!r}: only a percent may have a fraction")
    return int(m["value"]), unit


def _bad(spelling: str | list[str], part: str, why: str) -> SplitSliceError:
    """The error of a bad `spelling` (a spelling, or the list of them `split` was) whose `part`
    is bad (named when it is not the whole spelling)."""
    where = "" if part == spelling else f"{part!r}: "
    return SplitSliceError(f"split {spelling!r}: {where}{why}")


@dataclasses.dataclass(frozen=True)
class RecordRange:
    """Records ``[start, stop)`` of `split` in its recorded order (absolute, resolved)."""

    split: str
    start: int
    stop: int

    @property
    def count(self) -> int:
        return max(0, self.stop - self.start)


def split_ranges(info: DatasetInfo, split: str | Sequence[str] | None) -> list[RecordRange]:
    """The record ranges `split` names, in its order (None: every split, in manifest order).

    A part given twice is read once (the first time); ranges of one split that overlap are
    refused.

    Raises:
      UnknownSplitError: a split name the manifest does not have (lists the available ones);
        an empty list.
      SplitSliceError: a bad spelling, a bound out of range, overlapping parts, or a spelling
        with a slice that selects no record.
    """
    if split is None:
        return [RecordRange(name, 0, info.num_examples(name)) for name in info.splits]
    texts = [split] if isinstance(split, str) else list(split)
    parts = [(text, part) for text in texts for part in parse_split(text)]
    unknown = list(dict.fromkeys(p.split for _, p in parts if p.split not in info.shards))
    if unknown or not parts:
        where = "".join(f" in {text!r}" for text in texts if is_sliced(text))
        raise UnknownSplitError(
            f"{info.path}: unknown split(s) {unknown or texts!r}{where}; "
            f"available splits: {list(info.splits)}"
        )
    spelling = split if isinstance(split, str) else texts
    ranges: list[RecordRange] = []
    for text, part in parts:
        resolved = _resolve(info, part, text)
        if resolved in ranges:
            continue
        for other in ranges:
            if other.split == resolved.split and _overlap(other, resolved):
                raise _bad(
                    spelling,
                    part.text,
                    f"selects records [{resolved.start}:{resolved.stop}] of {part.split!r}, "
                    f"some of them already selected ([{other.start}:{other.stop}])",
                )
        ranges.append(resolved)
    if any(not part.whole for _, part in parts) and not sum(r.count for r in ranges):
        raise _bad(
            spelling,
            spelling,
            "selects no record (" + ", ".join(_sizes(info, parts)) + ")",
        )
    return ranges


def _overlap(a: RecordRange, b: RecordRange) -> bool:
    return bool(a.count and b.count and a.start < b.stop and b.start < a.stop)


def _sizes(info: DatasetInfo, parts: Sequence[tuple[str, SplitSlice]]) -> list[str]:
    names = dict.fromkeys(part.split for _, part in parts)
    return [f"{name!r} holds {info.num_examples(name)}" for name in names]


def _resolve(info: DatasetInfo, part: SplitSlice, text: str) -> RecordRange:
    """`part`'s absolute records, as TFDS's ``_rel_to_abs_instr`` with rounding "closest"."""
    n = info.num_examples(part.split)
    start, stop = part.start, part.stop
    if part.unit == "%":
        start = 0 if start is None else int(round(start * n / 100.0))
        stop = n if stop is None else int(round(stop * n / 100.0))
    elif part.unit == "shard":
        lengths = [shard.num_examples for shard in info.shards[part.split]]
        start, stop = _shard_bounds(lengths, start, stop, part, text)
    else:
        start = 0 if start is None else start
        stop = n if stop is None else stop
    if abs(start) > n or abs(stop) > n:
        raise _bad(
            text,
            part.text,
            f"records [{part.start if part.start is not None else ''}:"
            f"{part.stop if part.stop is not None else ''}] are out of range: split "
            f"{part.split!r} holds {n}",
        )
    start = n + start if start < 0 else start
    stop = n + stop if stop < 0 else stop
    return RecordRange(part.split, start, stop)


def _shard_bounds(
    lengths: Sequence[int], start: int | None, stop: int | None, part: SplitSlice, text: str
) -> tuple[int, int]:
    """Shard bounds as record bounds: the records of shards ``[start, stop)``."""
    num = len(lengths)
    for bound, past in ((start, num - 1), (stop, num)):
        if bound is not None and not -num <= bound <= past:
            raise _bad(
                text,
                part.text,
                f"shard {bound} is out of range: split {part.split!r} has {num} shard(s)",
            )
    first = 0 if start is None else (start + num if start < 0 else start)
    last = num if stop is None else (stop + num if stop < 0 else stop)
    return sum(lengths[:first]), sum(lengths[: max(first, last)])


def split_spans(info: DatasetInfo, split: str | Sequence[str] | None) -> list[ShardSpan]:
    """The records `split` names, in recorded order (split order as given, then manifest shard
    order, records in file order), as spans of shards; whole shards for plain names; no
    zero-count spans.

    Raises:
      UnknownSplitError, SplitSliceError: as `split_ranges`.
    """
    return [span for r in split_ranges(info, split) for span in range_spans(info, r)]


def range_spans(info: DatasetInfo, records: RecordRange) -> list[ShardSpan]:
    """The spans of shards that hold `records`, in order (no zero-count spans)."""
    spans, offset = [], 0
    for shard in info.shards[records.split]:
        first = max(records.start - offset, 0)
        stop = min(records.stop - offset, shard.num_examples)
        if stop > first:
            spans.append(ShardSpan(shard, first, stop - first))
        offset += shard.num_examples
    return spans


def read_spans(info: DatasetInfo, split: str | Sequence[str] | None) -> list[ShardSpan]:
    """What a reader reads for `split`: every shard of its splits, whole and in manifest order
    (an empty shard too: its record count is checked) when `split` is split names or None, as
    before slicing; `split_spans` of a spelling with a slice or a ``+``."""
    if is_sliced(split):
        return split_spans(info, split)
    return [ShardSpan(shard, 0, shard.num_examples) for shard in info.shard_list(split)]


def span_shards(spans: Sequence[ShardSpan]) -> list[ShardInfo]:
    """Each shard `spans` read from, once, in order (what a reader stats first)."""
    return list(dict.fromkeys(span.shard for span in spans))


def num_examples(info: DatasetInfo, split: str | Sequence[str] | None = None) -> int:
    """Records `split` (names or a spelling with slices; None: every split) selects."""
    return sum(r.count for r in split_ranges(info, split))
