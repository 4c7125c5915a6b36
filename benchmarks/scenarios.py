"""The benchmark tool: each scenario, the question it answers, and running one by its name.

    python -m benchmarks                       # the scenarios, a question each
    python -m benchmarks <scenario> --help     # its options
    python -m benchmarks <scenario> [args]     # run it

A scenario is a module of this folder and its entry point (the arguments after the name go to
it); a peer scenario runs one peer (the tf.data script, the seed-style script, ``Dataset.save``,
Hugging Face ``datasets``, ...) on a corpus, as the comparing scenarios run it. This module
imports only the standard library until a scenario runs: the peers' interpreters (Hugging Face's,
MosaicML Streaming's) run it too.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable, Sequence


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One named benchmark.

    Attributes:
      name: what ``python -m benchmarks`` takes.
      module: the module under ``benchmarks`` that runs it.
      question: the question its figures answer, one line.
      example: a typical command line (after ``python -m benchmarks``).
      entry: the module's function given the arguments (a list of strings).
      args: arguments put before the user's (a peer's mode).
    """

    name: str
    module: str
    question: str
    example: str = ""
    entry: str = "main"
    args: tuple[str, ...] = ()

    def runner(self) -> Callable[[list[str]], object]:
        """The scenario's entry point, imported."""
        return getattr(importlib.import_module(f"benchmarks.{self.module}"), self.entry)


# The comparisons first, then the product's own questions, then the peers run alone.
SCENARIOS = (
    Scenario(
        "record", "record_bench",
        "is record faster than the peers (tf.data script, seed-style, Dataset.save)? memory, "
        "scaling, fixed cost",
        "record --minutes 30 --pcm16 --repeats 3 --systems ours,tfdata,seed,save,floor",
    ),
    Scenario(
        "replay", "replay_bench",
        "is replay faster than the peers' readers on long files (batch 64, shuffle, reads)?",
        "replay --minutes 30 --pcm16 --repeats 2 --epochs 16",
    ),
    Scenario(
        "clips", "clips_bench",
        "record of 10,240 one-second clips against the seed-style script and HF datasets",
        "clips --repeats 2 --hf_python /tmp/hf-venv/bin/python",
    ),
    Scenario(
        "replay_clips", "replay_clips_bench",
        "replay of clips against HF datasets, ordered and shuffled; shuffle quality",
        "replay_clips --repeats 2 --hf_python /tmp/hf-venv/bin/python",
    ),
    Scenario(
        "frameworks", "frameworks_bench",
        "PyTorch, Grain, HF and MosaicML Streaming over the clips against our global order",
        "frameworks --repeats 2 --hf_python /tmp/hf-venv/bin/python "
        "--streaming_python /tmp/streaming-venv/bin/python",
    ),
    Scenario(
        "global_order", "global_order_bench",
        "the global read order: shuffle quality, windows/s against the ordered reader, resume "
        "latency, GZIP",
        "global_order --parts quality,throughput,resume,gzip",
    ),
    Scenario(
        "resume", "resume_bench",
        "what --resume after a kill at 80% of the reads costs against a full run",
        "resume --minutes 480 --pcm16 --repeats 2",
    ),
    Scenario(
        "append", "append_bench",
        "does --append of 1% / 10% cost only the new files' time, opening no old shard?",
        "append --repeats 3",
    ),
    Scenario(
        "object_store", "object_store_bench",
        "what writing the dataset to gs:// costs against the local disk (--launcher: planning "
        "in the job on gs://)",
        "object_store --repeats 2",
    ),
    Scenario(
        "scale", "scale_bench",
        "1,000 against 100,000 clips: wall, peak memory, planning, manifest and files table",
        "scale --sizes 1000,100000 --long",
    ),
    Scenario(
        "launcher", "launcher_profile",
        "the launcher's per-file steps at 10^3-10^5 clips against FileSystems.match alone",
        "launcher --in-job --repeat 3",
    ),
    Scenario(
        "translate", "translate_bench",
        "does the launcher of a run planned in the job, fresh or --resume'd, grow with the "
        "files (offline Dataflow translation against FileSystems.match)?",
        "translate --sizes 1024,102400 --repeats 3",
    ),
    Scenario(
        "large_inputs", "large_inputs",
        "a 2-h 48 kHz file and 10,000 tiny files in bounded memory (guarantee 7)",
        "large_inputs --case both",
        entry="run",
    ),
    Scenario(
        "source_decode", "source_decode_bench",
        "decoding a window without TensorFlow: replay.source against upb and tf.io.parse_example",
        "source_decode --records 1024 --compare 200",
    ),
    Scenario(
        "features", "features_numpy_vs_tf",
        "the numpy feature path against tf.signal's, one thread and two processes",
        "features --repeats 3",
    ),
    Scenario(
        "byte_identity", "byte_identity",
        "are two commits' outputs, tools' outputs and replay order byte-identical?",
        "byte_identity --base main --head HEAD",
    ),
    Scenario(
        "corpus", "corpus",
        "make the benchmark corpus (speech-like WAVs + the real recording) ahead of a run",
        "corpus --minutes 60",
    ),
    Scenario(
        "tfdata", "baselines",
        "peer (a): the plain tf.data + TFRecordWriter script on a corpus",
        "tfdata --input_dir DIR --output_dir OUT",
        args=("tfdata",),
    ),
    Scenario(
        "seed", "baselines",
        "peer: the seed-style script (serialize_tensor Examples) on a corpus",
        "seed --input_dir DIR --output_dir OUT [--label_source dirname]",
        args=("seed",),
    ),
    Scenario(
        "save", "baselines",
        "peer (b): tf.data.Dataset.save(compression='GZIP') on a corpus",
        "save --input_dir DIR --output_dir OUT",
        args=("save",),
    ),
    Scenario(
        "limit", "baselines",
        "peer (c): the feature computation alone on all cores, no I/O",
        "limit --input_dir DIR",
        args=("limit",),
    ),
    Scenario(
        "tft_min", "baselines",
        "peer floor: the smallest tensorflow-transform job",
        "tft_min",
        args=("tft_min",),
    ),
    Scenario(
        "hf", "hf_baseline",
        "peer: Hugging Face datasets (audiofolder, librosa log-mel map, save_to_disk)",
        "hf --data_dir CLIPS --output_dir OUT  (in the HF interpreter: requirements-hf.txt)",
    ),
)  # fmt: skip
BY_NAME = {s.name: s for s in SCENARIOS}


def listing() -> str:
    """The scenarios, one line each: name and question."""
    width = max(len(s.name) for s in SCENARIOS)
    lines = ["python -m benchmarks <scenario> [--help | args]", ""]
    lines += [f"  {s.name:<{width}}  {s.question}" for s in SCENARIOS]
    lines += ["", "benchmarks/README.md: which scenario answers which question, how to run it"]
    return "\n".join(lines)


def run(name: str, argv: Sequence[str]) -> int:
    """Runs scenario `name` with `argv`; its exit status.

    Raises:
      KeyError: no scenario of that name.
    """
    scenario = BY_NAME[name]
    runner = scenario.runner()
    program, sys.argv[0] = sys.argv[0], f"python -m benchmarks {name}"  # argparse's prog
    try:
        result = runner([*scenario.args, *argv])
    finally:
        sys.argv[0] = program
    return result if isinstance(result, int) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks [scenario [args]]``: the listing, or the scenario's run."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    if argv[0] not in BY_NAME:
        print(f"error: no scenario {argv[0]!r}\n\n{listing()}", file=sys.stderr)
        return 2
    return run(argv[0], argv[1:])
