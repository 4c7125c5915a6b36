"""Tests of `replay.slicing`: TFDS's split spellings resolved to spans of shards, on a
`DatasetInfo` built from `ShardInfo`s directly (no file is read, no TensorFlow imported).

Reading the spans back with `replay_dataset`: tests/pipeline/test_reader_slicing.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType

import pytest

from replay.errors import SplitSliceError, UnknownSplitError
from replay.info import DatasetInfo, ShardInfo
from replay.slicing import (
    ShardSpan,
    SplitSlice,
    is_sliced,
    num_examples,
    parse_split,
    read_spans,
    split_spans,
)

ROOT = Path(__file__).resolve().parents[2]
# train: 21 records in 5 shards (one empty); eval: 6 in 2; small: 10 in 1.
COUNTS = {"train": (5, 7, 0, 3, 6), "eval": (2, 4), "small": (10,)}


def _info(counts: dict[str, tuple[int, ...]] = COUNTS) -> DatasetInfo:
    shards = {
        split: tuple(
            ShardInfo(
                split=split,
                filename=f"{split}-{i}",
                path=f"/data/{split}-{i}",
                num_examples=n,
                num_bytes=100 * n,
            )
            for i, n in enumerate(lengths)
        )
        for split, lengths in counts.items()
    }
    return DatasetInfo(
        path="/data",
        name="audiorecords",
        format_version=5,
        version=1,
        created_utc="",
        compression="NONE",
        elements=MappingProxyType({}),
        classes=(),
        splits=tuple(counts),
        shards=MappingProxyType(shards),
        commits=(),
        params=MappingProxyType({}),
        versions=MappingProxyType({}),
        manifest=MappingProxyType({}),
        sources=None,
    )


INFO = _info()


def _records(split: str) -> list[tuple[str, int]]:
    """Every record of `split` in recorded order: (shard file, record in it)."""
    return [(s.filename, i) for s in INFO.shards[split] for i in range(s.num_examples)]


def _read(spans: list[ShardSpan]) -> list[tuple[str, int]]:
    return [(s.shard.filename, i) for s in spans for i in range(s.first, s.first + s.count)]


@pytest.mark.parametrize(
    "spelling,split,start,stop",
    [
        ("train[:10%]", "train", 0, 2),  # round(2.1)
        ("train[1:20]", "train", 1, 20),
        ("train[4:13]", "train", 4, 13),  # across the empty shard
        ("train[-10%:]", "train", 19, 21),  # round(-2.1) = -2
        ("train[10%:20%]", "train", 2, 4),  # round(2.1), round(4.2)
        ("train[-5:-1]", "train", 16, 20),
        ("train[12:]", "train", 12, 21),
        ("train[:-20]", "train", 0, 1),
        ("train[0:21]", "train", 0, 21),
        ("train[-100%:100%]", "train", 0, 21),
        ("train[:33.5%]", "train", 0, 7),  # round(7.035)
        ("train[1_0:1_2]", "train", 10, 12),  # Python's (and TFDS's) digit separators
        ("train[ 3 : 9 ]", "train", 3, 9),
        ("eval[50%:]", "eval", 3, 6),
        ("small[:25%]", "small", 0, 2),  # round(2.5) = 2: halves to even, as TFDS
        ("small[:35%]", "small", 0, 4),  # round(3.5) = 4
        ("small[15%:]", "small", 2, 10),  # round(1.5) = 2
        ("small[-25%:]", "small", 8, 10),  # round(-2.5) = -2
        ("train[1shard:3shard]", "train", 5, 12),  # shards 1 and 2 (empty)
        ("train[-1shard]", "train", 15, 21),
        ("train[3shard]", "train", 12, 15),
        ("train[:2shard]", "train", 0, 12),
        ("train[-2shard:]", "train", 12, 21),
    ],
)
def test_a_slice_is_the_same_slice_of_the_records_in_recorded_order(spelling, split, start, stop):
    """The spans' records are exactly ``records[start:stop]`` of the split, in order, as
    whole-or-partial runs of its shards without zero-count spans (the bounds are TFDS's:
    ``int(round(p * n / 100))`` for percents)."""
    spans = split_spans(INFO, spelling)
    assert _read(spans) == _records(split)[start:stop]
    assert all(s.count > 0 for s in spans)
    assert len({s.shard.filename for s in spans}) == len(spans)  # one run per shard
    assert num_examples(INFO, spelling) == stop - start


def test_plain_names_are_whole_shards_in_the_order_given():
    spans = split_spans(INFO, ["eval", "train"])
    assert [(s.shard.filename, s.first, s.count) for s in spans] == [
        ("eval-0", 0, 2),
        ("eval-1", 0, 4),
        ("train-0", 0, 5),
        ("train-1", 0, 7),
        ("train-3", 0, 3),  # the empty shard has no span
        ("train-4", 0, 6),
    ]
    assert all(s.whole for s in spans)
    assert _read(split_spans(INFO, None)) == _records("train") + _records("eval") + _records(
        "small"
    )
    assert _read(split_spans(INFO, "eval")) == _records("eval")


def test_read_spans_of_plain_names_are_every_shard_as_before_slicing():
    """What replay_dataset reads for names: each shard whole, the empty one too (its count is
    checked); for a slice, `split_spans`."""
    spans = read_spans(INFO, "train")
    assert [s.shard for s in spans] == INFO.shard_list("train")
    assert [(s.first, s.count) for s in spans] == [(0, 5), (0, 7), (0, 0), (0, 3), (0, 6)]
    assert read_spans(INFO, None) == [ShardSpan(s, 0, s.num_examples) for s in INFO.shard_list()]
    assert read_spans(INFO, "train[1:3]") == split_spans(INFO, "train[1:3]")


def test_plus_and_lists_concatenate_in_the_order_given():
    eval_then_train = _records("eval")[3:] + _records("train")[:2]
    assert _read(split_spans(INFO, "eval[50%:]+train[:10%]")) == eval_then_train
    assert _read(split_spans(INFO, "eval[50%:] + train[:10%]")) == eval_then_train
    assert _read(split_spans(INFO, ["eval[50%:]", "train[:10%]"])) == eval_then_train
    assert _read(split_spans(INFO, "train[:50%]+eval")) == _records("train")[:10] + _records("eval")
    # disjoint slices of one split, in the order written
    assert _read(split_spans(INFO, "train[-2:]+train[:2]")) == (
        _records("train")[-2:] + _records("train")[:2]
    )
    assert num_examples(INFO, "train[:50%]+eval") == 16


def test_a_part_given_twice_is_read_once_as_a_repeated_name_always_was():
    assert split_spans(INFO, ["eval", "eval"]) == split_spans(INFO, "eval")
    assert split_spans(INFO, "eval+eval") == split_spans(INFO, "eval")
    assert split_spans(INFO, "train[:3]+train[0:3]") == split_spans(INFO, "train[:3]")


def test_an_empty_part_is_allowed_when_the_whole_selects_records():
    assert _read(split_spans(INFO, "train[5:5]+eval")) == _records("eval")
    assert _read(split_spans(INFO, "train[9:4]+eval")) == _records("eval")  # reversed: empty


def test_an_empty_plain_split_is_still_an_empty_read():
    info = _info({"train": (3,), "none": (0, 0)})
    assert split_spans(info, "none") == []
    assert [s.count for s in read_spans(info, "none")] == [0, 0]
    assert num_examples(info, "none") == 0


@pytest.mark.parametrize(
    "spelling,message",
    [
        ("train[::2]", r"split 'train\[::2\]': a step is not supported"),
        ("train[1:9:2]", "a step is not supported"),
        ("train[:]", "needs a start or a stop"),
        ("train[5]", "a single index is only a shard's"),
        ("train[10:50%]", r"bounds are in different units \(%, abs\)"),
        ("train[1shard:5]", "different units"),
        ("train[x:]", "bound 'x' is not an integer, a percent or a shard"),
        ("train[:1.5]", "only a percent may have a fraction"),
        ("train[:101%]", "between -100% and 100%"),
        ("train[-100.5%:]", "between -100% and 100%"),
        ("train[:22]", r"records \[:22\] are out of range: split 'train' holds 21"),
        ("train[-22:]", "out of range"),
        ("train[5shard]", "shard 5 is out of range: split 'train' has 5 shard"),
        ("train[:6shard]", "shard 6 is out of range"),
        ("train[-6shard:]", "shard -6 is out of range"),
        ("train[:0]", r"split 'train\[:0\]': selects no record \('train' holds 21\)"),
        ("train[5:5]", "selects no record"),
        ("train[:0%]+eval[:0]", r"selects no record \('train' holds 21, 'eval' holds 6\)"),
        ("train[2shard]", "selects no record"),  # the empty shard
        ("train[3]+eval", r"split 'train\[3\]\+eval': 'train\[3\]': a single index"),
        ("train+", "a '\\+' needs a split on either side"),
        ("+train", "needs a split on either side"),
        ("train[:3", r"split 'train\[:3': is neither a split name nor name\[start:stop\]"),
        ("train[:3]]", "is neither a split name"),
        ("[:3]", "is neither a split name"),
        ("train[:3]x", "is neither a split name"),
        ("train+train[:3]", r"'train\[:3\]': selects records \[0:3\] of 'train', some of them"),
        ("train[:10]+train[5:15]", r"already selected \(\[0:10\]\)"),
    ],
)
def test_a_bad_slice_is_one_clear_error_naming_the_spelling(spelling, message):
    with pytest.raises(SplitSliceError, match=message) as e:
        split_spans(INFO, spelling)
    assert repr(spelling) in str(e.value)
    assert isinstance(e.value, UnknownSplitError) and isinstance(e.value, ValueError)


def test_a_bad_slice_in_a_list_names_the_list():
    with pytest.raises(SplitSliceError, match=r"split \['eval\[:0\]', 'train\[:0\]'\]: selects no"):
        split_spans(INFO, ["eval[:0]", "train[:0]"])


@pytest.mark.parametrize(
    "spelling,unknown",
    [
        ("test[:10%]", "['test'] in 'test[:10%]'"),
        ("train[:5]+test", "['test'] in 'train[:5]+test'"),
        ("tr-ain[1:2]", "['tr-ain'] in 'tr-ain[1:2]'"),
        ("all[:5]", "['all'] in 'all[:5]'"),  # no union of every split (module docstring)
    ],
)
def test_an_unknown_split_in_a_slice_lists_the_available_ones(spelling, unknown):
    available = r"; available splits: \['train', 'eval', 'small'\]"
    with pytest.raises(UnknownSplitError, match=re.escape(f"unknown split(s) {unknown}")):
        split_spans(INFO, spelling)
    with pytest.raises(UnknownSplitError, match=available):
        split_spans(INFO, spelling)


def test_unknown_plain_names_give_the_message_they_always_gave():
    expected = str(_raised(lambda: INFO.shard_list(["eval", "test"])))
    assert str(_raised(lambda: split_spans(INFO, ["eval", "test"]))) == expected
    assert "unknown split(s) ['test']; available splits:" in expected
    with pytest.raises(UnknownSplitError, match=r"unknown split\(s\) \[\]"):
        split_spans(INFO, [])


def _raised(call) -> Exception:
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the test compares the messages
        return e
    raise AssertionError("no error")


def test_shard_list_of_a_slice_points_to_slicing():
    with pytest.raises(UnknownSplitError, match=r"'train\[:10%\]'.*resolved by replay.slicing"):
        INFO.shard_list("train[:10%]")


def test_parse_split_spells_each_part():
    assert parse_split("train[:10%]+eval[-5:]+small+train[2shard]") == (
        SplitSlice("train", None, 10, "%", "train[:10%]"),
        SplitSlice("eval", -5, None, "abs", "eval[-5:]"),
        SplitSlice("small", None, None, "abs", "small"),
        SplitSlice("train", 2, 3, "shard", "train[2shard]"),
    )
    assert parse_split("train[:33.5%]")[0].stop == 33.5
    assert parse_split("train[-1shard]")[0] == SplitSlice(
        "train", -1, None, "shard", "train[-1shard]"
    )
    with pytest.raises(TypeError, match="not int"):
        parse_split(3)


def test_is_sliced_only_for_brackets_or_plus():
    assert not is_sliced(None)
    assert not is_sliced("train")
    assert not is_sliced(["train", "eval"])
    assert is_sliced("train[:10%]")
    assert is_sliced("train+eval")
    assert is_sliced(["eval", "train[1:]"])


def test_slicing_imports_no_tensorflow():
    code = "import replay.slicing, sys; print('tensorflow' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True
    )
    assert out.stdout.strip() == "False"
