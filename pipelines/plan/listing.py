"""Inputs, labels and splits: match the files, label them, read their headers (`scan_inputs`).

`list_inputs` makes no request a file (the class list file, the listing, the label CSV, the
annotation tables, matched to the files by `match_annotations`; the reads are in
`pipelines.plan.reads`); `label_inputs` gives each matched file its index, label and split
(pure); `read_headers` reads every header, resolves the signal dtype, checks the output
directory and fixes the annotated files' windows. `launcher_windows_config` is the read
configuration a run planned in the job knows in the launcher (one header read at most).
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pipelines.config import RecordConfig, UsageError, require
from pipelines.plan import annotated
from pipelines.plan.checks import check_inputs, check_output_dir
from pipelines.plan.reads import (
    match_stamped,
    output_dir_state,
    read_annotation_tables,
    read_classes_file,
    read_csv_labels,
    scan_headers,
)
from pipelines.plan.sizing import feature_shapes, windows_config
from pipelines.plan.splits import pattern_base, split_of
from pipelines.plan.types import Continuation, ScannedInputs
from replay import format as fmt
from transforms.audio import labels
from transforms.spec.types import FileEvents, InputFile, ReadWindowsConfig, Sharding


def scan_inputs(
    config: RecordConfig,
    *,
    shard_func: Callable[[dict], int] | None = None,
    continuation: Continuation | None = None,
) -> ScannedInputs:
    """Matches the inputs, reads their labels and headers, checks the output directory.

    `list_inputs`, then `read_headers`: all of planning's I/O.
    """
    listed = list_inputs(config, shard_func=shard_func, continuation=continuation)
    return read_headers(config, listed)


def list_inputs(
    config: RecordConfig,
    *,
    shard_func: Callable[[dict], int] | None = None,
    continuation: Continuation | None = None,
) -> ScannedInputs:
    """Matches the inputs and labels them: no request a file (the class list file, the
    listing, the label CSV).

    With a `continuation` (``--append``) the inputs the dataset holds are left out (planned in
    the job, `Continuation.held`: every input is listed, its plan step leaves them out), the
    others are numbered after its own and split by its rule; the listing it hands over
    (`Continuation.stamps`) is not made again. The result's inputs have no header and
    its `signal_dtype` is empty (`read_headers` reads and resolves them).

    Raises:
      UsageError: no input, an unreadable class list or label CSV.
    """
    try:
        fixed_classes = labels.parse_classes(config.classes, read_text=read_classes_file)
    except ValueError as e:
        raise UsageError(str(e)) from e
    handed = None if continuation is None or continuation.stamps is None else continuation.stamps
    given = None if handed is None else handed.take()
    stamps = tuple(match_stamped(config.input_pattern)) if given is None else tuple(given)
    del given
    if continuation is not None and continuation.known:
        stamps = tuple(s for s in stamps if s[0] not in continuation.known)
    require(bool(stamps), f"--input_pattern {config.input_pattern!r} matches no file")
    _, csv_path = labels.parse_label_source(config.label_source)
    csv_labels = read_csv_labels(csv_path) if csv_path else None
    sharding = Sharding(
        shard_by=config.shard_by,
        splits=config.split_weights,
        split_base=(
            pattern_base(config.input_pattern) if continuation is None else continuation.split_base
        ),
        elements_per_shard=config.elements_per_shard,
        max_elements=config.max_elements,
        shard_func=shard_func,
    )
    labelled = label_inputs(
        stamps,
        config,
        csv_labels=csv_labels,
        fixed_classes=fixed_classes,
        sharding=sharding,
        first_index=0 if continuation is None else continuation.first_index,
    )
    # (label, error), each once
    pairs = set(zip(map(_LABEL, labelled), map(_ERROR, labelled), strict=True))
    classes = labels.run_classes((label for label, error in pairs if error is None), fixed_classes)
    sharding = dataclasses.replace(
        sharding, classes=tuple(sorted({label for label, _ in pairs if label}))
    )
    listed = ScannedInputs(
        output_dir=config.output_dir.rstrip("/") or "/",
        inputs=tuple(labelled),
        classes=classes,
        sharding=sharding,
        signal_dtype="",
        stamps=stamps,
        fixed_classes=fixed_classes,
    )
    return listed if config.annotation_config is None else match_annotations(config, listed)


def match_annotations(config: RecordConfig, listed: ScannedInputs) -> ScannedInputs:
    """`listed` with the annotation tables read and matched to its inputs, no header read
    (`annotated.match_tables`): each input named by a row gets its rows (`FileEvents`), the
    class list is fixed, the rows refused so far are its `table_errors`.

    Raises:
      UsageError: the tables' pattern matches nothing; ``--classes`` without the background.
    """
    annotation_config = config.annotation_config
    try:
        events, table_errors = read_annotation_tables(annotation_config)
        matched = annotated.match_tables(
            [f.path for f in listed.inputs],
            events,
            table_errors,
            config=annotation_config,
            fixed_classes=listed.fixed_classes,
        )
    except ValueError as e:
        raise UsageError(str(e)) from e
    del events
    found = matched.events
    inputs = tuple(
        f if f.path not in found else dataclasses.replace(f, annotation=FileEvents(found[f.path]))
        for f in listed.inputs
    )
    return dataclasses.replace(
        listed,
        inputs=inputs,
        classes=matched.classes,
        max_events=1,
        table_errors=matched.errors,
    )


def label_inputs(
    matched: Sequence[tuple[str, int] | tuple[str, int, float]],
    config: RecordConfig,
    *,
    csv_labels: Mapping[str, str] | None,
    fixed_classes: tuple[str, ...] | None,
    sharding: Sharding,
    first_index: int = 0,
) -> list[InputFile]:
    """(path, size[, modification time]) -> `InputFile`s with index (from `first_index`),
    label and split (pure).

    Class ids come from every usable label, known here: never from the data. A file without a
    label, or whose label is outside ``--classes`` (unless ``--unknown_class keep``), gets its
    `error`. With ``--annotations`` the labels come from the tables later: every label is "".
    """
    kind, _ = labels.parse_label_source(config.label_source)
    if matched and set(map(len, matched)) == {3}:  # (path, size, time) each: as columns
        paths, sizes, times = map(list, zip(*matched, strict=True))
        modified = times if set(map(type, times)) == {float} else list(map(float, times))
    else:
        paths = [stamp[0] for stamp in matched]
        sizes = [stamp[1] for stamp in matched]
        modified = [float(stamp[2]) if len(stamp) > 2 else 0.0 for stamp in matched]
    indexes = range(first_index, first_index + len(paths))
    one_split = None if sharding.splits else fmt.ALL_SPLIT  # else hashed from each path
    splits = itertools.repeat(one_split) if one_split else [split_of(p, sharding) for p in paths]
    if config.annotations:  # the tables label the files
        label_column, error_column = itertools.repeat(""), itertools.repeat(None)
    else:
        keep_unknown = config.unknown_class == "keep"
        # a label or LabelError -> (the one string of the label, why it is not a class or
        # None): one string per label (a dirname label is a new slice of each path) in the
        # plan and the pickled read tasks
        cells: dict[Any, tuple[str | None, str | None]] = {}
        found = labels.label_paths(paths, kind=kind, csv_labels=csv_labels)
        for label in dict.fromkeys(found):
            if isinstance(label, labels.LabelError):
                cells[label] = (None, str(label).split(": ", 1)[-1])
            else:
                refusal = labels.class_error(label, fixed_classes, keep_unknown=keep_unknown)
                cells[label] = (sys.intern(label), refusal)
        labelled = list(map(cells.__getitem__, found))
        label_column = map(operator.itemgetter(0), labelled)
        error_column = map(operator.itemgetter(1), labelled)
    return list(
        map(
            InputFile,
            indexes,
            paths,
            sizes,
            label_column,
            splits,
            itertools.repeat(None),  # info
            error_column,
            itertools.repeat(None),  # annotation
            modified,
        )
    )


_LABEL = operator.attrgetter("label")
_ERROR = operator.attrgetter("error")


def read_headers(config: RecordConfig, listed: ScannedInputs) -> ScannedInputs:
    """`listed` (`list_inputs`) with every file's header read and the signal dtype resolved;
    checks the output directory and, with ``--annotations``, fixes each file's windows from its
    matched rows (`annotated.annotate`).

    Raises:
      UsageError: no dtype for every file, a bad file or a bad table row with ``--strict``, an
        output directory we may not replace.
    """
    inputs = scan_headers(list(listed.inputs))
    dtype = check_inputs(config, inputs)
    check_output_dir(config, listed.output_dir, output_dir_state(listed.output_dir))
    scanned = dataclasses.replace(listed, inputs=inputs, signal_dtype=dtype)
    if config.annotation_config is None:
        return scanned
    try:  # every file's windows and labels, from its matched rows (`match_annotations`)
        inputs, notes = annotated.annotate(inputs, config=config, listed=listed)
    except ValueError as e:
        raise UsageError(str(e)) from e
    return dataclasses.replace(
        scanned,
        inputs=inputs,
        max_events=notes.max_events,
        annotation_errors=notes.errors,
        table_errors=(),
    )


def launcher_windows_config(config: RecordConfig, listed: ScannedInputs) -> ReadWindowsConfig:
    """The read configuration the launcher can know without reading every header: the
    feature shapes at ``--sample_rate`` or the first readable file's rate (a header read per
    file tried, in index order, until one reads); the signal dtype is ``--signal_dtype`` as
    given (the plan step resolves ``auto``)."""
    first: tuple[InputFile, ...] = ()
    if config.feature_names and not config.sample_rate:
        for f in listed.inputs:
            if f.error is None:
                (headed,) = scan_headers([f])
                if headed.info is not None:
                    first = (headed,)
                    break
    shapes = feature_shapes(config, first)
    scanned = dataclasses.replace(listed, signal_dtype=config.signal_dtype)
    return windows_config(config, scanned, shapes)
