"""Every broken-record case of the record layer (`replay.records`, `replay.source`) read through
real loaders with 2 worker processes: a torch ``DataLoader`` and a ``grain.DataLoader`` over
`open_source`, in record order. The error raised in the training process is the layer's own,
naming the shard and the record (a truncated shard: the shard and its sizes).

What each framework keeps of an error raised in a worker: torch re-raises the same class built
from a new message, "Caught <class> in DataLoader worker process <k>" and the worker's
traceback, which ends with the layer's message; the attributes (``shard_path``, ``record``,
``key``) are lost. Grain re-raises the worker's exception itself, unpickled: the same class,
message and attributes (``shard_path``; ``record`` and ``key`` of a
`MalformedRecordError`).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import grain
import pytest
from torch.utils.data import DataLoader

from replay import (
    CorruptShardError,
    MalformedRecordError,
    ShardSizeError,
    open_source,
)
from replay import format as fmt
from replay.errors import ReplayError
from replay.records import open_records
from replay.source import Source
from tests.support.replay_fixtures import rewrite_record, write_dataset, write_manifest

FEATURES = ["signal", "index"]  # numeric: torch's default_collate stacks them


def _flip_data_byte(path: str) -> tuple[int, int]:
    """A byte of element 4's data flipped (its CRC fails)."""
    where = open_records(path).locate(4)
    with open(where.shard.path, "r+b") as f:
        f.seek(where.start + 12 + 30)
        byte = f.read(1)
        f.seek(where.start + 12 + 30)
        f.write(bytes([byte[0] ^ 0x01]))
    return 4, where.record


def _lying_offsets(path: str) -> tuple[int, int]:
    """Shard 0's third offset moved 3 bytes into its record, the manifest agreeing (its size and
    digest rewritten): record 1's frame no longer ends where its length says."""
    directory = Path(path)
    manifest = json.loads((directory / fmt.MANIFEST_FILENAME).read_text())
    entry = manifest["splits"]["all"]["shards"][0]
    file = directory / fmt.offsets_filename(entry["filename"])
    offsets = list(fmt.parse_offsets(file.read_bytes()))
    offsets[2] += 3
    data = fmt.offsets_bytes(offsets)
    file.write_bytes(data)
    entry["offsets"] = {"num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    write_manifest(directory, manifest)
    return 1, 1


def _rewrite(change: Callable[[bytes], bytes]) -> Callable[[str], tuple[int, int]]:
    """Element 5's record replaced by ``change(data)`` (same length) with valid CRCs."""

    def apply(path: str) -> tuple[int, int]:
        return 5, rewrite_record(path, 5, change)[1]

    return apply


# case: (break it before the source opens, break it after (the loader's workers open the
# shards), the error, what its message says after the shard and record)
CASES = {
    "flipped-data-byte": (_flip_data_byte, None, CorruptShardError, "data checksum mismatch"),
    "lying-offsets": (_lying_offsets, None, CorruptShardError, "its length field says"),
    "truncated-shard": (None, "truncate", ShardSizeError, "truncated or rewritten"),
    "no-example-key": (
        _rewrite(lambda d: d.replace(b"signal", b"signaX")),
        None,
        MalformedRecordError,
        "key 'signal': missing from the record",
    ),
    "no-example-bytes": (
        _rewrite(lambda d: b"\xff" * len(d)),
        None,
        MalformedRecordError,
        "varint longer than 10 bytes",
    ),
}


def _broken(tmp_path: Path, case: str) -> tuple[Source, str, str]:
    """A dataset broken as `case` says, its source (opened before a truncation), the error's
    expected start (shard and record) and the broken element's error raised in this process."""
    path = str(tmp_path)
    write_dataset(path, num_examples_per_shard=(3, 4), compression="NONE", seed=9)
    before, after, _, _ = CASES[case]
    if before is not None:
        element, record = before(path)
        shard = open_records(path).locate(element).shard.path
        head = f"{shard}: record {record} at byte offset "
    source = open_source(path, features=FEATURES)
    if after == "truncate":  # cut after the source checked the sizes: its readers find it
        shard = open_records(path).locate(3).shard.path
        size = os.path.getsize(shard)
        os.truncate(shard, size - 7)
        element, head = 3, f"{shard}: {size - 7} bytes, the manifest says {size} "
    with pytest.raises(ReplayError) as here:
        Source.__getitems__(_copy(source), [element])
    return source, head, str(here.value)


def _copy(source: Source) -> Source:
    """A fresh copy of `source` (no shard open), as a worker process gets it."""
    return pickle.loads(pickle.dumps(source))


def _error(loader) -> Exception:
    """The error a loader's iteration raises, its iterator (and worker processes) shut down at
    once: a traceback kept alive keeps the iterator, whose later shutdown waits for each torch
    worker's join timeout."""
    iterator = iter(loader)
    try:
        for _ in iterator:
            pass
    except Exception as e:  # noqa: BLE001 - the test checks its class
        error = e
    else:
        pytest.fail("the loader read every element")
    error.__traceback__ = None
    del iterator
    return error


@pytest.mark.slow  # worker processes
@pytest.mark.parametrize("case", list(CASES))
def test_a_broken_record_read_through_torch_s_dataloader_is_named(tmp_path, case):
    source, head, message = _broken(tmp_path, case)
    error_type, reason = CASES[case][2], CASES[case][3]
    assert message.startswith(head) and reason in message
    error = _error(DataLoader(source, batch_size=2, num_workers=2))
    assert type(error) is error_type
    text = str(error)
    assert text.startswith(f"Caught {error_type.__name__} in DataLoader worker process ")
    assert text.rstrip("\n").endswith(f"{error_type.__module__}.{error_type.__name__}: {message}")
    assert not hasattr(error, "shard_path")  # torch builds a new one from the text


@pytest.mark.slow  # worker processes
@pytest.mark.parametrize("case", list(CASES))
def test_a_broken_record_read_through_grain_s_dataloader_is_named(tmp_path, case):
    source, head, message = _broken(tmp_path, case)
    error_type, reason = CASES[case][2], CASES[case][3]
    assert message.startswith(head) and reason in message
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.samplers.SequentialSampler(len(source), grain.sharding.NoSharding()),
        worker_count=2,
    )
    error = _error(loader)
    assert type(error) is error_type and str(error) == message
    if error_type is not ShardSizeError:  # the attributes too
        shard, record = head.split(": record ")
        assert error.shard_path == shard
        if error_type is MalformedRecordError:
            assert error.record == int(record.split()[0])
