"""Check a recorded dataset against its manifest: every shard's CRCs, record counts and sizes.

Usage::

    python -m pipelines.verify out/ [--split train]

Reads every record of every shard once with tf.data (TFRecord length and data CRC32C checks,
decompression for GZIP / ZLIB shards) and decodes it with the manifest's element specs, then
compares each shard's record count and byte size with the manifest: the checker of
`replay.verify_dataset` (`replay.shard_check`), which stops at the first problem, while this
checks every shard and names each bad one.

The source tables (format version 3: ``files.jsonl``, ``errors.jsonl``; version 5: every
commit's) are checked first: size and SHA-256 against the manifest, every entry; a bad one fails
with one ``FAILED`` line naming it. Then, on a dataset that was appended to (format version 5),
every version's stored manifest (``manifests/<v>.json``): it validates, and its commits and
shards are the latest version's first ones (`replay.DatasetInfo.check_versions`). The latest
version's shards are every version's, so checking them checks every version's.

Exit status: 0 and one line ``OK <dir>: ...`` when every shard is sound; 1 and one ``BAD
<shard>: <problems>`` line per bad shard (then a ``FAILED`` summary line) otherwise, or one
``FAILED`` line when the directory is not a complete dataset (no manifest: a run still writing
or one that died). Imports `replay` and TensorFlow only, never Apache Beam.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from replay import storage
from replay.errors import ReplayError
from replay.info import load_info
from replay.shard_check import ShardReport, check_shards


def verify(path: str, *, split: str | Sequence[str] | None = None) -> list[ShardReport]:
    """One `ShardReport` per shard of `split` (None: all splits), in manifest order: the
    latest version's shards, which are every version's.

    Raises:
      replay.ReplayError: not a complete, readable dataset (IncompleteDatasetError, ...).
    """
    info = load_info(path)  # validates the manifest: shard names are this dataset's own
    info.check_tables()  # format version 3: files.jsonl / errors.jsonl, size, SHA-256, entries
    info.check_versions()  # format version 5: every manifests/<v>.json, a prefix of the latest
    shards = info.shard_list(split)
    info.check_paths(shards)  # and no shard is a symlink out of the directory
    sizes = storage.sizes([shard.path for shard in shards])
    return check_shards(info, shards, sizes)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.verify",
        description="Check every shard of an audiorecords dataset against its manifest.",
    )
    parser.add_argument("dataset", help="dataset directory (local path or gs://... URL)")
    parser.add_argument("--split", action="append", help="check only this split (repeatable)")
    return parser.parse_args(argv)


def run(argv: Sequence[str] | None = None) -> int:
    """Verifies the dataset named in `argv`, prints the result; returns the exit status (0 / 1)."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    path = args.dataset.rstrip("/") or "/"
    try:
        reports = verify(path, split=args.split)
    except ReplayError as e:
        print(f"FAILED {e}")  # replay's messages start with the path
        return 1
    bad = [r for r in reports if not r.ok]
    for report in bad:
        print(f"BAD {report.shard.path}: {'; '.join(report.problems)}")
    if bad:
        print(f"FAILED {path}: {len(bad)} of {len(reports)} shards are bad")
        return 1
    records = sum(r.records or 0 for r in reports)
    size = sum(r.size or 0 for r in reports)
    print(
        f"OK {path}: {len(reports)} shards, {records} records, {size / 1e6:.1f} MB: CRCs, "
        "record counts and sizes match the manifest"
    )
    return 0


if __name__ == "__main__":
    from runners.quiet import quiet_tensorflow

    quiet_tensorflow()  # the problems are in our own lines, not TensorFlow's start-up notices
    sys.exit(run())
