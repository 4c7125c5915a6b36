"""Planning's I/O: class lists, label CSVs, audio headers, annotation tables, listing inputs and
the output dir.

Everything planning (`pipelines.plan`) learns from storage goes through here (Beam's
FileSystems: local, gs://, s3://..., imported on first use, so importing planning imports no
Beam); the planning steps themselves stay pure.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import itertools
import json
import os
import re
from typing import Any

from pipelines.config import AnnotationConfig, UsageError
from replay import format as fmt
from replay.storage import is_url
from transforms.audio import annotations as ann
from transforms.audio import formats, labels, wav
from transforms.spec.types import InputFile

RUN_MARKER = ".audiorecords-run"  # written first into the output dir: "this folder is ours"
HEADER_THREADS = 16  # parallel header reads at planning (remote stores: latency-bound)


def _filesystems() -> Any:
    """Beam's ``FileSystems`` (local, gs://, s3://...; the job's options set by `pipelines.job`),
    imported on first use: validating options and planning's pure steps import no Beam."""
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def read_classes_file(path: str) -> str:
    try:
        with _filesystems().open(path, compression_type="uncompressed") as fh:
            return fh.read().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--classes @{path}: cannot read the class list ({e})") from e


def read_csv_labels(csv_path: str) -> dict[str, str]:
    try:
        with _filesystems().open(csv_path, compression_type="uncompressed") as fh:
            text = fh.read().decode("utf-8-sig")
        return labels.read_label_csv(text, source=csv_path)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"--label_source csv:{csv_path}: {e}") from e


def _read_header(f: InputFile, seen: dict[wav.WavInfo, wav.WavInfo]) -> InputFile:
    if f.error is not None:
        return f
    try:
        with _filesystems().open(f.path, compression_type="uncompressed") as fh:
            info = wav.read_info(fh, path=f.path)
        return dataclasses.replace(f, info=seen.setdefault(info, info))
    except wav.WavDecodeError as e:
        return dataclasses.replace(f, error=e.reason)
    except Exception as e:  # noqa: BLE001 - any unreadable file is reported, never fatal
        return dataclasses.replace(f, error=f"{type(e).__name__}: {e}")


def scan_headers(inputs: list[InputFile]) -> tuple[InputFile, ...]:
    """Reads every file's header (a few KB each); bad ones get their `error`.

    Remote files (``gs://``, ``s3://``...) in `HEADER_THREADS` threads: each read waits on the
    network. Local ones in this thread: a local header read is CPU under the GIL, and threads
    only add hand-offs (docs/performance.md).

    Equal headers are one `wav.WavInfo` object: clips of one format and length share it, in
    the plan and in the read tasks shipped to workers (pickled once per task).
    """
    seen: dict[wav.WavInfo, wav.WavInfo] = {}
    if not any(is_url(f.path) for f in inputs):
        return tuple(_read_header(f, seen) for f in inputs)
    with concurrent.futures.ThreadPoolExecutor(HEADER_THREADS) as pool:
        return tuple(pool.map(_read_header, inputs, itertools.repeat(seen)))


def match_inputs(pattern: str) -> list[tuple[str, int]]:
    """(path, size) of every file `pattern` matches, sorted by path (local, gs://, s3://...)."""
    return [(path, size) for path, size, _ in match_stamped(pattern)]


def match_stamped(pattern: str) -> list[tuple[str, int, float]]:
    """(path, size, modification time) of every file `pattern` matches, sorted by path.

    ``{a,b}`` alternatives are expanded (``data/**/*.{wav,flac}``); Beam's glob has none. The
    time is Beam's ``last_updated_in_seconds`` (0 when the file system gives none). Local
    patterns are listed by `local_stamps` (Beam's very result, one ``stat`` a matched file).
    """
    patterns = formats.expand_braces(pattern)
    try:
        fs = _filesystems()
        if all(_is_local(fs, p) for p in patterns):
            found = [stamp for p in patterns for stamp in local_stamps(p)]
        else:
            results = fs.match(patterns)
            found = [
                (m.path, m.size_in_bytes, float(getattr(m, "last_updated_in_seconds", 0) or 0))
                for r in results
                for m in r.metadata_list
            ]
    except Exception as e:  # noqa: BLE001 - Beam raises BeamIOError / ValueError by scheme
        raise UsageError(f"--input_pattern {pattern!r}: cannot list files ({e})") from e
    if len(patterns) > 1:  # alternatives may match a file twice: listed once (the last match)
        found = list({stamp[0]: stamp for stamp in found}.values())
    found.sort()  # by path: each path is there once
    return found


