"""The manifest loader's contract as one function of an input (the fuzz target), and the
field-aware manifest mutations shared by the atheris fuzzer and the hypothesis fuzzer.

An input is either raw manifest.json text (it starts with ``{``), or edits of a real manifest
(a real record run's, `BASE_DATASET`) encoded as bytes: each edit picks a node of the JSON tree
and replaces it (with a hostile value: path escapes, absolute paths, globs, nulls, huge or
negative shapes, strings for numbers, markup), deletes it, duplicates it, nudges a number by
one or adds an unknown key. `check_manifest_bytes` writes the result as the dataset's
manifest.json and runs what every reader runs: it must end in a valid dataset (shards inside
the directory, source tables that match the manifest, a summary and an HTML page with every
manifest string escaped) or a
`ReplayError` naming the dataset, and Python never opens a file outside the dataset directory
(an audit hook, `OpenWatch`). Imports neither atheris nor TensorFlow.
"""

from __future__ import annotations

import copy
import functools
import html.parser
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipelines.tools import (
    report,
    report_html,  # imported here: matplotlib reads its font cache
)
from replay import ReplayError, load_info
from replay.info import parse_manifest

REPO = Path(__file__).resolve().parents[1]
BASE_DATASET = REPO / "tests" / "fixtures" / "fuzz_manifest_dataset"
MARKUP = '<img src=x onerror="alert(1)">'
HOSTILE_VALUES: tuple[Any, ...] = (
    None, True, False, 0, 1, -1, 2, 3, 1023, 1025, 2**31, 2**40, 2**63, -(2**63), 1.5, 1e300,
    "", "1", "4000", "audiorecords", "../outside.tfrecord", "../../outside.tfrecord",
    "/etc/passwd", "/tmp/outside.tfrecord", "./audiorecords-test.tfrecord-00000-of-00002",
    "audiorecords-test.tfrecord-0000*-of-00002", "audiorecords-test.tfrecord-0000?-of-00002",
    "sub/audiorecords-test.tfrecord-00000-of-00002", "..", ".", "C:\\x", "gs://bucket/x",
    "audiorecords-test.tfrecord-00000-of-00002\n", "audiorecords-train.tfrecord-00000-of-00002",
    "audiorecords-test.tfrecord-00000-of-00002.gz", "\udcff", "\x00", "a" * 300, MARKUP,
    "int16", "int32", "int64", "float32", "string", "raw", "float_list", "int64_list",
    "bytes_list", "NONE", "GZIP", "ZLIB", "all", "train", "test",
    [], {}, [1], [-5], [0], [2**40], [1024], [4, 8], [2**14, 2**14, 2**14], ["4000"], [None],
    [MARKUP], {"x": MARKUP}, {"filename": "../outside.tfrecord", "num_examples": 1, "num_bytes": 1},
)  # fmt: skip
OPS = ("replace", "delete", "duplicate", "nudge", "add_key")


def json_paths(obj: Any) -> list[tuple]:
    """Every node's path (dict keys and list indices), depth-first, the root first."""
    out: list[tuple] = []
    stack: list[tuple[tuple, Any]] = [((), obj)]
    while stack:
        path, node = stack.pop()
        out.append(path)
        if isinstance(node, dict):
            stack.extend(((*path, k), v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(node))))
    return out


def mutate(manifest: dict, edits: list[tuple[int, int, Any]]) -> Any:
    """A copy of `manifest` with `edits` applied: (node number, op number, value) each."""
    out: Any = json.loads(json.dumps(manifest))  # a deep copy, 10x faster than copy.deepcopy
    for where, op_number, value in edits:
        paths = json_paths(out)
        path = paths[where % len(paths)]
        op = OPS[op_number % len(OPS)]
        if not path:
            out = copy.deepcopy(value) if op == "replace" else out  # never HOSTILE_VALUES itself
            continue
        parent = out
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        node = parent[last]
        if op == "replace":
            parent[last] = copy.deepcopy(value)
        elif op == "delete":
            del parent[last]
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(last, copy.deepcopy(node))
        elif op == "duplicate" and isinstance(node, dict | list):
            parent[last] = node + node if isinstance(node, list) else {**node, **node}
        elif op == "nudge" and type(node) is int:
            parent[last] = node + (1 if isinstance(value, int) and value % 2 else -1)
        elif isinstance(node, dict):
            node[f"unknown_{where % 7}"] = copy.deepcopy(value)
    return out


