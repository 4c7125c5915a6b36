"""Stable class ids: ``target`` is the label's index in the sorted label names or in --classes.

Never TFT's frequency order: adding windows of one class, recording a subset of the corpus or a
split, or re-running gives the same ids; TFT's vocabulary file, the manifest and the serving
transform agree; a label outside --classes is an error entry or (keep) target -1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import record
from pipelines.plan import UsageError, plan_record
from tests.support import wavgen
from tests.support.record_helpers import cli_error, load_manifest, read_records
from tests.support.record_helpers import record as run_record
from transforms.audio import labels

WIN = 4000
# Base corpus: by windows rain > bird > engine (TFT's order), by name bird < engine < rain.
BASE = {"a_rain.wav": 3, "b_rain.wav": 3, "c_rain.wav": 3, "d_bird.wav": 2, "e_engine.wav": 1}
EXTRA = {f"x{i}_engine.wav": 4 for i in range(4)}  # more engine: engine becomes most frequent


def _write(directory: Path, files: dict[str, int]) -> None:
    for i, (name, windows) in enumerate(files.items()):
        samples = wavgen.synth(windows * WIN + 7, seed=hash_seed(name) + i)
        wavgen.write_wav(directory / name, samples, sample_rate=16000, subtype="PCM_16")


def hash_seed(name: str) -> int:
    return sum(name.encode())


def _plan(pattern: str, *extra: str):
    argv = ["--input_pattern", pattern, "--output_dir", "/nonexistent/out", *extra]
    return plan_record(PipelineOptions(argv).view_as(record.RecordOptions))


def _targets(out: Path) -> dict[str, set[int]]:
    """{class: the set of targets its windows carry}."""
    seen: dict[str, set[int]] = {}
    for r in read_records(out):
        seen.setdefault(r["class"], set()).add(int(r["target"]))
    return seen


# --- planning (no pipeline) ---------------------------------------------------------------------


def test_parse_classes_forms_and_refusals(tmp_path):
    read = lambda path: Path(path).read_text()  # noqa: E731
    assert labels.parse_classes(None, read_text=read) is None
    assert labels.parse_classes(" rain, bird ,engine", read_text=read) == ("rain", "bird", "engine")
    listed = tmp_path / "classes.txt"
    listed.write_text("rain\n\n bird a \nengine,2\n")
    assert labels.parse_classes(f"@{listed}", read_text=read) == ("rain", "bird a", "engine,2")
    for bad, reason in [
        ("a,,b", "empty class name"),
        ("a,b,a", "listed twice"),
        ("", "empty class name"),
        ("a\nb", "line break"),
    ]:
        with pytest.raises(ValueError, match=reason):
            labels.parse_classes(bad, read_text=read)
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(ValueError, match="no class names"):
        labels.parse_classes(f"@{tmp_path / 'empty.txt'}", read_text=read)


def test_default_classes_are_sorted_names_whatever_the_counts(tmp_path):
    _write(tmp_path, BASE)
    assert _plan(str(tmp_path / "*.wav")).classes == ("bird", "engine", "rain")
    assert _plan(str(tmp_path / "[ab]_*.wav")).classes == ("rain",)  # a subset has its labels


def test_labels_outside_classes_are_per_file_errors_or_kept(tmp_path):
    _write(tmp_path, {**BASE, "f_owl.wav": 1})
    plan = _plan(str(tmp_path / "*.wav"), "--classes", "rain,engine,bird")
    assert plan.classes == ("rain", "engine", "bird")
    errors = {Path(f.path).name: f.error for f in plan.inputs if f.error}
    assert errors == {
        "f_owl.wav": "label 'owl' is not in --classes (pass --unknown_class keep for target -1)"
    }
    kept = _plan(
        str(tmp_path / "*.wav"), "--classes", "rain,engine,bird", "--unknown_class", "keep"
    )
    assert kept.classes == ("rain", "engine", "bird")  # never silently added
    assert not [f for f in kept.inputs if f.error]
    with pytest.raises(UsageError, match="f_owl.wav: label 'owl' is not in --classes"):
        _plan(str(tmp_path / "*.wav"), "--classes", "rain,engine,bird", "--strict")


def test_a_label_with_a_line_break_is_an_error_not_a_class(tmp_path):
    _write(tmp_path, {"a_rain.wav": 1, "b_bi\nrd.wav": 1})
    plan = _plan(str(tmp_path / "*.wav"))
    assert plan.classes == ("rain",)
    [bad] = [f for f in plan.inputs if f.error]
    assert bad.error == "label 'bi\\nrd' contains a line break; not usable as a class name"


def test_bad_classes_option_is_one_line(capsys, tmp_path):
    _write(tmp_path, {"a_rain.wav": 1})
    args = ["--input_pattern", str(tmp_path / "*.wav"), "--output_dir", str(tmp_path / "o")]
    line = cli_error(capsys, *args, "--classes", f"@{tmp_path / 'missing.txt'}")
    assert line.startswith(f"error: --classes @{tmp_path / 'missing.txt'}: cannot read")
    assert "listed twice" in cli_error(capsys, *args, "--classes", "rain,rain")
    assert not (tmp_path / "o").exists()


# --- end to end ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("classes")
    _write(d / "base", BASE)
    _write(d / "extra", EXTRA)
    _write(d / "other", {"f_owl.wav": 1})
    return d


@pytest.mark.slow
def test_ids_are_sorted_names_and_survive_more_data_and_splits(corpus, tmp_path):
    base = tmp_path / "base"
    run_record(str(corpus / "base" / "*.wav"), base, "--win_len", str(WIN))
    m = load_manifest(base)
    assert m["classes"] == ["bird", "engine", "rain"] and m["num_classes"] == 3
    assert m["analyzed_splits"] == ["all"]
    vocabulary = (base / "transform_fn" / "assets" / "class").read_text().splitlines()
    assert vocabulary == m["classes"]  # TFT's own vocabulary file holds the same ids
    assert _targets(base) == {"bird": {0}, "engine": {1}, "rain": {2}}
    assert {int(r["num_classes"]) for r in read_records(base)} == {3}

    # Four more engine files (engine is now the most frequent class) and two splits.
    more = tmp_path / "more"
    run_record(
        str(corpus / "[be]*" / "*.wav"), more, "--win_len", str(WIN), "--splits", "train=50,test=50"
    )
    m = load_manifest(more)
    assert m["classes"] == ["bird", "engine", "rain"]
    assert all(m["splits"][s]["num_examples"] for s in ("train", "test"))
    assert _targets(more) == {"bird": {0}, "engine": {1}, "rain": {2}}  # in both splits


@pytest.mark.slow
def test_fixed_classes_keep_unknown_as_minus_one_in_records_and_serving(corpus, tmp_path):
    from replay import load_transform

    out = tmp_path / "fixed"
    run_record(
        str(corpus / "*" / "[aef]_*.wav"),  # a subset: no bird file; an owl file
        out,
        "--win_len",
        str(WIN),
        "--classes",
        "rain,engine,bird",
        "--unknown_class",
        "keep",
    )
    m = load_manifest(out)
    assert m["classes"] == ["rain", "engine", "bird"] and m["errors"] == []
    assert m["params"]["classes"] == "rain,engine,bird"
    assert _targets(out) == {"rain": {0}, "engine": {1}, "owl": {-1}}
    owl = next(f for f in m["files"] if f["label"] == "owl")
    assert owl["num_windows"] == 1

    records = read_records(out)
    signal = np.stack([r["signal"] for r in records[:3]])
    outputs = load_transform(out)({"signal": signal, "class": ["bird", "owl", "engine"]})
    assert outputs["target"].numpy().tolist() == [2, -1, 1]
    assert outputs["num_classes"].numpy().tolist() == [3, 3, 3]
