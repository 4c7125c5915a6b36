"""Time-stamped annotation tables: Raven selection tables, Audacity label tracks, a plain CSV.

Readers turn a table's text into `Event`s (audio file key, start/end in seconds, label, optional
channel) and `RowError`s: a bad row (bad number, end before start, no label, unknown or
ambiguous audio file, beyond the file's duration, no such channel) is data with its line number
and reason, never an exception that stops a job. Only a table that cannot be read at all (no
header, a missing required column) gives one `RowError` without a line.

Formats (``--annotation_format``; ``auto`` detects them, see `detect_format`):

- ``raven``: Raven Pro/Lite selection table, tab-separated with a header: ``Begin Time (s)``,
  ``End Time (s)``, optional ``Channel`` (1-based), ``Selection`` (rows repeating a selection
  number, one per view, are one event), ``Begin File`` / ``Begin Path`` (the audio file; with
  ``File Offset (s)`` the times are taken relative to that file, as in a multi-file table),
  else the audio file is the table's name (``<stem>.Table.1.selections.txt`` -> ``<stem>``).
  The label column is ``--annotation_column``; by default ``Annotation``, else the 8th column
  when it is not one of Raven's own (OpenSoundscape's ``annotation_column_idx=8``: the first
  column a user adds).
- ``audacity``: Audacity label track export, ``start<TAB>end<TAB>label`` per line (spectral
  ``\\<TAB>low<TAB>high`` lines are skipped), for the audio file of the same stem.
- ``csv``: ``path,start_s,end_s,label[,channel]`` (channel 0-based, as the ``channel`` key),
  with or without a header naming those columns.

Why not crowsetta (vocalpy), the well-kept reader the issue suggests: it installs beside our pins
(``pip install --dry-run`` adds only crowsetta, pandera, typeguard, typing-inspect,
mypy_extensions, appdirs), but 5.1.2 validates a whole table at once (a pandera schema, then
``BBox``'s onset < offset check), so one bad number or reversed row raises for the table and
per-row errors are impossible; it drops ``Channel``/``Begin File``/``File Offset (s)``; its
Audacity reader rejects spectral lines; its generic CSV has its own column set, not
``path,start_s,end_s,label``; and it reads local paths only (``pathlib`` + pandas), not Beam's
``gs://``. What is left to do is splitting text lines, which needs no library.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence

FORMATS = ("auto", "raven", "audacity", "csv")
RAVEN_BEGIN, RAVEN_END = "Begin Time (s)", "End Time (s)"
RAVEN_DEFAULT_LABEL = "Annotation"
_RAVEN_LABEL_INDEX = 8  # OpenSoundscape's default annotation_column_idx (1-based)
_RAVEN_OWN = re.compile(
    r"^(Selection|View|Channel|Begin File|Begin Path|End File|.*\((s|Hz|dB)\))$"
)
_CSV_NAMES = {
    "path": ("path", "file", "filename", "filepath", "audio_file"),
    "start": ("start_s", "start", "onset_s", "onset", "begin_s"),
    "end": ("end_s", "end", "offset_s", "offset", "stop_s"),
    "label": ("label", "class", "annotation", "category"),
    "channel": ("channel",),
}
_SAMPLE_TOLERANCE = 0.5  # an event may end half a sample past the last frame (rounding)


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One annotated event.

    Attributes:
      audio: the audio file as the table names it (a path or trailing path; a stem when
        `by_stem`).
      start_s: onset in seconds from the start of the file.
      end_s: offset in seconds (> start_s).
      label: the class name.
      channel: 0-based channel, or None for every channel.
      source: the table it comes from.
      line: its line in the table (1-based; the header is line 1).
      by_stem: `audio` is a file name without extension (Raven / Audacity table names).
    """

    audio: str
    start_s: float
    end_s: float
    label: str
    channel: int | None = None
    source: str = ""
    line: int = 0
    by_stem: bool = False

    def __reduce__(self) -> tuple:
        """Pickled as its field values (a run planned in the job ships every matched row)."""
        return type(self), tuple(getattr(self, name) for name in self.__slots__)


@dataclasses.dataclass(frozen=True)
class RowError:
    """A table row (or a whole table, `line` None) that gives no event, and why."""

    source: str
    line: int | None
    reason: str

    def to_manifest(self) -> dict[str, str]:
        """The manifest ``errors`` entry: ``<table>:<line>`` (one entry per row) and the reason."""
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return {"path": where, "reason": self.reason}


