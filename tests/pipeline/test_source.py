"""`replay.source`: the decoded elements of a dataset by number, as numpy arrays, without TF.

Hand-made datasets (`write_dataset`, uncompressed, every signal dtype and feature storage the
record job writes) are read by `open_source` and compared element for element with what
`replay_dataset` gives for the same split read in recorded order (one shard at a time): the
same keys in the same order, dtypes, shapes and values, ``<feature>_norm`` bit for bit. The
decoder itself is compared with `replay.parsing.batch_parser` (TensorFlow's
``parse_example``) on Examples of every encoding, packed and unpacked, and fuzzed with
hypothesis: any bytes either decode to the specified shapes or raise `ExampleError`. Broken
records (bytes that pass the CRC but are no Example of the manifest) are named by shard, record
and key. The source is pickled into a real ``spawn`` worker process, and a fresh interpreter
reads a dataset through it without importing TensorFlow.
"""

from __future__ import annotations

import multiprocessing
import pickle
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay import (
    CorruptShardError,
    MalformedRecordError,
    NoRandomAccessError,
    ShardSizeError,
    UnknownFeatureError,
    load_info,
    open_source,
    replay_dataset,
)
from replay import format as fmt
from replay.parsing import batch_parser
from replay.records import open_records
from replay.source import Decoder, ExampleError, Source, decode_example
from tests.support.record_helpers import TUG_WAV, record
from tests.support.replay_fixtures import NORM, append_commit, rewrite_record, write_dataset

ROOT = Path(__file__).resolve().parents[2]
COUNTS = {"train": (5, 0, 4, 3), "test": (3, 2)}  # an empty shard; train 12, test 5
# (signal dtype, feature storage, format version): every mix the record job writes
MIXES = {
    "int16-float32-v5": ("int16", "float32", 5),
    "int32-float16-v4": ("int32", "float16", 4),
    "float32-bfloat16-v5": ("float32", "bfloat16", 5),
}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, str]:
    """{mix: path} of an uncompressed two-split dataset of each of `MIXES`."""
    out = {}
    for name, (signal_dtype, feature_dtype, version) in MIXES.items():
        path = tmp_path_factory.mktemp(name)
        write_dataset(
            path,
            num_examples_per_shard=COUNTS,
            split_names=["train", "test"],
            compression="NONE",
            signal_dtype=signal_dtype,
            feature_dtype=feature_dtype,
            format_version=version,
            seed=len(out),
        )
        out[name] = str(path)
    return out


def _tf_elements(path: str, **kwargs) -> list[dict]:
    """`replay_dataset`'s elements in recorded order (one shard at a time, deterministic: without a
    seed the parse map may hand blocks on out of order), as numpy."""
    ds = replay_dataset(path, cycle_length=1, deterministic=True, **kwargs)
    return [{k: v.numpy() for k, v in element.items()} for element in ds]


def _assert_same(ours: dict, theirs: dict, specs: dict[str, fmt.ElementSpec]) -> None:
    """`ours` (a source's element) is `theirs` (tf.data's, as numpy): keys in order, dtypes,
    shapes and values, floats bit for bit (strings: a 0-d object array holding the bytes)."""
    assert list(ours) == list(theirs) == list(specs)
    for key, spec in specs.items():
        a, b = ours[key], theirs[key]
        assert isinstance(a, np.ndarray), key
        assert a.shape == tuple(spec.shape) == np.shape(b), key
        if spec.dtype == "string":
            assert a.dtype == object and isinstance(a[()], bytes) and a[()] == b, key
            continue
        assert a.dtype == np.dtype(spec.dtype) == np.asarray(b).dtype, key
        width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
        assert np.array_equal(a.view(width), np.asarray(b).view(width)), key  # bit for bit


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("split", ["train", "test", None])
def test_every_element_is_the_one_replay_dataset_gives(datasets, mix, split):
    path = datasets[mix]
    source = open_source(path, split=split)
    theirs = _tf_elements(path, split=split)
    assert len(source) == len(theirs) == {"train": 12, "test": 5, None: 17}[split]
    specs = load_info(path).elements
    for i, element in enumerate(theirs):
        _assert_same(source[i], element, specs)
    # the batched get: any order, repeats, negative indices
    indices = [3, 0, 3, -1, len(source) - 1]
    for got, i in zip(source.__getitems__(np.array(indices)), indices, strict=True):
        _assert_same(got, theirs[i], specs)
    assert source.__getitems__([]) == []


