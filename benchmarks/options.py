"""The options every scenario spells the same way: corpus length, repeats, epochs, work dir, JSON.

A scenario makes its parser with `parser` and adds the common options it takes with `common`
(each with the scenario's own default); its own options follow.
"""

from __future__ import annotations

import argparse

from benchmarks.corpus import DEFAULT_DIR


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A scenario's parser, described by the first paragraph of its module's docstring."""
    description = (doc or "").strip().split("\n\n")[0]
    return argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def common(
    parser: argparse.ArgumentParser,
    *,
    minutes: float | None = None,
    pcm16: bool = False,
    repeats: int | None = None,
    epochs: int | None = None,
    work_dir: bool = True,
    json: bool = True,
) -> argparse.ArgumentParser:
    """Adds the common options a scenario takes; None / False leaves an option out.

    Args:
      parser: the scenario's parser.
      minutes: ``--minutes``' default, the corpus length (`benchmarks.corpus`).
      pcm16: whether ``--pcm16`` (the corpus without the 24-bit real file) is taken.
      repeats: ``--repeats``' default, the runs of each system.
      epochs: ``--epochs``' default, the warm epochs a replay process times.
      work_dir: whether ``--dir`` (the corpus and output cache, ``$AUDIORECORDS_BENCH_DIR``)
        is taken.
      json: whether ``--json PATH`` (append the raw rows to this JSON file) is taken.

    Returns:
      `parser`.
    """
    if minutes is not None:
        parser.add_argument("--minutes", type=float, default=minutes, help="corpus length")
    if pcm16:
        parser.add_argument("--pcm16", action="store_true", help="corpus without the 24-bit file")
    if repeats is not None:
        parser.add_argument("--repeats", type=int, default=repeats, help="runs of each system")
    if epochs is not None:
        parser.add_argument("--epochs", type=int, default=epochs, help="warm epochs per process")
    if work_dir:
        parser.add_argument("--dir", default=DEFAULT_DIR, help="corpus and output cache dir")
    if json:
        parser.add_argument("--json", default=None, help="append the raw rows to this JSON file")
    return parser