def detect_format(path: str, text: str) -> str:
    """``raven`` (a header with ``Begin Time (s)``), ``csv`` (``.csv``) or ``audacity``."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    if RAVEN_BEGIN in first.split("\t"):
        return "raven"
    return "csv" if path.lower().endswith(".csv") else "audacity"


def read_table(
    text: str, *, source: str, fmt: str = "auto", label_column: str | None = None
) -> tuple[list[Event], list[RowError]]:
    """Events and bad rows of one annotation table.

    Args:
      text: the table's text (decoded, a BOM already stripped).
      source: the table's path (names the audio file for Raven / Audacity tables without one).
      fmt: one of `FORMATS`.
      label_column: Raven's label column (None: ``Annotation`` or the 8th column).
    """
    if fmt not in FORMATS:
        raise ValueError(f"--annotation_format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    fmt = detect_format(source, text) if fmt == "auto" else fmt
    if fmt == "raven":
        return read_raven(text, source=source, label_column=label_column)
    if fmt == "audacity":
        return read_audacity(text, source=source)
    return read_csv(text, source=source)


def table_stem(source: str) -> str:
    """The audio stem a table's name stands for: ``x.Table.1.selections.txt``, ``x.txt`` -> x."""
    name = posixpath.basename(source.replace("\\", "/"))
    name = re.sub(r"(\.Table\.\d+)?\.selections\.txt$", "", name, flags=re.IGNORECASE)
    return name.rsplit(".", 1)[0] if name.lower().endswith((".txt", ".csv")) else name


def read_raven(
    text: str, *, source: str, label_column: str | None = None
) -> tuple[list[Event], list[RowError]]:
    """Events of a Raven selection table (tab-separated, header row); see the module doc."""
    lines = text.splitlines()
    header = [c.strip() for c in lines[0].split("\t")] if lines else []
    missing = [c for c in (RAVEN_BEGIN, RAVEN_END) if c not in header]
    if missing:
        reason = f"not a Raven selection table: no {missing[0]!r} column"
        return [], [RowError(source, None, reason)]
    label_col = _raven_label_column(header, label_column)
    if label_col is None:
        wanted = label_column or RAVEN_DEFAULT_LABEL
        reason = f"no label column {wanted!r}; columns: {', '.join(header)} (--annotation_column)"
        return [], [RowError(source, None, reason)]
    col = {name: i for i, name in reversed(list(enumerate(header)))}
    events, errors, seen = [], [], set()
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("\t")
        cell = {name: cells[i].strip() if i < len(cells) else "" for name, i in col.items()}
        selection = cell.get("Selection")
        if selection:
            if selection in seen:
                continue  # the same selection in another view (Waveform / Spectrogram)
            seen.add(selection)
        try:
            start = _number(cell[RAVEN_BEGIN], RAVEN_BEGIN)
            end = _number(cell[RAVEN_END], RAVEN_END)
            audio = cell.get("Begin Path") or cell.get("Begin File") or ""
            if audio and cell.get("File Offset (s)"):
                offset = _number(cell["File Offset (s)"], "File Offset (s)")
                start, end = offset, offset + (end - start)
            channel = _channel(cell.get("Channel", ""), first=1)
            event = Event(
                audio=audio or table_stem(source),
                start_s=start,
                end_s=end,
                label=cell[header[label_col]],
                channel=channel,
                source=source,
                line=number,
                by_stem=not audio,
            )
            events.append(_checked(event))
        except ValueError as e:
            errors.append(RowError(source, number, str(e)))
    return events, errors


def read_audacity(text: str, *, source: str) -> tuple[list[Event], list[RowError]]:
    """Events of an Audacity label track (``start<TAB>end<TAB>label``) for the table's stem."""
    events, errors = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("\\"):
            continue  # blank, or the spectral selection (low/high Hz) of the label above
        cells = line.split("\t")
        try:
            if len(cells) < 2:
                raise ValueError(f"expected start<TAB>end<TAB>label, got {line!r}")
            event = Event(
                audio=table_stem(source),
                start_s=_number(cells[0], "start"),
                end_s=_number(cells[1], "end"),
                label=cells[2].strip() if len(cells) > 2 else "",
                source=source,
                line=number,
                by_stem=True,
            )
            events.append(_checked(event))
        except ValueError as e:
            errors.append(RowError(source, number, str(e)))
    return events, errors


def read_csv(text: str, *, source: str) -> tuple[list[Event], list[RowError]]:
    """Events of a ``path,start_s,end_s,label[,channel]`` CSV (header optional)."""
    reader = csv.reader(io.StringIO(text))
    events, errors = [], []
    cols = {"path": 0, "start": 1, "end": 2, "label": 3, "channel": 4}
    first = True
    for row in reader:
        number = reader.line_num
        if not any(c.strip() for c in row):
            continue
        if first:
            first = False
            named = _csv_header(row)
            if named is not None:
                cols = named
                continue
        cell = {k: _cell(row, i) for k, i in cols.items()}
        try:
            if not cell["path"]:
                raise ValueError("no audio file path")
            event = Event(
                audio=cell["path"],
                start_s=_number(cell["start"], "start_s"),
                end_s=_number(cell["end"], "end_s"),
                label=cell["label"],
                channel=_channel(cell["channel"], first=0),
                source=source,
                line=number,
            )
            events.append(_checked(event))
        except ValueError as e:
            errors.append(RowError(source, number, str(e)))
    return events, errors


