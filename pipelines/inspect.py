"""Inspect a recorded dataset: what ``tfds`` prints for a dataset, plus an optional HTML report.

Usage::

    python -m pipelines.inspect out/                         # text summary (manifest only)
    python -m pipelines.inspect out/ --report report.html    # + self-contained HTML page
    python -m pipelines.inspect out/ --plots plots/          # + one PNG per figure
    python -m pipelines.inspect out/ --version 1             # an earlier dataset version

The summary reads only manifest.json (`replay.load_info`): element spec, counts per split and
class, shard sizes, compression, parameters, failed source files, versions, creation time, and
for a dataset appended to (format version 5) its dataset versions, one line each. The
report and plots also read a bounded sample of elements (`--max_elements`, default 2,000) for the
example windows and feature statistics. Nothing here imports Beam or tensorflow-transform.

A missing or incomplete dataset prints one ``error: ...`` line to stderr and exits with code 2.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.tools import report
from replay import DatasetInfo, ReplayError, load_info


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (`argv` without the program name; None: sys.argv)."""
    from pipelines.tools.report_sample import (
        DEFAULT_EXAMPLES_PER_CLASS,
        DEFAULT_MAX_CLASSES,
        DEFAULT_MAX_ELEMENTS,
    )

    parser = argparse.ArgumentParser(
        prog="python -m pipelines.inspect",
        description="Summarise an audiorecords dataset; optionally draw an HTML report / PNGs.",
    )
    parser.add_argument("dataset", help="dataset directory (holds manifest.json)")
    parser.add_argument(
        "--version",
        type=int,
        help="the dataset version to inspect (default: the latest; each append adds one)",
    )
    parser.add_argument("--report", metavar="FILE.html", help="write a self-contained HTML report")
    parser.add_argument("--plots", metavar="DIR", help="write each figure as DIR/<name>.png")
    parser.add_argument(
        "--max_elements",
        type=int,
        default=DEFAULT_MAX_ELEMENTS,
        help="elements sampled for the example grid and feature statistics (default %(default)s)",
    )
    parser.add_argument(
        "--examples_per_class",
        type=int,
        default=DEFAULT_EXAMPLES_PER_CLASS,
        help="example windows per class in the grid (default %(default)s)",
    )
    parser.add_argument(
        "--max_classes",
        type=int,
        default=DEFAULT_MAX_CLASSES,
        help="classes in the example grid, first in target order (default %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="shard shuffle seed of the sample")
    args = parser.parse_args(argv)
    for name in ("max_elements", "examples_per_class", "max_classes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    return args


def draw(info: DatasetInfo, args: argparse.Namespace, summary: str) -> list[str]:
    """Samples elements, renders the figures and writes the report / plots; returns the paths."""
    from pipelines.tools import report_html, report_plots, report_sample

    sample = report_sample.sample_elements(
        info,
        max_elements=args.max_elements,
        examples_per_class=args.examples_per_class,
        max_classes=args.max_classes,
        seed=args.seed,
    )
    plots = report_plots.build_plots(info, sample)
    written = []
    if args.plots:
        written += [str(p) for p in report_html.write_plots(args.plots, plots)]
    if args.report:
        page = report_html.render_html(
            title=f"audiorecords dataset {info.path}",
            subtitle=(
                f"{info.num_examples()} windows, {info.num_classes} classes, "
                f"{info.num_files} source files ({info.num_errors} failed), "
                f"{info.compression} shards; created {info.created_utc or '-'}"
            ),
            summary=summary,
            plots=plots,
        )
        written.append(str(report_html.write_report(args.report, page)))
    return written


def run(argv: list[str] | None = None) -> int:
    """Prints the summary of the dataset in `argv` (and writes the report); returns the exit code.

    Args:
      argv: command-line arguments without the program name (None: sys.argv[1:]).

    Returns:
      0 on success, 2 when the dataset is missing, incomplete or unreadable.
    """
    args = parse_args(argv)
    try:
        info = load_info(args.dataset, version=args.version)
        summary = report.format_summary(info)
        print(summary, end="")
        if args.report or args.plots:
            for path in draw(info, args, summary):
                print(f"wrote {path}")
    except (ReplayError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    _args = parse_args(sys.argv[1:])
    if _args.report or _args.plots:  # example windows are read with TensorFlow: quietly
        from runners.quiet import quiet_tensorflow

        quiet_tensorflow()
    sys.exit(run())
