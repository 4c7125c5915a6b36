"""Inputs, labels and splits on real WAV files, without running a pipeline: `label_inputs` (pure:
each file's index, label and split) and `scan_inputs` (labels, headers, the output directory)."""

from __future__ import annotations

import dataclasses

import pytest

from pipelines.config import RecordConfig, UsageError
from pipelines.plan import check_inputs, label_inputs, scan_inputs
from tests.support import wavgen
from transforms.spec.types import Sharding


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Three 16-bit files (two classes, 8000 / 5000 / 3000 frames) and a broken one."""
    return wavgen.plan_corpus(tmp_path_factory.mktemp("in"))


def _config(inputs, tmp_path, **options) -> RecordConfig:
    return RecordConfig(
        input_pattern=str(inputs / "*.wav"), output_dir=str(tmp_path / "out"), **options
    )


def test_label_inputs_gives_index_label_split_and_class_errors():
    """Pins each matched file's index, label and split (literals, not `split_of`'s answer) and
    the error of a class outside ``--classes``."""
    matched = [("d/a_x_dog.wav", 10), ("d/b_x_cat.wav", 20), ("d/c_x_owl.wav", 30)]
    config = RecordConfig(input_pattern="d/*.wav", output_dir="o", splits="train=50,test=50")
    sharding = Sharding(splits=config.split_weights, split_base="d/")
    files = label_inputs(
        matched, config, csv_labels=None, fixed_classes=("cat", "dog"), sharding=sharding
    )
    assert [(f.index, f.path, f.size_bytes, f.label) for f in files] == [
        (0, "d/a_x_dog.wav", 10, "dog"),
        (1, "d/b_x_cat.wav", 20, "cat"),
        (2, "d/c_x_owl.wav", 30, "owl"),
    ]
    # Literals (blake2b unit hashes of the paths relative to "d/": 0.242, 0.710, 0.527)
    assert [f.split for f in files] == ["train", "test", "test"]
    assert [f.error is None for f in files] == [True, True, False]  # owl: not in --classes
    keep = dataclasses.replace(config, unknown_class="keep")
    kept = label_inputs(matched, keep, csv_labels=None, fixed_classes=("cat",), sharding=sharding)
    assert all(f.error is None for f in kept)
    annotated = dataclasses.replace(config, annotations="t/*.txt")
    tabled = label_inputs(
        matched, annotated, csv_labels=None, fixed_classes=None, sharding=sharding
    )
    assert [f.label for f in tabled] == ["", "", ""]  # labels come from the tables


def test_scan_inputs_reads_labels_and_headers_and_lists_bad_files(inputs, tmp_path):
    scanned = scan_inputs(_config(inputs, tmp_path))
    assert [f.path.rsplit("/", 1)[-1] for f in scanned.inputs] == [
        "a_1_dog.wav",
        "b_2_cat.wav",
        "c_3_dog.wav",
        "d_4_cat.wav",
    ]
    assert [f.info.num_frames if f.info else None for f in scanned.inputs] == [
        8000,
        5000,
        3000,
        None,
    ]
    assert scanned.inputs[3].error and scanned.classes == ("cat", "dog")
    assert scanned.signal_dtype == "int16" and scanned.output_dir == str(tmp_path / "out")
    with pytest.raises(UsageError, match="^--strict: .*d_4_cat.wav: "):
        check_inputs(_config(inputs, tmp_path, strict=True), scanned.inputs)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not an audiorecords dataset"):
        scan_inputs(_config(inputs, tmp_path, overwrite=True))
