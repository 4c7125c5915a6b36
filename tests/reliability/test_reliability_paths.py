"""Guarantee 6, safe paths: output never leaves --output_dir, and --overwrite never deletes a
directory (or file) that is not an audiorecords dataset.

Shard names derive only from --dataset_name, which must be a plain file name; labels and input
file names (``../``, ``/``, spaces, unicode, shell and glob characters: the shared reference
corpus) only ever appear inside records and the manifest.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import record
from pipelines.plan import UsageError, plan_record
from tests.support.record_helpers import SAMPLE_DIR, cli_error
from tests.support.reliability import NASTY_FILES

SAMPLE = str(SAMPLE_DIR / "*.wav")


@pytest.mark.parametrize(
    "name", ["../evil", "a/b", "..", ".", ".hidden", "/abs", "a\\b", "", "new\nline", "tab\tx"]
)
def test_dataset_name_that_could_leave_the_output_dir_is_rejected_up_front(capsys, tmp_path, name):
    out = tmp_path / "nested" / "out"
    line = cli_error(
        capsys, "--input_pattern", SAMPLE, "--output_dir", str(out), "--dataset_name", name
    )
    assert "--dataset_name" in line
    assert not (tmp_path / "nested").exists()  # nothing written anywhere


@pytest.mark.parametrize("name", ["my data", "ünïcödé", "x$(y)`z`;&|'\"", "a..b", "v1.2-final"])
def test_odd_but_plain_dataset_names_are_accepted(tmp_path, name):
    argv = ["--input_pattern", SAMPLE, "--output_dir", str(tmp_path / "o"), "--dataset_name", name]
    plan = plan_record(PipelineOptions(argv).view_as(record.RecordOptions))
    assert plan.name == name


def _tree(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(path.rglob("*"))
    }


def _foreign_web_app(d: Path) -> None:
    d.mkdir()
    (d / "manifest.json").write_text('{"name": "my web app", "icons": []}')  # not ours
    (d / "index.html").write_text("<html>precious</html>")


def _garbage_manifest(d: Path) -> None:
    d.mkdir()
    (d / "manifest.json").write_bytes(b"\x00\xff not json")
    (d / "notes.txt").write_text("precious")


def _hidden_only(d: Path) -> None:
    (d / ".git").mkdir(parents=True)
    (d / ".git" / "HEAD").write_text("ref: refs/heads/main\n")


def _only_subdirectories(d: Path) -> None:
    (d / "photos" / "2019").mkdir(parents=True)
    (d / "photos" / "2019" / "a.jpg").write_bytes(b"precious")


def _symlink_to_foreign(d: Path) -> None:
    target = d.parent / f"{d.name}-target"
    target.mkdir()
    (target / "thesis.tex").write_text("precious")
    d.symlink_to(target, target_is_directory=True)


FOREIGN = {
    "web app with a manifest.json": _foreign_web_app,
    "garbage manifest.json": _garbage_manifest,
    "only hidden files": _hidden_only,
    "only subdirectories": _only_subdirectories,
    "symlink to a foreign dir": _symlink_to_foreign,
}


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("make", FOREIGN.values(), ids=FOREIGN.keys())
@pytest.mark.parametrize("spelling", ["{}", "{}/", "{}//", "{}/../{name}"])
def test_a_foreign_directory_is_never_written_or_deleted(
    capsys, tmp_path, make, spelling, overwrite
):
    d = tmp_path / "victim"
    make(d)
    before = _tree(tmp_path)
    out = spelling.format(d, name=d.name)
    flags = ["--overwrite"] if overwrite else []
    line = cli_error(capsys, "--input_pattern", SAMPLE, "--output_dir", out, *flags)
    assert ("not an audiorecords dataset" if overwrite else "pass --overwrite") in line
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_an_existing_file_is_never_replaced(capsys, tmp_path, overwrite):
    victim = tmp_path / "thesis.tex"
    victim.write_text("precious")
    line = cli_error(capsys, "--input_pattern", SAMPLE, "--output_dir", str(victim), *overwrite)
    assert str(victim) in line
    assert victim.read_text() == "precious"


def test_plan_rejects_before_any_work(tmp_path):
    argv = ["--input_pattern", SAMPLE, "--output_dir", str(tmp_path / "o"), "--dataset_name", "a/b"]
    with pytest.raises(UsageError, match="--dataset_name"):
        plan_record(PipelineOptions(argv).view_as(record.RecordOptions))


@pytest.mark.slow
def test_nasty_file_names_and_labels_stay_inside_the_output_dir(
    reliability_reference, tmp_path_factory
):
    """The reference run: nothing written outside its output dir, labels kept verbatim."""
    from replay import load_info

    base = tmp_path_factory.getbasetemp()
    pattern, labels, out = reliability_reference
    inputs = Path(pattern).parent
    assert sorted(p.name for p in inputs.iterdir()) == sorted(NASTY_FILES)  # inputs untouched
    # What the run wrote: only inside its corpus and output dirs (other tests own the rest of
    # this process's temp dir); an escape ("../../escaped", "a/b") or a shell running
    # "$(touch pwned)" would land there, next to them, above them (still inside this process's
    # own temp dir: the run sits two levels below it) or in the working directory. Nothing
    # outside this test process's folders is looked at: the shared /tmp is not ours.
    for top in (inputs.parent, out):
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                assert name not in {"pwned", "escaped", "b"}, f"stray {root}/{name}"
    assert out.parent.parent.parent == base
    for place in (out.parent, out.parent.parent, base, Path.cwd()):
        assert not {"pwned", "escaped"} & {p.name for p in place.iterdir()}, place
    info = load_info(out)
    assert set(info.classes) == set(NASTY_FILES.values())
    assert {Path(f["path"]).name: f["label"] for f in info.files} == NASTY_FILES
    names = [p.name for p in out.iterdir()]
    assert sorted(n for n in names if ".tfrecord-" in n) == [
        f"audiorecords.tfrecord-{i:05d}-of-00003" for i in range(3)
    ]
    assert set(names) <= {
        "manifest.json",
        "files.jsonl",
        "errors.jsonl",
        "schema.pbtxt",
        "feature_fn",
        "transform_fn",
        "transformed_metadata",
        "metadata",
        "offsets",
        *(n for n in names if n.startswith("audiorecords.tfrecord-")),
    }, names
