"""Every module of the packages below has its tests where ``tests/**/test_<module>*.py`` finds
them (docs/testing.md, "Where a module's tests are"), or is named below with the test file that
covers it and why it has none of its own. A module's stem is its file's, in a subpackage too
(`pipelines/resume/reuse.py`: ``test_reuse*.py``); ``__init__.py`` is not a module here."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "replay",
    "runners",
    "pipelines",
    "pipelines/plan",
    "pipelines/resume",
    "pipelines/tools",
    "transforms/audio",
    "transforms/spec",
    "transforms/stages",
)
# Modules without a test file of their own: each covered by the named test file (the comment
# says how, and why a file of its own would only repeat it).
COVERED_ELSEWHERE = {
    # exception classes: raised and matched by every reader test
    "replay/errors.py": "tests/pipeline/test_reader.py",
    # the typed checks of untrusted JSON: the manifest schema's tests drive them field by field
    "replay/json_checks.py": "tests/unit/test_manifest_schema.py",
    # the default reader, split from reader.py: its blocks, interleave, shuffle and read by id
    "replay/default_reader.py": "tests/pipeline/test_reader_order.py",
    # replay_dataset(order=...), split from reader.py: the refusals and the global order's read
    "replay/global_dataset.py": "tests/pipeline/test_global_reader.py",
    # the manifest schema's parts, split from manifest.py: its tests drive each field of each
    "replay/manifest_commits.py": "tests/unit/test_manifest_schema.py",
    "replay/manifest_splits.py": "tests/unit/test_manifest_schema.py",
    "replay/manifest_tables.py": "tests/unit/test_manifest_schema.py",
    # the source's Example decoder and wire parser, split from source.py: its tests decode every
    # dtype and layout, hand-made Examples of every wire layout and malformed ones
    "replay/example_decoder.py": "tests/pipeline/test_source.py",
    "replay/example_wire.py": "tests/pipeline/test_source.py",
    # the format's element specs and commits, split from format.py: written by the record job and
    # read back by every manifest test (format versions 2 and 5 by their own files)
    "replay/format_commits.py": "tests/pipeline/test_format_v5.py",
    "replay/format_elements.py": "tests/pipeline/test_format_v2.py",
    # DatasetInfo, split from info.py: load_info's tests read every field and run every check
    "replay/dataset_info.py": "tests/pipeline/test_info.py",
    # Example parsing: every element the reader decodes, in each dtype and layout
    "replay/parsing.py": "tests/pipeline/test_reader.py",
    # the per-shard datasets the readers start from: their blocks and read order
    "replay/shards.py": "tests/pipeline/test_reader_order.py",
    # serving: the recorded transform applied to raw windows of a real record run
    "replay/transform.py": "tests/pipeline/test_roundtrip.py",
    # the portable runner's options and job service: names, flags, fail-fast probes
    "runners/portable.py": "tests/pipeline/test_runners.py",
    # the options and probes the runners share
    "runners/support.py": "tests/pipeline/test_runners.py",
    # thread limits of a local run
    "runners/threads.py": "tests/pipeline/test_runners.py",
    # the worker set-up staged to Dataflow: the offline job translation stages it
    "runners/worker_setup.py": "tests/pipeline/test_dataflow.py",
    # planning's own frozen data (ScannedInputs, RecordPlan, Continuation): what the listing
    # tests make and read back
    "pipelines/plan/types.py": "tests/unit/test_listing.py",
    # the plan made batch by batch: the job's plan step against the launcher's plan, tasks,
    # shard counts and refusals
    "pipelines/plan/batches.py": "tests/pipeline/test_in_job.py",
    # the record job's stages: every record run builds them; the staged plan's tests read
    # back what `stage_plan` and `held_tasks` hand the job
    "pipelines/build.py": "tests/pipeline/test_staged_plan.py",
    # the launch of a run planned in the job: both planning kinds byte-identical, the plan
    # step's refusals as the launcher's one line, its --resume
    "pipelines/launch_in_job.py": "tests/pipeline/test_in_job.py",
    # the result's summary: every record run's result; its planned seconds by name there
    "pipelines/summary.py": "tests/pipeline/test_staged_plan.py",
    # the options that parse into more than a value: --splits, --analyze_splits, the
    # annotation options, checked option by option with the config
    "pipelines/option_values.py": "tests/unit/test_config.py",
    # the config's checks before any input: each refusal's one line, option by option
    "pipelines/config_checks.py": "tests/unit/test_config.py",
    # --append's planning and commit protocol: real appends, their refusals and two appends
    # racing for one version
    "pipelines/append_plan.py": "tests/pipeline/test_append.py",
    "pipelines/append_commit.py": "tests/pipeline/test_append.py",
    # the frozen types the stages receive: staged, pickled as columns and read back equal
    "transforms/spec/types.py": "tests/pipeline/test_staged_plan.py",
    # TFRecord framing and the part files' ranges, split from record_parts.py: the part file
    # tests frame, write, read back and copy them (bytes against tf.io.TFRecordWriter's)
    "transforms/stages/framing.py": "tests/unit/test_record_parts.py",
    "transforms/stages/part_ranges.py": "tests/unit/test_record_parts.py",
    # the source tables' lines and files, split from finalize.py: finalisation's pure pieces
    "transforms/stages/source_tables.py": "tests/unit/test_finalize.py",
    # the elements' keys and feature shapes: the Arrow schema and coder made from a layout
    "transforms/spec/layout.py": "tests/unit/test_arrow_coder.py",
}


def _modules() -> list[str]:
    return sorted(
        str(p.relative_to(ROOT))
        for package in PACKAGES
        for p in (ROOT / package).glob("*.py")
        if p.name != "__init__.py"
    )


@pytest.mark.parametrize("module", _modules())
def test_a_module_has_a_test_file_named_after_it_or_is_listed(module):
    stem = Path(module).stem
    named = sorted(ROOT.glob(f"tests/**/test_{stem}*.py"))
    if module in COVERED_ELSEWHERE:
        assert not named, f"{module} has {named[0].name}: drop it from COVERED_ELSEWHERE"
        assert (ROOT / COVERED_ELSEWHERE[module]).is_file(), COVERED_ELSEWHERE[module]
    else:
        assert named, f"{module}: no tests/**/test_{stem}*.py (or list it in COVERED_ELSEWHERE)"


def test_every_package_is_one():
    for package in PACKAGES:
        assert (ROOT / package / "__init__.py").is_file(), package


def test_every_listed_module_exists():
    assert set(COVERED_ELSEWHERE) <= set(_modules())
