"""Class labels of input files (file name, parent folder, or a CSV) and the run's class list.

Class ids are fixed at planning, never learnt from the data: the class list is the sorted set of
every input's label, or the list given with ``--classes`` (a ``target`` is the label's position
in it). So ids do not change when windows are added, a corpus is subset, or a split differs.
"""

from __future__ import annotations

import csv
import functools
import io
import itertools
import operator
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence

FILENAME = "filename"
DIRNAME = "dirname"
CSV_PREFIX = "csv:"
CLASSES_FILE_PREFIX = "@"  # --classes @PATH: one class name per line
UNKNOWN_CLASS_MODES = ("error", "keep")  # a label outside --classes: error entry, or target -1


class LabelError(ValueError):
    """A file has no label under the chosen rule (message names the file)."""


def parse_label_source(value: str) -> tuple[str, str | None]:
    """Splits ``filename`` / ``dirname`` / ``csv:PATH`` into (kind, csv_path).

    Raises:
      ValueError: on anything else, with the accepted forms.
    """
    if value in (FILENAME, DIRNAME):
        return value, None
    if value.startswith(CSV_PREFIX) and len(value) > len(CSV_PREFIX):
        return "csv", value[len(CSV_PREFIX) :]
    raise ValueError(f"--label_source must be filename, dirname or csv:PATH, got {value!r}")


def label_from_filename(path: str) -> str:
    """Last ``_``-separated word of the file name without extension (``a_24346_tug.wav`` → tug)."""
    stem = _basename(path).rsplit(".", 1)[0]
    label = stem.rsplit("_", 1)[-1]
    if not label:
        raise LabelError(f"{path}: file name has no label after the last '_'")
    return label


def label_from_dirname(path: str) -> str:
    """Name of the folder that holds the file (``data/dog/1.wav`` → dog)."""
    parent = _basename(_dirname(path))
    if not parent:
        raise LabelError(f"{path}: file has no parent folder to take a label from")
    return parent


def read_label_csv(text: str, *, source: str) -> dict[str, str]:
    """Parses a ``path,label`` CSV (ESC-50 / UrbanSound8K style) into {key: label}.

    A header row is recognised when it names a ``filename``/``path``/``slice_file_name`` column and
    a ``category``/``class``/``label`` column (ESC-50's ``esc50.csv``, UrbanSound8K's
    ``UrbanSound8K.csv``); otherwise the first two columns are path and label. Keys are the paths as
    written; `lookup_csv_label` matches them against a file's full path or its base name.

    Raises:
      ValueError: empty CSV or a row without a label (names `source` and the row).
    """
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if not rows:
        raise ValueError(f"{source}: label CSV is empty")
    path_col, label_col = 0, 1
    header = [c.strip().lower() for c in rows[0]]
    path_names = [n for n in ("path", "filepath", "filename", "slice_file_name") if n in header]
    label_names = [n for n in ("label", "class", "category") if n in header]
    if path_names and label_names:
        path_col, label_col = header.index(path_names[0]), header.index(label_names[0])
        rows = rows[1:]
    labels: dict[str, str] = {}
    for line, row in enumerate(rows, start=1):
        if len(row) <= max(path_col, label_col) or not row[label_col].strip():
            raise ValueError(f"{source}: row {line} has no label: {row!r}")
        labels[row[path_col].strip()] = row[label_col].strip()
    return labels


def lookup_csv_label(path: str, labels: Mapping[str, str]) -> str:
    """Label of `path` in a CSV mapping: the longest trailing part of the path that is a key.

    ``gs://b/esc50/audio/1-100-A-0.wav`` matches a key ``audio/1-100-A-0.wav`` or
    ``1-100-A-0.wav``; O(path depth) look-ups, so 10,000s of files stay cheap.
    """
    parts = path.replace("\\", "/").split("/")
    for i in range(len(parts)):
        key = "/".join(parts[i:])
        if key in labels:
            return labels[key]
    raise LabelError(f"{path}: not listed in the label CSV")


def label_for(path: str, *, kind: str, csv_labels: Mapping[str, str] | None = None) -> str:
    """Label of `path` under rule `kind` (filename, dirname or csv)."""
    if kind == FILENAME:
        return label_from_filename(path)
    if kind == DIRNAME:
        return label_from_dirname(path)
    if kind == "csv":
        return lookup_csv_label(path, csv_labels or {})
    raise ValueError(f"unknown label kind {kind!r}")