def local_stamps(pattern: str) -> list[tuple[str, int, float]]:
    """(path, size, modification time) of the local files `pattern` matches (Beam's glob, one
    pattern, no braces), in listing order: what Beam's ``LocalFileSystem.match`` finds.

    Beam walks the folder before the pattern's first wildcard and takes the size and time of
    every file under it (two ``stat`` calls each), then keeps the paths its pattern's regular
    expression matches; here the paths are matched first and each kept file is ``stat``-ed
    once. A file that disappears meanwhile is left out, as Beam leaves it.
    """
    from apache_beam.io.filesystem import FileSystem

    if pattern.endswith(("/", "\\")):
        pattern += "*"
    prefix = _GLOB_PREFIX.match(pattern).group(0)
    if prefix == pattern:  # no wildcard: one path, Beam's answer
        (result,) = _filesystems().match([pattern])
        return [(m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in result.metadata_list]
    matches = re.compile(FileSystem.translate_pattern(pattern)).match
    found = []
    for folder, _, names in os.walk(os.path.dirname(prefix)):
        base = folder if folder.endswith(os.sep) else folder + os.sep  # os.path.join's
        for path in filter(matches, map(base.__add__, names)):
            try:
                stat = os.stat(path)
            except OSError:  # gone since it was listed
                continue
            found.append((path, stat.st_size, stat.st_mtime))
    return found


_GLOB_PREFIX = re.compile(r"^[^[*?]*")  # a pattern's part before its first wildcard (Beam's)


def _is_local(fs: Any, pattern: str) -> bool:
    """Whether Beam lists `pattern` with its own local file system (no scheme)."""
    from apache_beam.io.localfilesystem import LocalFileSystem

    return type(fs.get_filesystem(pattern)) is LocalFileSystem


def output_dir_state(output_dir: str) -> str:
    """ "missing", "empty", "ours" (a dataset or one of our runs) or "foreign".

    A URL's entries are listed with TensorFlow's file I/O, which writes the dataset: on an object
    store a directory is a prefix, which Beam's ``exists`` does not see (a prefix holding only
    someone else's files counted as "missing", and the job wrote into it), and whose nested
    "subdirectories" its ``*`` glob does not list. An object store has no empty directory: a
    prefix with nothing under it is "missing".
    """
    if is_url(output_dir):
        import tensorflow as tf  # the dataset's file system (transforms.stages.atomic)

        try:
            entries = tf.io.gfile.listdir(output_dir)
        except tf.errors.NotFoundError:
            entries = []
        if not entries:
            return "missing"
    else:
        if not os.path.exists(output_dir):
            return "missing"
        if not os.path.isdir(output_dir):
            return "foreign"  # an existing file is never ours (nor replaced)
        entries = os.listdir(output_dir)
    if not entries:
        return "empty"
    names = {e.rstrip("/").rsplit("/", 1)[-1] for e in entries}
    if fmt.MANIFEST_FILENAME in names and not _is_our_manifest(output_dir):
        return "foreign"  # e.g. a web app's manifest.json: not a dataset of ours
    return "ours" if names & {fmt.MANIFEST_FILENAME, RUN_MARKER} else "foreign"


def _is_our_manifest(output_dir: str) -> bool:
    """Whether <output_dir>/manifest.json is an audiorecords manifest (its "format" says so)."""
    try:
        path = f"{output_dir.rstrip('/')}/{fmt.MANIFEST_FILENAME}"
        with _filesystems().open(path, compression_type="uncompressed") as fh:
            return json.loads(fh.read(16 << 20)).get("format") == fmt.FORMAT_NAME
    except Exception:  # noqa: BLE001 - unreadable or not JSON: not ours
        return False


def read_annotation_tables(config: AnnotationConfig) -> tuple[list[ann.Event], list[ann.RowError]]:
    """Reads every table `config.pattern` matches (local, gs://, ... through Beam's FileSystems),
    remote ones in `HEADER_THREADS` threads (each read waits on the network, as a header's does;
    a table per recording is one request each), the results in path order.

    A table that cannot be read or decoded is one error; text is UTF-8 (a BOM is skipped), else
    Windows-1252 (what Raven on Windows writes).

    Raises:
      ValueError: the pattern matches no file.
    """
    fs = _filesystems()
    try:
        found = fs.match([config.pattern])
    except Exception as e:  # noqa: BLE001 - Beam raises BeamIOError / ValueError by scheme
        raise ValueError(f"--annotations {config.pattern!r}: cannot list files ({e})") from e
    paths = sorted({m.path for r in found for m in r.metadata_list})
    if not paths:
        raise ValueError(f"--annotations {config.pattern!r} matches no file")
    read = functools.partial(_read_table, config=config)
    if any(is_url(path) for path in paths):
        with concurrent.futures.ThreadPoolExecutor(HEADER_THREADS) as pool:
            tables = list(pool.map(read, paths))
    else:
        tables = list(map(read, paths))
    events = [e for evs, _ in tables for e in evs]
    errors = [e for _, errs in tables for e in errs]
    return events, errors


def _read_table(
    path: str, *, config: AnnotationConfig
) -> tuple[list[ann.Event], list[ann.RowError]]:
    """One table's events and bad rows (`read_annotation_tables`)."""
    try:
        with _filesystems().open(path, compression_type="uncompressed") as fh:
            data = fh.read()
    except Exception as e:  # noqa: BLE001 - an unreadable table is reported, never fatal
        return [], [ann.RowError(path, None, f"cannot read ({type(e).__name__}: {e})")]
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
    return ann.read_table(text, source=path, fmt=config.fmt, label_column=config.label_column)