def test_features_select_the_keys_and_their_sources_are_parsed_not_returned(datasets):
    path = datasets["int32-float16-v4"]
    for features in ([NORM, fmt.TARGET_KEY], "signal", [fmt.CLASS_KEY, NORM, "log_mel"]):
        source = open_source(path, split="train", features=features)
        specs = load_info(path).select_features(features)
        assert source.keys == list(specs)  # manifest order, whatever the request's
        theirs = _tf_elements(path, split="train", features=features)
        for i, element in enumerate(theirs):
            _assert_same(source[i], element, specs)
    with pytest.raises(UnknownFeatureError, match="unknown feature.*'nope'"):
        open_source(path, features=["signal", "nope"])


@pytest.mark.parametrize("split", ["train[:50%]", "train[2:7]+test", "test[-1:]", "train[2shard]"])
def test_a_sliced_split_is_the_slice_replay_dataset_reads(datasets, split):
    path = datasets["float32-bfloat16-v5"]
    source = open_source(path, split=split)
    theirs = _tf_elements(path, split=split)
    assert len(source) == len(theirs) > 0
    specs = load_info(path).elements
    for i, element in enumerate(theirs):
        _assert_same(source[i], element, specs)
    assert f"split={split!r}" in repr(source)


def test_a_version_reads_that_version(tmp_path):
    write_dataset(tmp_path, num_examples_per_shard=(3, 2), compression="NONE", seed=3)
    append_commit(tmp_path, token="more", num_examples_per_shard=(4,))
    first, latest = open_source(tmp_path, version=1), open_source(tmp_path)
    assert (len(first), len(latest)) == (5, 9)
    specs = load_info(tmp_path).elements
    for i, element in enumerate(_tf_elements(str(tmp_path), version=1)):
        _assert_same(first[i], element, specs)
    for i, element in enumerate(_tf_elements(str(tmp_path))):
        _assert_same(latest[i], element, specs)
    assert "version=1," in repr(first) and "version=2," in repr(latest)


def test_len_index_errors_repr_close_and_compressed_shards(datasets, single):
    path = datasets["int16-float32-v5"]
    with open_source(path, split="test") as source:
        assert isinstance(source, Source)
        assert len(source) == 5
        assert repr(source) == (
            f"Source(path={path!r}, split='test', version=1, len=5, keys={source.keys!r})"
        )
        for bad in (5, -6):
            with pytest.raises(IndexError, match=f"record {bad} out of range \\[0, 5\\)"):
                source[bad]
        with pytest.raises(TypeError, match="integers, not slice"):
            source[1:2]
        first = source[0]
    assert source[np.int64(0)][fmt.INDEX_KEY] == first[fmt.INDEX_KEY]  # reopened after close
    assert source.info.version == 1 and source.info.path == path
    assert all(v.flags.writeable for v in first.values())  # copies, not views of the record
    with pytest.raises(NoRandomAccessError, match="GZIP shards have no random access"):
        open_source(single[0])  # the `single` dataset's shards are GZIP


