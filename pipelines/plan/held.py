"""``--append`` planned in the job: the listing joined with the dataset's source tables by path.

The launcher of an append planned in the job (`pipelines.append_plan.plan_append` with
``in_job``) reads the latest manifest and lists the inputs; it never holds the set of paths the
dataset holds. The job's plan step (`pipelines.plan.in_job.PlanInJob`) puts `NewInputs` between
the staged listing and the header reads::

    listing batches -> (path, file) ----------------------------.
    the dataset's files / errors tables (one element a table file) -> (path, (order, stamp))
        -> CoGroupByKey by path -> Compare: new files by listing batch, changed ones (tagged)
    changed -> FirstChanged (count, the first in listing order), one element
    new -> GroupByKey by listing batch -> NewCounts ({batch: count}, one element)
        -> NewStarts (refuses changed inputs, then nothing new: the launcher's lines)
    new by listing batch + NewStarts (side input) -> Renumber -> GroupByKey by new batch
        -> batches of the new files (index order), as a fresh run of them is batched

A new file's index is the dataset's next one plus its rank among the new files in listing
order, as the launcher numbers them (`pipelines.plan.listing.list_inputs` with the held paths
left out), so the plan and the records are the launcher-planned append's byte for byte. Every
step holds one table file's line, one path's group or one batch at a time.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping
from operator import attrgetter, itemgetter
from typing import Any

import apache_beam as beam

from pipelines.config import UsageError
from pipelines.plan.types import HeldTables
from transforms.spec.types import InputFile

LISTED, HELD = "listed", "held"  # the join's two sides
CHANGED_TAG = "changed"  # (listing index, path) of an input the dataset holds, changed
NEW_INPUTS = "new_inputs"  # counter: the files the append plans
HeldEntry = tuple[tuple[int, int, int], tuple[int, float] | None]  # (order, recorded stamp)


def held_entries(numbered: tuple[int, tuple[Any, ...]], held: HeldTables) -> Iterator[Any]:
    """One table file of the dataset (`HeldTables.parts`' item, numbered) -> (path, (order,
    its recorded (size, modification time) or None)) of each entry, read a line at a time.
    `order` ranks the entries of a path as `pipelines.append_plan.read_dataset` overrides
    them: a files entry over an errors one, a later commit's over an earlier one.

    Raises:
      UsageError: the table does not read back (the launcher's line for a dataset that does
        not).
    """
    from pipelines.append_plan import no_dataset_refusal
    from replay.errors import ReplayError
    from replay.tables import table_entries

    number, (name, path, expected, count, key) = numbered
    kind = int(name == "files")
    try:
        for line, entry in enumerate(
            table_entries(held.dataset_dir, name, path, expected, count, key)
        ):
            stamped = kind and "size_bytes" in entry and "modified" in entry
            stamp = (entry["size_bytes"], float(entry["modified"])) if stamped else None
            yield entry["path"], ((kind, number, line), stamp)
    except ReplayError as e:
        raise UsageError(no_dataset_refusal(held.dataset_dir, e)) from e


def by_path(files: list[InputFile]) -> Iterator[tuple[str, InputFile]]:
    """A batch of the listing -> (path, file) of each."""
    return ((f.path, f) for f in files)


def compare(
    keyed: tuple[str, Mapping[str, Iterable[Any]]], held: HeldTables, batch_size: int
) -> Iterator[Any]:
    """(path, its listed file and held entries) -> (listing batch, file) of a new file, or
    (listing index, path) tagged ``changed`` for a held one recorded with another size or
    modification time (`pipelines.append_plan.changed_inputs`); nothing for one unchanged."""
    _, grouped = keyed
    for f in grouped[LISTED]:  # one: the listing's paths are distinct
        entries: list[HeldEntry] = list(grouped[HELD])
        if not entries:
            yield (f.index - held.first_index) // batch_size, f
            continue
        recorded = max(entries, key=itemgetter(0))[1]
        if recorded is not None and recorded != (f.size_bytes, float(f.modified)):
            yield beam.pvalue.TaggedOutput(CHANGED_TAG, (f.index, f.path))


class FirstChanged(beam.CombineFn):
    """(listing index, path) of changed inputs -> (how many, the first's (index, path) or
    None)."""

    def create_accumulator(self) -> tuple[int, tuple[int, str] | None]:
        return 0, None

    def add_input(self, acc: Any, item: tuple[int, str]) -> Any:
        count, first = acc
        return count + 1, item if first is None else min(first, item)

    def merge_accumulators(self, accs: Iterable[Any]) -> Any:
        accs = list(accs)
        found = [first for _, first in accs if first is not None]
        return sum(count for count, _ in accs), min(found, default=None)

    def extract_output(self, acc: Any) -> Any:
        return acc


def sorted_batch(keyed: tuple[int, Iterable[InputFile]]) -> tuple[int, list[InputFile]]:
    """(listing batch, its new files) -> the files in index (listing) order."""
    batch, files = keyed
    return batch, sorted(files, key=_INDEX)


def new_starts(
    counts: Mapping[int, int], changed: tuple[int, tuple[int, str] | None], held: HeldTables
) -> dict[int, int]:
    """{listing batch: its new files} -> {listing batch: the new files before it}.

    Raises:
      UsageError: an input the dataset holds changed (unless ``--append_changed skip``), or
        no new file: the launcher-planned append's lines.
    """
    from pipelines.append_plan import changed_refusal, nothing_new_refusal

    count, first = changed
    if count and not held.skip_changed:
        raise UsageError(changed_refusal(count, first[1] if first else ""))
    if not counts:
        raise UsageError(nothing_new_refusal(held.input_pattern, held.dataset_dir, held.version))
    starts, total = {}, 0
    for batch in sorted(counts):
        starts[batch] = total
        total += counts[batch]
    beam.metrics.Metrics.counter("record", NEW_INPUTS).inc(total)
    return starts


def renumber(
    keyed: tuple[int, list[InputFile]],
    starts: Mapping[int, int],
    held: HeldTables,
    batch_size: int,
) -> Iterator[tuple[int, list[InputFile]]]:
    """(listing batch, its new files) -> (header batch, its files of them) with their indexes
    the dataset's next ones: `HeldTables.first_index` + the rank among the new files."""
    batch, files = keyed
    ranked = enumerate(files, start=starts[batch])
    for target, piece in itertools.groupby(ranked, key=lambda rf: rf[0] // batch_size):
        yield target, [dataclasses.replace(f, index=held.first_index + r) for r, f in piece]


def merged_batch(keyed: tuple[int, Iterable[list[InputFile]]]) -> list[InputFile]:
    """(header batch, its pieces) -> its files in index order."""
    return sorted((f for piece in keyed[1] for f in piece), key=_INDEX)


_INDEX = attrgetter("index")


class NewInputs(beam.PTransform):
    """Batches of the whole listing (`pipelines.plan.in_job.batches`: index order, numbered from
    `HeldTables.first_index`) -> batches of `batch_size` of the inputs the dataset does not
    hold, numbered after its own (see the module's docstring)."""

    def __init__(self, held: HeldTables, *, batch_size: int) -> None:
        super().__init__()
        self._held = held
        self._batch_size = batch_size

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        held, size = self._held, self._batch_size
        listed = batches | "ByPath" >> beam.FlatMap(by_path)  # (path, InputFile)
        recorded = (  # (path, HeldEntry)
            batches.pipeline
            | "TableFiles" >> beam.Create(list(enumerate(held.parts)), reshuffle=False)
            | "SpreadTables" >> beam.Reshuffle()
            | "HeldEntries" >> beam.FlatMap(held_entries, held)
        )
        compared = (
            {LISTED: listed, HELD: recorded}
            | "JoinByPath" >> beam.CoGroupByKey()
            | "Compare" >> beam.FlatMap(compare, held, size).with_outputs(CHANGED_TAG, main="new")
        )
        changed = compared[CHANGED_TAG] | "FirstChanged" >> beam.CombineGlobally(FirstChanged())
        by_batch = (  # (listing batch, its new files in index order)
            compared.new
            | "ByListingBatch" >> beam.GroupByKey()
            | "SortedBatch" >> beam.Map(sorted_batch)
        )
        starts = (  # {listing batch: new files before it}, one element
            by_batch
            | "BatchCounts" >> beam.MapTuple(lambda batch, files: (batch, len(files)))
            | "NewCounts" >> beam.combiners.ToDict()
            | "NewStarts" >> beam.Map(new_starts, beam.pvalue.AsSingleton(changed), held)
        )
        return (
            by_batch
            | "Renumber" >> beam.FlatMap(renumber, beam.pvalue.AsSingleton(starts), held, size)
            | "ByHeaderBatch" >> beam.GroupByKey()
            | "NewBatches" >> beam.Map(merged_batch)
        )
