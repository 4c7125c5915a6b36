"""Tests of sliced splits in `replay_dataset` (``split="train[:10%]"``, ``"train[3:17]+eval"``,
`replay.slicing`): each read equals the same slice of the ordered read of the whole splits,
element by element, for the default reader, a shuffle, a `reader_func` and `input_context`
shares; on the hand-made dataset `splits` (tests/pipeline/conftest.py: format version 5, GZIP,
train 5+7+3+6 records, eval 2+4; a shard only partly in a slice is read from its first record's
byte offset) and the same dataset in format version 3 (no record offsets: the records before a
span are skipped). The spellings themselves: tests/unit/test_slicing.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import replay
from replay import format as fmt
from replay import load_info, replay_dataset
from replay.errors import SplitSliceError
from replay.slicing import split_spans
from tests.support.replay_elements import collect, indices
from tests.support.replay_fixtures import write_dataset

SLICES = [  # spelling, (split, start, stop) parts of the ordered reads
    ("train[:10%]", [("train", 0, 2)]),  # round(2.1)
    ("train[3:17]", [("train", 3, 17)]),  # from inside shard 0 to inside shard 3
    ("train[-10%:]", [("train", 19, 21)]),
    ("train[6:8]", [("train", 6, 8)]),  # inside one shard
    ("train[1shard:3shard]", [("train", 5, 15)]),
    ("train[:50%]+eval", [("train", 0, 10), ("eval", 0, 6)]),  # round(10.5) = 10
    ("eval[1:]+train[-3:]", [("eval", 1, 6), ("train", 18, 21)]),
]


def _shard_after_shard(datasets):  # a reader_func: every shard in order, file order
    return datasets.flat_map(lambda shard: shard)


@pytest.fixture(scope="module")
def splits_v3(tmp_path_factory):
    """`splits` in format version 3, uncompressed: no record offsets."""
    path = str(tmp_path_factory.mktemp("splits_v3"))
    counts = {"train": (5, 7, 3, 6), "eval": (2, 4)}
    return path, write_dataset(
        path,
        num_examples_per_shard=counts,
        split_names=["train", "eval"],
        compression="NONE",
        format_version=3,
    )


_ORDERED: dict[str, dict[str, list[dict]]] = {}


def _ordered(path: str) -> dict[str, list[dict]]:
    """The ordered read of each split of the dataset at `path`: its elements in recorded
    order (a reader_func reading shard after shard), read once per module."""
    if path not in _ORDERED:
        _ORDERED[path] = {
            split: collect(replay_dataset(path, split=split, reader_func=_shard_after_shard))
            for split in ("train", "eval")
        }
    return _ORDERED[path]


@pytest.fixture(params=["splits", "splits_v3"])
def dataset(request):
    """(path, its ordered read) of `splits` (format version 5) and `splits_v3`."""
    path = request.getfixturevalue(request.param)[0]
    return path, _ordered(path)


def _expected(ordered: dict, parts: list[tuple[str, int, int]]) -> list[dict]:
    return [e for split, start, stop in parts for e in ordered[split][start:stop]]


def _key(element: dict) -> tuple:
    """An element's identity: its file, window and signal bytes."""
    return (
        int(element[fmt.INDEX_KEY]),
        int(element["win_start_idx"]),
        np.asarray(element["signal"]).tobytes(),
    )


def _assert_same_elements(got: list[dict], want: list[dict]) -> None:
    """Element by element: every key's value equal (bit for bit for the floats)."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for key in w:
            assert np.asarray(g[key]).tobytes() == np.asarray(w[key]).tobytes(), key


# Version 3 differs only where a span starts inside a shard: those slices are read from both.
_STARTING_INSIDE = ("train[3:17]", "train[6:8]", "eval[1:]+train[-3:]")


@pytest.mark.parametrize(
    "fixture,spelling,parts",
    [("splits", *s) for s in SLICES]
    + [("splits_v3", *s) for s in SLICES if s[0] in _STARTING_INSIDE],
)
def test_default_reader_reads_the_same_slice_of_the_ordered_read(request, fixture, spelling, parts):
    """The default reader (deterministic: blocks of 64 records round robin over the spans,
    each span here one block) yields the slice's elements in recorded order, with the
    slice's count as its cardinality; so does a reader_func reading shard after shard."""
    path = request.getfixturevalue(fixture)[0]
    ordered = _ordered(path)
    want = _expected(ordered, parts)
    ds = replay_dataset(path, split=spelling, deterministic=True)
    assert int(ds.cardinality()) == len(want)
    _assert_same_elements(collect(ds), want)
    ds = replay_dataset(path, split=spelling, reader_func=_shard_after_shard)
    assert int(ds.cardinality()) == len(want)
    _assert_same_elements(collect(ds), want)


