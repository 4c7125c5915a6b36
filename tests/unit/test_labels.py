"""Labels from file names, folders and ESC-50 / UrbanSound8K style CSVs."""

import pytest

from transforms.audio import labels


def test_filename_and_dirname():
    assert labels.label_from_filename("/d/1561971697.731_1561971718.283_24346_tug.wav") == "tug"
    assert labels.label_from_dirname("gs://bucket/data/dog/001.wav") == "dog"
    with pytest.raises(labels.LabelError, match="no label"):
        labels.label_from_filename("/d/trailing_.wav")


def test_csv_with_esc50_header_matches_by_trailing_path():
    text = "filename,fold,target,category,esc10\n1-100-A-0.wav,1,0,dog,True\n2-1.wav,2,1,rain,x\n"
    table = labels.read_label_csv(text, source="esc50.csv")
    assert labels.label_for("/data/audio/1-100-A-0.wav", kind="csv", csv_labels=table) == "dog"
    with pytest.raises(labels.LabelError, match="not listed"):
        labels.label_for("/data/audio/9.wav", kind="csv", csv_labels=table)


def test_csv_without_header_and_bad_rows():
    table = labels.read_label_csv("a/x.wav,cat\nb/y.wav,dog\n", source="l.csv")
    assert labels.lookup_csv_label("/root/a/x.wav", table) == "cat"
    with pytest.raises(ValueError, match="row 1 has no label"):
        labels.read_label_csv("x.wav,\n", source="l.csv")


@pytest.mark.parametrize("value", ["file", "csv:", "folder"])
def test_bad_label_source(value):
    with pytest.raises(ValueError, match="--label_source"):
        labels.parse_label_source(value)