def match_events(
    events: Iterable[Event], paths: Sequence[str]
) -> tuple[dict[str, list[Event]], list[RowError]]:
    """Assigns events to input files; an unknown or ambiguous file is a row error.

    A path key matches by its longest trailing part that ends an input path (a Raven ``Begin
    Path`` written on another machine, ``C:\\data\\x.wav``, matches ``gs://b/data/x.wav``); a stem
    key matches the input whose file name without extension is that stem.

    Returns:
      ({input path: its events in table order}, errors).
    """
    by_name: dict[str, list[str]] = {}  # file name -> the paths ending in it
    by_stem: dict[str, list[str]] = {}
    for path in paths:
        name = _name(path)
        by_name.setdefault(name, []).append(path)
        by_stem.setdefault(name.rsplit(".", 1)[0], []).append(path)
    matched: dict[str, list[Event]] = {}
    errors = []
    for event in events:
        if event.by_stem:
            found = by_stem.get(event.audio, [])
        else:
            parts = _parts(event.audio)
            found = _longest_suffix(parts, by_name.get(parts[-1], ())) if parts else []
        if len(found) == 1:
            matched.setdefault(found[0], []).append(event)
            continue
        what = "no input file" if not found else f"{len(found)} input files ({', '.join(found)})"
        name = f"stem {event.audio!r}" if event.by_stem else repr(event.audio)
        errors.append(RowError(event.source, event.line, f"audio file {name} matches {what}"))
    return matched, errors


def check_events(
    events: Iterable[Event], *, num_frames: int, sample_rate: int, num_channels: int
) -> tuple[list[Event], list[RowError]]:
    """Keeps the events inside the file (duration and channels); the rest are row errors."""
    duration = num_frames / sample_rate
    kept, errors = [], []
    for e in events:
        if e.start_s >= duration:
            reason = f"starts at {e.start_s:g} s, at or after the file's end ({duration:g} s)"
        elif e.end_s * sample_rate > num_frames + _SAMPLE_TOLERANCE:
            reason = f"ends at {e.end_s:g} s, beyond the file's duration ({duration:g} s)"
        elif e.channel is not None and e.channel >= num_channels:
            reason = f"channel {e.channel} (0-based) but the file has {num_channels} channel(s)"
        else:
            kept.append(e)
            continue
        errors.append(RowError(e.source, e.line, reason))
    return kept, errors


def event_classes(
    events: Mapping[str, Sequence[Event]], *, background_class: str | None
) -> tuple[str, ...]:
    """The sorted class list: every event label, plus `background_class` unless None."""
    names = {e.label for evs in events.values() for e in evs}
    if background_class is not None:
        names.add(background_class)
    return tuple(sorted(names))


def _raven_label_column(header: list[str], wanted: str | None) -> int | None:
    if wanted is not None:
        return header.index(wanted) if wanted in header else None
    if RAVEN_DEFAULT_LABEL in header:
        return header.index(RAVEN_DEFAULT_LABEL)
    i = _RAVEN_LABEL_INDEX - 1
    return i if len(header) > i and not _RAVEN_OWN.match(header[i]) else None


def _csv_header(row: list[str]) -> dict[str, int | None] | None:
    """Column positions when `row` is a header naming at least path/start/end/label."""
    names = [c.strip().lower() for c in row]
    found: dict[str, int | None] = {}
    for key, aliases in _CSV_NAMES.items():
        found[key] = next((names.index(a) for a in aliases if a in names), None)
    required = ("path", "start", "end", "label")
    return found if all(found[k] is not None for k in required) else None


def _cell(row: list[str], i: int | None) -> str:
    return row[i].strip() if i is not None and i < len(row) else ""


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{what} is not a finite number: {text!r}")
    return value


def _channel(text: str, *, first: int) -> int | None:
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"channel is not an integer: {text!r}") from None
    if value < first:
        raise ValueError(f"channel {value} < {first} (the first channel is {first})")
    return value - first


def _checked(event: Event) -> Event:
    if not event.label:
        raise ValueError("no label")
    if "\n" in event.label or "\r" in event.label:
        raise ValueError(f"label {event.label!r} contains a line break")
    if event.start_s < 0:
        raise ValueError(f"start {event.start_s:g} s is negative")
    if event.end_s < event.start_s:
        raise ValueError(f"end {event.end_s:g} s is before start {event.start_s:g} s")
    if event.end_s == event.start_s:
        raise ValueError(f"zero-length event at {event.start_s:g} s (a point label)")
    return event


def _parts(path: str) -> list[str]:
    return [p for p in path.replace("\\", "/").split("/") if p]


def _name(path: str) -> str:
    """The last part of `path` (`_parts(path)[-1]`)."""
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def _longest_suffix(parts: list[str], candidates: Sequence[str]) -> list[str]:
    """The `candidates` (paths of the same file name) that end with the longest trailing part
    of `parts` any of them ends with; [] if none."""
    held = [(path, _parts(path)) for path in candidates]
    for i in range(len(parts)):
        key, n = parts[i:], len(parts) - i
        found = [path for path, have in held if have[-n:] == key]
        if found:
            return found
    return []