def _spawned(source: Source, indices: list[int]) -> tuple[list[dict], bool]:
    """`source.__getitems__(indices)` run in a fresh ``spawn`` worker, and whether TensorFlow
    was loaded there."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.apply(source.__getitems__, (indices,))
        tf_loaded = pool.apply(eval, ("'tensorflow' in __import__('sys').modules",))
    return got, tf_loaded


def test_a_pickled_source_reads_the_same_elements_in_a_spawned_worker(datasets):
    path = datasets["int16-float32-v5"]
    source = open_source(path, split="train[2:]", features=[NORM, "signal", "class"])
    source[0]  # its shards open here: the copy opens its own
    copy = pickle.loads(pickle.dumps(source))
    assert repr(copy) == repr(source)
    indices = [4, 0, 9, 4]
    got, tf_loaded = _spawned(source, indices)
    assert not tf_loaded
    for ours, theirs in zip(got, source.__getitems__(indices), strict=True):
        _assert_same(ours, theirs, source.element_specs)


def test_reading_a_local_dataset_imports_no_tensorflow(datasets):
    code = (
        "import sys\n"
        "import replay.source\n"
        "from replay import open_source\n"
        f"s = open_source({datasets['int32-float16-v4']!r}, split='train[1:]')\n"
        "assert s[0]['signal'].dtype == 'int32' and len(s.__getitems__(range(len(s)))) == 11\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("feature_dtype", fmt.FEATURE_DTYPES)
def test_real_record_runs_read_as_replay_dataset_reads_them(recorded, feature_dtype):
    path = str(recorded["runs"][feature_dtype])
    source = open_source(path)
    theirs = _tf_elements(path)
    assert len(source) == len(theirs) == 8
    specs = load_info(path).elements
    assert specs["log_mel"].stored_dtype == (None if feature_dtype == "float32" else feature_dtype)
    for i, element in enumerate(theirs):
        _assert_same(source[i], element, specs)


@pytest.mark.slow
def test_an_annotated_24_bit_recording_reads_as_replay_dataset_reads_it(tmp_path):
    """int32 signal (24-bit samples), multi-hot labels, events [k, 3], their count: the real
    hydrophone excerpt recorded with its Raven table (docs/annotations.md), uncompressed."""
    out = tmp_path / "tug"
    record(
        str(TUG_WAV),
        out,
        "--win_len", "32000", "--compression", "NONE",
        "--annotations", str(ROOT / "tests" / "fixtures" / "annotations" / "*.txt"),
    )  # fmt: skip
    specs = load_info(out).elements
    assert {k: specs[k].dtype for k in ("signal", "labels", "events")} == {
        "signal": "int32",
        "labels": "float32",
        "events": "int64",
    }
    assert len(specs["events"].shape) == 2
    source = open_source(out)
    theirs = _tf_elements(str(out))
    assert len(source) == len(theirs) == 10
    for i, element in enumerate(theirs):
        _assert_same(source[i], element, specs)


# ------------------------------------------------------------------ broken records


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        (lambda d: d.replace(b"signal", b"signaX"), "signal", "missing from the record"),
        (lambda d: d.replace(b"log_mel", b"log_meX"), "log_mel", "missing from the record"),
        (lambda d: b"\xff" * len(d), None, "varint longer than 10 bytes"),
        (lambda d: b"\x0a\xff\x7f" + d[3:], None, "Features of 16383 bytes at byte 3 overrun"),
    ],
    ids=["signal-missing", "norm-source-missing", "garbage", "bad-length"],
)
def test_a_record_that_is_no_example_is_named_by_shard_record_and_key(
    tmp_path, change, key, reason
):
    write_dataset(tmp_path, num_examples_per_shard=(3, 4), compression="NONE", seed=7)
    shard, record = rewrite_record(str(tmp_path), 5, change)
    assert record == 2
    features = None if key != "log_mel" else [NORM]  # log_mel_norm needs its stored source
    source = open_source(tmp_path, features=features)
    source.__getitems__([0, 1, 4, 6])  # its neighbours read
    for read in (lambda: source[5], lambda: source.__getitems__([0, 5])):
        with pytest.raises(MalformedRecordError, match=reason) as error:
            read()
        message = str(error.value)
        assert message.startswith(f"{shard}: record 2 at byte offset ")
        assert "(element 5)" in message
        if key is not None:
            assert f"key {key!r}" in message
        assert (error.value.shard_path, error.value.record, error.value.key) == (shard, 2, key)


def test_the_layers_broken_records_are_named_through_the_source(tmp_path):
    write_dataset(tmp_path, num_examples_per_shard=(3, 4), compression="NONE", seed=8)
    where = open_records(tmp_path).locate(4)
    source = open_source(tmp_path)
    with open(where.shard.path, "r+b") as f:  # a data byte flipped: its CRC fails
        f.seek(where.start + 40)
        byte = f.read(1)
        f.seek(where.start + 40)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptShardError, match="data checksum mismatch") as error:
        source.__getitems__([0, 4])
    assert not isinstance(error.value, MalformedRecordError)
    assert str(error.value).startswith(f"{where.shard.path}: record 1 at byte offset {where.start}")
    source[3]  # its neighbours read
    with open(where.shard.path, "r+b") as f:
        f.truncate(where.end - 1)
    with pytest.raises(ShardSizeError, match=f"{where.shard.path}: .*the manifest says"):
        open_source(tmp_path)


# ------------------------------------------------------------------ the decoder


def _specs() -> dict[str, fmt.ElementSpec]:
    """Every encoding and dtype a reader decodes, the z_score keys among them."""
    raw = fmt.stored_spec
    specs = {
        "s16": raw("int16", (5,)),
        "s32": raw("int32", (3,)),
        "sf32": raw("float32", (2, 2)),
        "sf64": raw("float64", (2,)),
        "f16": raw("float32", (3,), stored_dtype="float16"),
        "bf16": raw("float32", (3,), stored_dtype="bfloat16"),
        "name": raw("string", ()),
        "id": raw("int64", ()),
        "events": raw("int64", (2, 3)),
        "rate": fmt.ElementSpec("int32", (), fmt.ENCODING_INT64_LIST),  # v1-v4's sample_rate
        "fl": fmt.ElementSpec("float32", (2, 2), fmt.ENCODING_FLOAT_LIST),  # version 1
    }
    specs["sf32_norm"] = fmt.z_score_spec("sf32", specs["sf32"], mean=0.3, var=2.7)
    specs["f16_norm"] = fmt.z_score_spec("f16", specs["f16"], mean=-1.25, var=0.0)
    specs["fl_norm"] = fmt.z_score_spec("fl", specs["fl"], mean=1e-3, var=1e-5)
    return specs


def _values(rng: np.random.Generator) -> dict:
    return {
        "s16": rng.integers(-(2**15), 2**15, 5).astype("<i2").tobytes(),
        "s32": rng.integers(-(2**31), 2**31, 3).astype("<i4").tobytes(),
        "sf32": rng.normal(0, 100, 4).astype("<f4").tobytes(),
        "sf64": rng.normal(0, 1, 2).astype("<f8").tobytes(),
        "f16": rng.normal(0, 10, 3).astype("<f2").tobytes(),
        "bf16": rng.integers(0, 2**16, 3).astype("<u2").tobytes(),
        "name": bytes(rng.integers(0, 256, 7).astype(np.uint8)),
        "id": [int(rng.integers(-(2**63), 2**63 - 1))],
        "events": rng.integers(-(2**40), 2**40, 6).tolist(),
        "rate": [2**33 + 16000 if rng.random() < 0.5 else -44100],  # narrowed: wraps around
        "fl": rng.normal(0, 1e3, 4).astype(np.float32).tolist(),
    }


def _example(values: dict) -> bytes:
    feature = {}
    for key, value in values.items():
        if isinstance(value, bytes):
            feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        elif key == "fl":
            feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
        else:
            feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString()


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _unpacked_example(values: dict, *, unknown_inside: bool = False) -> bytes:
    """The Example of `values` written by hand: numbers unpacked (one field a value), an
    unknown field after the features, the ``id`` key given twice (the last entry wins); with
    `unknown_inside` also an unknown field in each Feature and bytes list, and each map entry's
    value before its key (valid protobuf that TensorFlow's parser refuses)."""
    entries = [_field(1, _field(1, b"id") + _field(2, _field(3, _field(1, _varint(99)))))]
    unknown_int = _varint(9 << 3) + _varint(5) if unknown_inside else b""
    for key, value in values.items():
        if isinstance(value, bytes):
            kind = _field(1, _field(1, value) + unknown_int)
        elif key == "fl":
            kind = _field(2, b"".join(b"\x0d" + struct.pack("<f", v) for v in value))
        else:
            kind = _field(3, b"".join(b"\x08" + _varint(v) for v in value))
        if unknown_inside:  # and the value before the key
            entry = _field(2, kind + _field(7, b"?")) + _field(1, key.encode())
        else:
            entry = _field(1, key.encode()) + _field(2, kind)
        entries.append(_field(1, entry))
    return _field(1, b"".join(entries)) + _field(5, b"an unknown field")


def _packed_example(values: dict) -> bytes:
    """The Example of `values` as protobuf writes it (numbers packed), written by hand so its
    bytes are the same in every process (protobuf's map order is not)."""
    entries = []
    for key, value in values.items():
        if isinstance(value, bytes):
            kind = _field(1, _field(1, value))
        elif key == "fl":
            kind = _field(2, _field(1, np.asarray(value, "<f4").tobytes()))
        else:
            kind = _field(3, _field(1, b"".join(_varint(v) for v in value)))
        entries.append(_field(1, _field(1, key.encode()) + _field(2, kind)))
    return _field(1, b"".join(entries))


def test_the_decoder_gives_what_tensorflows_parser_gives_for_every_encoding():
    specs = _specs()
    decoder = Decoder(specs)
    parse = batch_parser(specs)
    rng = np.random.default_rng(0)
    records = []
    for _ in range(6):
        values = _values(rng)
        records += [_example(values), _unpacked_example(values)]
    theirs = parse(tf.constant(records))
    for i, data in enumerate(records):
        _assert_same(
            decode_example(data, decoder), {k: v[i].numpy() for k, v in theirs.items()}, specs
        )
    assert pickle.loads(pickle.dumps(decoder))(records[0]).keys() == specs.keys()


def test_a_changed_byte_decodes_as_tensorflows_parser_decodes_it_or_fails_named():
    """Every single-byte change of a record at 300 places: when TensorFlow's parser reads it,
    the decoder gives the same element or refuses it (TensorFlow reads nested lengths that
    overrun their message, which protobuf refuses); when TensorFlow refuses it, so does the
    decoder."""
    specs = _specs()
    decoder, parse = Decoder(specs), batch_parser(specs)
    values = _values(np.random.default_rng(5))
    record = _packed_example(values)
    assert tf.train.Example.FromString(record) == tf.train.Example.FromString(_example(values))
    rng = np.random.default_rng(0)
    outcomes = {"equal": 0, "both refuse": 0, "tf reads an overrun length": 0}
    for _ in range(300):
        changed = bytearray(record)
        changed[int(rng.integers(len(record)))] = int(rng.integers(256))
        try:
            ours = decode_example(bytes(changed), decoder)
        except ExampleError as e:
            ours = e
        try:
            tf_element = parse(tf.constant([bytes(changed)]))
        except (tf.errors.InvalidArgumentError, UnicodeDecodeError):  # (a message of bytes)
            assert isinstance(ours, ExampleError)
            outcomes["both refuse"] += 1
            continue
        if isinstance(ours, ExampleError):
            assert re.search("overrun", str(ours)), ours
            outcomes["tf reads an overrun length"] += 1
            continue
        _assert_same(ours, {k: v[0].numpy() for k, v in tf_element.items()}, specs)
        outcomes["equal"] += 1
    assert all(outcomes.values()), outcomes


def test_fields_protobuf_allows_and_tensorflows_parser_refuses_are_read_as_protobuf_reads():
    specs = _specs()
    values = _values(np.random.default_rng(3))
    plain, extra = _unpacked_example(values), _unpacked_example(values, unknown_inside=True)
    example = tf.train.Example.FromString(extra)  # valid protobuf: unknown fields skipped
    assert example.features.feature["id"].int64_list.value == values["id"]
    assert example.features.feature["name"].bytes_list.value == [values["name"]]
    with pytest.raises(tf.errors.InvalidArgumentError):
        batch_parser(specs)(tf.constant([extra]))
    _assert_same(
        decode_example(extra, Decoder(specs)), decode_example(plain, Decoder(specs)), specs
    )


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        (dict(s16=b"\x00" * 9), "s16", "9 bytes, 10 expected \\(5 x int16, shape \\[5\\]\\)"),
        (dict(bf16=b"\x00" * 8), "bf16", "8 bytes, 6 expected \\(3 x bfloat16"),
        (dict(events=[1, 2, 3]), "events", "3 values, 6 expected \\(shape \\[2, 3\\]\\)"),
        (dict(fl=[1.0]), "fl", "1 values, 4 expected"),
        (dict(id=b"x"), "id", "holds a bytes_list, not the int64_list expected"),
        (dict(name=[1]), "name", "holds an int64_list, not the bytes_list expected"),
        (dict(s32=[1, 2, 3]), "s32", "holds an int64_list, not the bytes_list expected"),
    ],
)
def test_a_key_of_the_wrong_kind_or_length_is_named(change, key, reason):
    values = {**_values(np.random.default_rng(1)), **change}
    with pytest.raises(ExampleError, match=reason) as error:
        decode_example(_example(values), Decoder(_specs()))
    assert error.value.key == key and str(error.value).startswith(f"key {key!r}: ")
    with pytest.raises(tf.errors.InvalidArgumentError):  # TensorFlow refuses it too
        batch_parser(_specs())(tf.constant([_example(values)]))