@pytest.mark.parametrize("spelling,parts", SLICES[1:2])
def test_batches_of_a_slice_hold_its_elements_with_its_cardinality(dataset, spelling, parts):
    path, ordered = dataset
    want = [_key(e) for e in _expected(ordered, parts)]
    ds = replay_dataset(path, split=spelling, batch_size=4, deterministic=True)
    assert int(ds.cardinality()) == -(-len(want) // 4)
    batches = collect(ds)
    got = [_key({k: v[i] for k, v in b.items()}) for b in batches for i in range(len(b["index"]))]
    assert got == want
    ds = replay_dataset(path, split=spelling, batch_size=4, drop_remainder=True)
    assert int(ds.cardinality()) == len(want) // 4


@pytest.mark.parametrize("spelling,parts", SLICES[1:2])
@pytest.mark.parametrize("shuffle", ["buffer", "both"])
def test_a_shuffled_slice_holds_the_same_elements(dataset, spelling, parts, shuffle):
    path, ordered = dataset
    want = sorted(_key(e) for e in _expected(ordered, parts))
    kw = {
        "buffer": {"shuffle_buffer": 8},
        "shards": {"shuffle_shards": True},
        "both": {"shuffle_buffer": 8, "shuffle_shards": True},
    }[shuffle]
    ds = replay_dataset(path, split=spelling, seed=3, **kw)
    assert int(ds.cardinality()) == len(want)
    assert sorted(_key(e) for e in collect(ds)) == want


def test_reader_func_gets_one_dataset_per_span_holding_only_its_records(dataset):
    """The `Dataset.load` contract: per-shard datasets of decoded elements; a shard only partly
    in the slice gives a dataset of the slice's records of it."""
    path, ordered = dataset
    calls = []

    def reader_func(datasets):
        calls.append(datasets)
        return _shard_after_shard(datasets)

    ds = replay_dataset(path, split="train[3:17]+eval[:1]", reader_func=reader_func)
    (datasets,) = calls
    assert int(datasets.cardinality()) == 5  # train's 4 shards, eval's first
    per_shard = [[_key(e) for e in shard.as_numpy_iterator()] for shard in datasets]
    train, eval_ = ([_key(e) for e in ordered[s]] for s in ("train", "eval"))
    assert per_shard == [train[3:5], train[5:12], train[12:15], train[15:17], eval_[:1]]
    assert [_key(e) for e in collect(ds)] == train[3:17] + eval_[:1]


@pytest.mark.parametrize(
    "spelling,parts,reading",
    [
        (*SLICES[1], "default"),
        (*SLICES[1], "reader_func"),
        (*SLICES[1], "shuffle_buffer"),
        (*SLICES[5], "default"),
    ],
)
def test_input_context_shares_of_a_slice_are_disjoint_and_make_it_up(
    dataset, spelling, parts, reading
):
    """Two pipelines: spans ``id::2`` (as shard files are), each share its cardinality, their
    union the slice."""
    path, ordered = dataset
    kw = {
        "default": {"deterministic": True},
        "reader_func": {"reader_func": _shard_after_shard},
        "shuffle_buffer": {"shuffle_buffer": 8, "seed": 0},
    }[reading]
    spans = split_spans(load_info(path), spelling)
    want = [_key(e) for e in _expected(ordered, parts)]
    shares = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline)
        ds = replay_dataset(path, split=spelling, input_context=context, **kw)
        share = [_key(e) for e in collect(ds)]
        assert int(ds.cardinality()) == len(share) == sum(s.count for s in spans[pipeline::2])
        shares.append(share)
    assert sorted(shares[0] + shares[1]) == sorted(want)
    if reading != "shuffle_buffer":  # each share in recorded order: its spans one after another
        starts = np.cumsum([0] + [s.count for s in spans])
        for pipeline, share in enumerate(shares):
            mine = [want[starts[i] : starts[i + 1]] for i in range(pipeline, len(spans), 2)]
            assert share == [k for span in mine for k in span]