class _Bytes:
    """Reads small integers and values off a byte string (0 once it is used up)."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def int(self, width: int) -> int:
        chunk = self.data[self.pos : self.pos + width]
        self.pos += width
        return int.from_bytes(chunk, "little")

    def value(self) -> Any:
        kind = self.int(1) % 4
        if kind == 0:  # a small signed integer, near the interesting counts
            return self.int(2) - 2**15
        if kind == 1:  # a string of the next few bytes
            n = self.int(1) % 24
            raw = self.data[self.pos : self.pos + n]
            self.pos += n
            return raw.decode("utf-8", "surrogateescape")
        return HOSTILE_VALUES[self.int(1) % len(HOSTILE_VALUES)]


def decode_input(data: bytes, base: dict) -> bytes:
    """Raw JSON (starts with ``{``) as is; anything else as edits of `base`, serialised."""
    if data[:1] == b"{":
        return data
    reader = _Bytes(data)
    edits = []
    while reader.pos < len(data) and len(edits) < 8:
        edits.append((reader.int(2), reader.int(1), reader.value()))
    return json.dumps(mutate(base, edits)).encode("utf-8", "surrogatepass")


class OpenWatch:
    """An audit hook: fails the run when Python opens a file outside the allowed places.

    Allowed: the dataset directory, and code and library files (the interpreter's prefixes and
    the repository's packages; lazy imports open them), /dev and /proc. One hook per process
    (audit hooks cannot be removed); `watching` arms it around one example.
    """

    _installed: OpenWatch | None = None

    def __init__(self) -> None:
        self.dataset: str | None = None
        self.outside: list[str] = []
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/dev/", "/proc/", "/usr/"}
        code = [str(REPO / p) for p in ("replay", "pipelines", "transforms", "runners", "fuzz")]
        self.allowed = tuple(os.path.realpath(p) for p in prefixes) + tuple(code)
        self.tempdir = os.path.realpath(tempfile.gettempdir())

    @classmethod
    def get(cls) -> OpenWatch:
        if cls._installed is None:
            cls._installed = cls()
            sys.addaudithook(cls._installed._hook)
        return cls._installed

    def _hook(self, event: str, args: tuple) -> None:
        if self.dataset is None or event not in ("open", "os.listdir", "os.scandir", "glob.glob"):
            return
        path = args[0] if args else None
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):  # a file descriptor
            return
        real = os.path.realpath(path)
        if real.startswith(self.dataset) or real.startswith(self.allowed):
            return
        if real == self.tempdir:  # an anonymous O_TMPFILE file (tempfile.TemporaryFile)
            return
        if "__pycache__" in real or real.endswith((".py", ".pyc", ".so")):
            return
        self.outside.append(f"{event} {path}")

    def watching(self, dataset: str | os.PathLike) -> _Armed:
        return _Armed(self, os.path.realpath(dataset) + os.sep)


class _Armed:
    def __init__(self, watch: OpenWatch, dataset: str):
        self.watch, self.dataset = watch, dataset

    def __enter__(self) -> OpenWatch:
        self.watch.dataset, self.watch.outside = self.dataset, []
        return self.watch

    def __exit__(self, *exc: object) -> None:
        self.watch.dataset = None
        assert not self.watch.outside, f"opened outside the dataset: {self.watch.outside}"


EXPECTED_TAGS = Counter(
    {"html": 1, "head": 1, "meta": 2, "title": 1, "style": 1, "body": 1, "h1": 1, "p": 1,
     "nav": 1, "a": 1, "section": 1, "h2": 1, "pre": 1}
)  # fmt: skip


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: Counter = Counter()
        self.attrs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        self.attrs += [name for name, _ in attrs]


def page_tags(page: str) -> tuple[Counter, list[str]]:
    """The start tags and attribute names of an HTML page."""
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser.tags, parser.attrs


def _page(info: Any, summary: str) -> str:
    return report_html.render_html(
        title=f"audiorecords dataset {info.path}", subtitle=info.created_utc, summary=summary,
        plots=[],
    )  # fmt: skip


def check_report(info: Any, *, parse: bool = True) -> None:
    """The inspect summary and HTML page of `info`: every manifest string shows as text.

    Without `parse` (the atheris run, for speed) the page's ``<`` count is compared with an
    empty page's: html.escape leaves no ``<`` of the manifest's strings in the page.
    """
    summary = report.format_summary(info)
    summary.encode("utf-8")  # printable: no lone surrogate reaches stdout
    page = _page(info, summary)
    if not parse:
        empty = render_html_empty()
        assert page.count("<") == empty, f"markup from the manifest ({page.count('<')} '<')"
        return
    tags, attrs = page_tags(page)
    assert tags == EXPECTED_TAGS, f"markup from the manifest: {tags - EXPECTED_TAGS}"
    assert not [a for a in attrs if a.startswith("on")], attrs


@functools.cache
def render_html_empty() -> int:
    """The number of ``<`` in a report page whose strings are all empty (its own tags)."""
    return report_html.render_html(title="", subtitle="", summary="", plots=[]).count("<")


def check_manifest_bytes(data: bytes, dataset: Path, *, in_memory: bool = False) -> str:
    """Writes `data` as `dataset`/manifest.json and loads it as every reader does.

    With `in_memory` (the atheris run, for speed) the file is not written: the bytes go to
    `replay.info.parse_manifest`, what `load_info` calls after reading the file.

    Returns:
      "valid" or "refused <ErrorType>" (for statistics).

    Raises:
      AssertionError: a file outside `dataset` was opened, a shard path is not a plain name in
        `dataset`, an error does not name the dataset, or the report shows raw markup.
      Any exception that is not a `ReplayError`: a loader bug.
    """
    manifest_path = dataset / "manifest.json"
    if not in_memory:
        manifest_path.write_bytes(data)
    with OpenWatch.get().watching(dataset):
        try:
            if in_memory:
                info = parse_manifest(data, path=str(dataset), manifest_path=str(manifest_path))
            else:
                info = load_info(str(dataset))
            info.check_shards()
            info.check_tables()  # format version 3: files.jsonl / errors.jsonl, watched too
        except ReplayError as e:
            assert str(e).startswith(str(dataset)), str(e)
            assert "\n" not in str(e), str(e)
            return f"refused {type(e).__name__}"
        for shard in info.shard_list():
            assert os.path.dirname(shard.path) == str(dataset), shard.path
            assert os.path.isfile(shard.path) and not os.path.islink(shard.path), shard.path
        check_report(info, parse=not in_memory)
    return "valid"


def corpus(directory: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every file of a saved corpus directory, sorted."""
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.name.startswith((".", "README")):
            yield path.name, path.read_bytes()
