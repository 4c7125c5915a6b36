"""Where one object travels through our code: the modules and folders its calls enter.

    python benchmarks/call_walk.py                      # run_job's config and a read task
    python benchmarks/call_walk.py --follow config      # one of them
    python benchmarks/call_walk.py --plan_in job        # the run planned in the job

Records the bundled sample (``data/sample/*.wav``, the README's options, the in-memory
DirectRunner, one process) with a profile hook on every thread (`sys.setprofile`,
`threading.setprofile`) and follows two objects by identity:

- ``config``: the `RecordConfig` given to `pipelines.job.run_job`;
- ``task``: the first `ReadTask` given to the read stage's ``ReadTaskFn.process``.

A call *carries* the object when one of the callee's parameters is the object or a part of it
(an object reached from it through dataclass fields, attributes and container items, three
steps deep; numbers, strings and None are not followed: equal values are not the object); the
object's own methods (``self``) do not count: they are the object's, not a step of its way. For
each carrying call into a module of this repository, the caller is the nearest frame outside
the standard library; the call *enters* its module when the caller's module is another one of
ours (a call from Beam or another library, e.g. Beam invoking a DoFn, enters nothing), and
*crosses* a folder when the caller's folder (``pipelines``, ``pipelines/plan``,
``transforms/stages``, ``transforms/spec``, ...) is another one. Printed: entries per module and
crossings per folder pair, as JSON with ``--json``.

This is a measurement of the code's structure (docs/code-layout.md), not of its speed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD_ARGS = ["--input_pattern", str(ROOT / "data/sample/*.wav"), "--win_len", "16000"]
BEAM_ARGS = ["--runner", "DirectRunner", "--direct_running_mode", "in_memory"]
OURS = tuple(str(ROOT / d) + os.sep for d in ("pipelines", "transforms", "runners", "replay"))


def _module(filename: str) -> str | None:
    """``pipelines/plan/sizing.py`` for a file of ours, else None."""
    if not filename.startswith(OURS):
        return None
    return os.path.relpath(filename, ROOT)


def _folder(module: str) -> str:
    return os.path.dirname(module)


_STDLIB = (sysconfig.get_paths()["stdlib"] + os.sep, "<")  # and frozen / generated code
_LEAVES = (int, float, str, bytes, bool, type(None))


def parts(obj: Any, depth: int = 3) -> dict[int, Any]:
    """`obj` and the objects reached from it, by id (kept alive by the dict)."""
    found: dict[int, Any] = {}
    frontier = [obj]
    for _ in range(depth + 1):
        following = []
        for o in frontier:
            if isinstance(o, _LEAVES) or id(o) in found:
                continue
            found[id(o)] = o
            if isinstance(o, dict):
                following.extend(list(o.values())[:1000])
            elif isinstance(o, (list, tuple, set, frozenset)):
                following.extend(list(o)[:1000])
            elif hasattr(o, "__dict__"):
                following.extend(vars(o).values())
            elif hasattr(o, "__slots__"):
                following.extend(getattr(o, s, None) for s in o.__slots__)
        frontier = following
    return found


class Walk:
    """Counts the calls that carry one object (or a part of it) into our modules."""

    def __init__(self) -> None:
        self.target: Any = None
        self.ids: dict[int, Any] = {}
        self.entries: collections.Counter[str] = collections.Counter()
        self.crossings: collections.Counter[str] = collections.Counter()
        self.calls = 0

    def visit(self, frame: FrameType) -> None:
        code = frame.f_code
        module = _module(code.co_filename)
        if module is None:
            return
        nargs = code.co_argcount + code.co_kwonlyargcount
        f_locals = frame.f_locals
        ids = self.ids
        names = [n for n in code.co_varnames[:nargs] if n not in ("self", "cls")]
        if not any(id(f_locals.get(name)) in ids for name in names):
            return
        self.calls += 1
        caller = frame.f_back
        while caller is not None and caller.f_code.co_filename.startswith(_STDLIB):
            caller = caller.f_back
        source = _module(caller.f_code.co_filename) if caller is not None else None
        if source is None or source == module:
            return
        self.entries[module] += 1
        if _folder(source) != _folder(module):
            self.crossings[f"{_folder(source)} -> {_folder(module)}"] += 1

    def follow(self, target: Any) -> None:
        self.target = target
        self.ids = parts(target)

    def report(self) -> dict:
        return {
            "carrying_calls": self.calls,
            "module_entries": dict(self.entries.most_common()),
            "folder_crossings": sum(self.crossings.values()),
            "by_folder_pair": dict(self.crossings.most_common()),
        }


def walk(plan_in: str) -> dict[str, dict]:
    """Records the sample once with the hook on; returns each followed object's report."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.config import RecordConfig
    from pipelines.job import run_job
    from pipelines.record import RecordOptions
    from transforms.spec.types import ReadTask

    out = tempfile.mkdtemp(prefix="call-walk-")
    try:
        args = [*RECORD_ARGS, "--output_dir", os.path.join(out, "ds")]
        config = RecordConfig.from_namespace(PipelineOptions(args).view_as(RecordOptions))
        walks = {"config": Walk(), "task": Walk()}
        walks["config"].follow(config)

        def hook(frame: FrameType, event: str, arg: Any) -> None:
            if event != "call":
                return
            task_walk = walks["task"]
            if (
                task_walk.target is None
                and frame.f_code.co_name == "process"
                and isinstance(frame.f_locals.get("task"), ReadTask)
            ):
                task_walk.follow(frame.f_locals["task"])
            for w in walks.values():
                if w.target is not None:
                    w.visit(frame)

        threading.setprofile(hook)
        sys.setprofile(hook)
        try:
            run_job(config, beam_argv=BEAM_ARGS, plan_in_job=plan_in == "job")
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        return {name: w.report() for name, w in walks.items()}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--follow", choices=("config", "task", "both"), default="both")
    parser.add_argument("--plan_in", choices=("launcher", "job"), default="launcher")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    args = parser.parse_args(argv)
    reports = walk(args.plan_in)
    if args.follow != "both":
        reports = {args.follow: reports[args.follow]}
    if args.json:
        print(json.dumps(reports, indent=2))
        return
    for name, report in reports.items():
        print(f"\n{name}: {report['carrying_calls']} calls carry it")
        print(f"  folder crossings: {report['folder_crossings']}")
        for pair, n in report["by_folder_pair"].items():
            print(f"    {n:4d}  {pair}")
        print("  module entries:")
        for module, n in report["module_entries"].items():
            print(f"    {n:4d}  {module}")


if __name__ == "__main__":
    main()
