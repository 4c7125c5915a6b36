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


DIRNAME_PATHS = [
    "gs://bucket/data/dog/001.wav",
    "gs://bucket/data/dog/002.wav",
    "/other/dog/001.wav",
    "data\\cat\\1.wav",
    "data/cat\\2.wav",
    "a//b.wav",
    "a/b/",
    "/1.wav",
    "1.wav",
    "",
]


@pytest.mark.parametrize("kind", ["filename", "dirname", "csv"])
def test_a_labeller_gives_label_fors_labels_and_errors(kind):
    """Labels found once per folder are those `label_for` finds file by file, and a file
    without one fails with the same line."""
    table = {"001.wav": "x", "data\\cat\\1.wav": "y"}
    label = labels.labeller(kind, table)
    for path in DIRNAME_PATHS * 2:  # a folder seen before: its remembered label
        try:
            want = labels.label_for(path, kind=kind, csv_labels=table)
        except labels.LabelError as e:
            with pytest.raises(labels.LabelError) as got:
                label(path)
            assert str(got.value) == str(e), path
        else:
            assert label(path) == want, path
    with pytest.raises(ValueError, match="unknown label kind"):
        labels.labeller("folder")


def test_a_dirname_label_is_one_string_per_folder():
    label = labels.labeller("dirname")
    first, second = label("/data/dog/1.wav"), label("/data/dog/2.wav")
    assert first == second == "dog" and first is second


def test_label_paths_is_label_for_of_each_path():
    """Labelled a folder at a time or a path at a time, each path gets `label_for`'s label, or
    the `LabelError` it raises (with its own message), in order."""
    paths = [
        "gs://b/data/dog/1.wav",
        "gs://b/data/dog/2.wav",
        "/x/cat/3.wav",
        "top.wav",
        "other.wav",
        "/x/cat//4.wav",
        "gs://b/data/dog/5.wav",
    ]
    for kind in (labels.DIRNAME, labels.FILENAME):
        for group in (paths, [*paths, "c:\\data\\bird\\6.wav"], [*paths, "/x/cat/"]):
            got = labels.label_paths(group, kind=kind)
            assert len(got) == len(group)
            for path, label in zip(group, got, strict=True):
                try:
                    expected = labels.label_for(path, kind=kind)
                except labels.LabelError as e:
                    assert isinstance(label, labels.LabelError) and str(label) == str(e)
                else:
                    assert label == expected
    got = labels.label_paths(paths, kind=labels.DIRNAME)
    assert got[0] is got[1] is got[6]  # one string a folder
    table = {"1.wav": "one"}
    got = labels.label_paths(paths[:2], kind="csv", csv_labels=table)
    assert got[0] == "one" and isinstance(got[1], labels.LabelError)
    with pytest.raises(ValueError, match="unknown label kind"):
        labels.label_paths(paths, kind="folder")