def labeller(kind: str, csv_labels: Mapping[str, str] | None = None) -> Callable[[str], str]:
    """`label_for` under rule `kind` as a function of the path, for many paths: a ``dirname``
    label is found once per folder (the same string for every file in it).

    Raises:
      ValueError: an unknown `kind`.
    """
    if kind not in (FILENAME, DIRNAME, "csv"):
        raise ValueError(f"unknown label kind {kind!r}")
    if kind != DIRNAME:
        return lambda path: label_for(path, kind=kind, csv_labels=csv_labels)
    folders: dict[str, str] = {}  # the path up to its last separator -> its label

    def label(path: str) -> str:
        cut = path.rfind("/")
        if "\\" in path:
            cut = max(cut, path.rfind("\\"))
        if cut < 0 or cut == len(path) - 1:  # no folder, or a path ending in a separator
            return label_from_dirname(path)
        found = folders.get(path[:cut])
        if found is None:  # the label depends on the folder alone (raises when it has none)
            found = folders[path[:cut]] = label_from_dirname(path)
        return found

    return label


def label_paths(
    paths: Sequence[str], *, kind: str, csv_labels: Mapping[str, str] | None = None
) -> list[str | LabelError]:
    """`label_for` of every path of `paths`, in order: its label, or the `LabelError` it raises.

    A ``dirname`` label depends on the path's folder alone: it is found once per folder, and
    each path gets its folder's string (the loop over the paths is C's). Paths that could break
    that rule (a backslash, a trailing separator) and folders without a label are labelled one
    by one, as `label_for` labels them.

    Raises:
      ValueError: an unknown `kind`.
    """
    label_of = labeller(kind, csv_labels)
    joined = "\0".join(paths)  # a backslash or a trailing "/" in any path (or "/\0" in one)
    if kind != DIRNAME or "\\" in joined or "/\0" in joined or joined.endswith("/"):
        return list(map(functools.partial(_label_or_error, label_of), paths))
    folders = list(map(_HEAD, map(str.rpartition, paths, itertools.repeat("/"))))
    last = dict(zip(folders, paths, strict=True))  # folder -> a path in it
    found = {folder: _label_or_error(label_from_dirname, path) for folder, path in last.items()}
    out: list[str | LabelError] = list(map(found.__getitem__, folders))
    if any(isinstance(label, LabelError) for label in found.values()):  # each its own message
        bad = {folder for folder, label in found.items() if isinstance(label, LabelError)}
        for n, folder in enumerate(folders):
            if folder in bad:
                out[n] = _label_or_error(label_from_dirname, paths[n])
    return out


_HEAD = operator.itemgetter(0)  # of a `str.rpartition`


def _label_or_error(label_of: Callable[[str], str], path: str) -> str | LabelError:
    try:
        return label_of(path)
    except LabelError as e:
        return e


def parse_classes(value: str | None, *, read_text: Callable[[str], str]) -> tuple[str, ...] | None:
    """``--classes``: ``a,b,c`` or ``@PATH`` (one name per line) -> the names in order.

    Names are stripped of surrounding spaces; blank lines of a file are skipped.

    Args:
      value: the option value, None when not given.
      read_text: reads the ``@PATH`` file (planning does the I/O).

    Returns:
      The fixed class list, or None when `value` is None (classes come from the labels).

    Raises:
      ValueError: no names, an empty name, a duplicate, or a line break in a name.
    """
    if value is None:
        return None
    if value.startswith(CLASSES_FILE_PREFIX):
        source = f"--classes {value}"
        names = [n.strip() for n in read_text(value[len(CLASSES_FILE_PREFIX) :]).splitlines()]
        names = [n for n in names if n]
    else:
        source = "--classes"
        names = [n.strip() for n in value.split(",")]
        if "" in names:
            raise ValueError(f"--classes {value!r} has an empty class name")
    if not names:
        raise ValueError(f"{source}: no class names")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{source}: class {name!r} is listed twice")
        if _has_line_break(name):
            raise ValueError(f"{source}: class {name!r} contains a line break")
        seen.add(name)
    return tuple(names)


def class_error(label: str, classes: tuple[str, ...] | None, *, keep_unknown: bool) -> str | None:
    """Why a file with `label` cannot be recorded under the class rule (None: it can).

    Args:
      label: the file's label.
      classes: the ``--classes`` list, or None (every label is a class).
      keep_unknown: ``--unknown_class keep``: a label outside `classes` is recorded (target -1).
    """
    if _has_line_break(label):  # TFT's text vocabulary holds one class per line
        return f"label {label!r} contains a line break; not usable as a class name"
    if classes is not None and label not in classes and not keep_unknown:
        return f"label {label!r} is not in --classes (pass --unknown_class keep for target -1)"
    return None


def run_classes(labels: Iterable[str], classes: tuple[str, ...] | None) -> tuple[str, ...]:
    """The class list in ``target`` order: `classes` if given, else the labels sorted by name."""
    return classes if classes is not None else tuple(sorted(set(labels)))


def _has_line_break(name: str) -> bool:
    return "\n" in name or "\r" in name


def _basename(path: str) -> str:
    return posixpath.basename(path.replace("\\", "/").rstrip("/"))


def _dirname(path: str) -> str:
    return posixpath.dirname(path.replace("\\", "/").rstrip("/"))