def test_input_context_with_fewer_spans_than_pipelines_shares_records(dataset):
    """One span, three pipelines: each keeps records ``id::3`` of it (element sharding)."""
    path, ordered = dataset
    want = [_key(e) for e in ordered["train"][6:12]]  # inside shard 1
    for pipeline in range(3):
        context = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=pipeline)
        ds = replay_dataset(path, split="train[6:12]", input_context=context, deterministic=True)
        assert int(ds.cardinality()) == 2
        assert [_key(e) for e in collect(ds)] == want[pipeline::3]


def test_a_list_of_spellings_is_their_concatenation(dataset):
    path, ordered = dataset
    want = _expected(ordered, [("eval", 4, 6), ("train", 0, 3)])
    _assert_same_elements(
        collect(replay_dataset(path, split=["eval[-2:]", "train[:3]"], deterministic=True)), want
    )


def test_balance_draws_only_from_the_slice(splits):
    path, expected = splits
    train = [int(e[fmt.INDEX_KEY]) for e in expected["elements"]["train"]]
    ds = replay_dataset(path, split="train[3:17]", balance="class", seed=0)
    drawn = set(indices(collect(ds.take(60))))
    assert drawn <= set(train[3:17])
    assert len(drawn) > 1


@pytest.mark.parametrize(
    "spelling,error,message",
    [
        ("train[::2]", SplitSliceError, r"split 'train\[::2\]': a step is not supported"),
        (
            "train[:22]",
            SplitSliceError,
            r"records \[:22\] are out of range: split 'train' holds 21",
        ),
        ("train[:0]", SplitSliceError, r"split 'train\[:0\]': selects no record"),
        ("train[10:50%]", SplitSliceError, "different units"),
        ("test[:10%]", replay.UnknownSplitError, r"\['test'\] in 'test\[:10%\]'; available splits"),
    ],
)
@pytest.mark.parametrize("kw", [{}, {"reader_func": _shard_after_shard}, {"balance": "class"}])
def test_a_bad_slice_is_one_clear_error(splits, spelling, error, message, kw):
    path, _ = splits
    with pytest.raises(error, match=message):
        replay_dataset(path, split=spelling, **kw)


def _record_offsets(path: str) -> list[int]:
    """Where each record of an uncompressed TFRecord file starts (its framing: length,
    length CRC, data, data CRC)."""
    with open(path, "rb") as f:
        data = f.read()
    offsets, at = [], 0
    while at < len(data):
        offsets.append(at)
        at += 16 + int.from_bytes(data[at : at + 8], "little")
    return offsets


def _flip_record_byte(path: str, offset: int) -> None:
    """Flips a byte of the record that starts at `offset` (its data: the CRC fails)."""
    with open(path, "r+b") as f:
        f.seek(offset + 16)  # length (8) + length CRC (4) + 4 bytes into the data
        byte = f.read(1)
        f.seek(offset + 16)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("version", [5, 3])
def test_a_span_short_of_its_count_fails_naming_the_shard_and_its_records(tmp_path, version):
    """A record inside the span that fails its CRC ends the span's read early: the count check
    names the shard and the span's records."""
    expected = write_dataset(
        tmp_path, num_examples_per_shard=(5, 70, 3), compression="NONE", format_version=version
    )
    shard = expected["shards"]["all"][1]
    _flip_record_byte(shard, _record_offsets(shard)[40])  # record 45 of the split
    ds = replay_dataset(str(tmp_path), split="all[15:65]")  # shard 1's records 10 to 60
    with pytest.raises(tf.errors.InvalidArgumentError, match="read 30 of 50") as e:
        collect(ds)
    assert f"shard {shard} (records 10 to 60) is corrupt" in e.value.message


@pytest.mark.parametrize("version", [5, 3])
def test_a_span_is_read_from_its_first_records_byte_offset(tmp_path, version):
    """Format version 4 on: a record before the span is never read (a corrupt one there does
    not fail the read), as the record offsets let the read start at the span; without them
    (version 3) the records before it are read and skipped, and the corrupt one fails it."""
    expected = write_dataset(
        tmp_path, num_examples_per_shard=(5, 70, 3), compression="NONE", format_version=version
    )
    shard = expected["shards"]["all"][1]
    _flip_record_byte(shard, _record_offsets(shard)[10])  # before the span
    ds = replay_dataset(str(tmp_path), split="all[25:45]")  # shard 1's records 20 to 40
    if version == 5:
        want = [int(e[fmt.INDEX_KEY]) for e in expected["elements"]["all"]][25:45]
        assert indices(collect(ds)) == want
    else:
        with pytest.raises(tf.errors.InvalidArgumentError, match="read 0 of 20"):
            collect(ds)
