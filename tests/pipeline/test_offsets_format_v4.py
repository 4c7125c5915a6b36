"""Format version 4: every shard has a record offsets file (``offsets/<shard>.offsets``).

Real record runs (the bundled sample, uncompressed and GZIP): each offset is where plain tf.data,
reading from it, finds that record; the files are listed in the manifest with their SHA-256;
``python -m pipelines.verify`` checks them; the global read order reads the recorded shards as
its documented function says. Hand-made datasets of every older version are read still
(tests/pipeline/test_format_v2.py, test_tables_format_v3.py).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import tensorflow as tf

from pipelines import verify as verify_cli
from replay import format as fmt
from replay import load_info, replay_dataset
from replay.global_order import GlobalOrder, plan_blocks, positions_records
from tests.support.record_helpers import SAMPLE_DIR, raw_manifest, record


@pytest.fixture(scope="module", params=["NONE", "GZIP"])
def recorded(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"v4-{request.param}")
    record(
        str(SAMPLE_DIR / "*.wav"), out, "--win_len", "4000", "--num_shards", "2",
        "--compression", request.param,
    )  # fmt: skip
    return out


def _records(path: str, compression: str, offset: int | None = None) -> list[bytes]:
    """The shard's records read by plain tf.data, from `offset` (the op's byte_offsets)."""
    kind = "" if compression == "NONE" else compression
    if offset is None:
        return list(tf.data.TFRecordDataset(path, compression_type=kind).as_numpy_iterator())

    def from_offset(start: tf.Tensor) -> tf.data.Dataset:  # inside a function: at top level
        variant = tf.raw_ops.TFRecordDatasetV2(  # the op does not serialise (TF 2.21)
            filenames=[path],
            compression_type=kind,
            buffer_size=tf.constant(1 << 16, tf.int64),
            byte_offsets=tf.reshape(start, [1]),
        )
        return tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.string))

    offsets = tf.data.Dataset.from_tensors(tf.constant(offset, tf.int64))
    return list(offsets.flat_map(from_offset).as_numpy_iterator())


def test_each_offset_is_where_its_record_starts(recorded):
    manifest = raw_manifest(recorded)
    assert manifest["format_version"] == fmt.FORMAT_VERSION >= fmt.OFFSETS_VERSION
    shards = manifest["splits"]["all"]["shards"]
    assert len(shards) == 2 and sum(s["num_examples"] for s in shards) == 72
    for shard in shards:
        data = (recorded / fmt.offsets_filename(shard["filename"])).read_bytes()
        assert shard["offsets"] == {
            "num_bytes": 8 * shard["num_examples"],
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        offsets = fmt.parse_offsets(data)
        path = str(recorded / shard["filename"])
        records = _records(path, manifest["compression"])
        assert len(offsets) == len(records) == shard["num_examples"]
        assert offsets[0] == 0 and list(offsets) == sorted(set(offsets))
        for i in (1, len(records) // 2, len(records) - 1):
            assert _records(path, manifest["compression"], offsets[i]) == records[i:]


def test_verify_checks_the_offsets(recorded, capsys):
    assert verify_cli.run([str(recorded)]) == 0
    manifest = raw_manifest(recorded)
    shard = manifest["splits"]["all"]["shards"][1]
    file = recorded / fmt.offsets_filename(shard["filename"])
    good = file.read_bytes()
    try:
        file.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
        capsys.readouterr()
        assert verify_cli.run([str(recorded)]) == 1
        out = capsys.readouterr().out
        assert f"{shard['filename']}.offsets: record offsets: SHA-256 differs" in out
    finally:
        file.write_bytes(good)


def test_the_global_order_reads_the_recorded_shards_as_documented(recorded):
    info = load_info(recorded)
    stored = [
        (int(e[fmt.INDEX_KEY]), int(e[fmt.WIN_START_KEY]))
        for e in replay_dataset(
            recorded, features=[fmt.INDEX_KEY, fmt.WIN_START_KEY]
        ).as_numpy_iterator()
    ]
    counts = [s.num_examples for s in info.shard_list()]
    first = np.cumsum((0, *counts))
    order = GlobalOrder(seed=11, start=30, block_length=5, window_blocks=2)
    ds = replay_dataset(
        recorded, order=order, features=[fmt.INDEX_KEY, fmt.WIN_START_KEY], repeat=True
    )
    got = [
        (int(e[fmt.INDEX_KEY]), int(e[fmt.WIN_START_KEY])) for e in ds.take(150).as_numpy_iterator()
    ]
    blocks = plan_blocks(counts, block_length=5)
    where = positions_records(blocks, range(30, 180), seed=11, window_blocks=2)
    assert got == [stored[first[s] + r] for s, r in where]