def test_a_z_score_key_needs_a_stored_source():
    specs = _specs()
    with pytest.raises(ValueError, match="sf32_norm: source key 'sf32' is not a stored key"):
        Decoder({"sf32_norm": specs["sf32_norm"]}, {})


def _check_decoded(element: dict, specs: dict[str, fmt.ElementSpec]) -> None:
    assert list(element) == list(specs)
    for key, spec in specs.items():
        assert element[key].shape == spec.shape
        assert element[key].dtype == (object if spec.dtype == "string" else np.dtype(spec.dtype))


_RECORD = _unpacked_example(_values(np.random.default_rng(2)), unknown_inside=True)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.binary(max_size=300),
        st.integers(0, len(_RECORD)).map(lambda n: _RECORD[:n]),  # truncations
        st.tuples(st.integers(0, len(_RECORD) - 1), st.integers(0, 255)).map(
            lambda c: _RECORD[: c[0]] + bytes([c[1]]) + _RECORD[c[0] + 1 :]  # a byte changed
        ),
    )
)
def test_any_bytes_decode_to_the_specs_or_raise_example_error(data):
    specs = _specs()
    try:
        element = decode_example(data, Decoder(specs))
    except ExampleError as e:
        assert str(e)
    else:
        _check_decoded(element, specs)
