"""Publishing TFT's transform graph (`transforms.stages.publish.copy_tree`): a directory copied
file by file into place as TFT's own copy makes it (same names and bytes, nested directories and
empty ones, TFT's ``.tft_metadata`` left out), replacing what was there, and copied again the
same (a retried bundle). The whole publish step runs in every record run (test_tft_output.py
reads the result with `tft.TFTransformOutput`)."""

from __future__ import annotations

from pathlib import Path

from transforms.stages.publish import TFT_METADATA_DIR, copy_tree


def _tree(directory: Path) -> dict[str, bytes | None]:
    """{relative path: bytes (None: a directory)} of everything under `directory`."""
    return {
        str(p.relative_to(directory)): None if p.is_dir() else p.read_bytes()
        for p in sorted(directory.rglob("*"))
    }


def _source(root: Path) -> Path:
    src = root / "saved_model"
    (src / "variables").mkdir(parents=True)
    (src / "assets").mkdir()
    (src / "assets" / "empty").mkdir()
    (src / TFT_METADATA_DIR / "schema").mkdir(parents=True)
    (src / "saved_model.pb").write_bytes(b"\x08\x01graph")
    (src / "variables" / "variables.index").write_bytes(b"index")
    (src / "variables" / "variables.data-00000-of-00001").write_bytes(bytes(range(256)) * 9)
    (src / "assets" / "class").write_bytes(b"bird\nengine\nrain\n")
    (src / TFT_METADATA_DIR / "schema" / "schema.pbtxt").write_bytes(b"feature {}")
    return src


def test_a_tree_is_copied_file_by_file_without_tfts_metadata(tmp_path):
    src = _source(tmp_path)
    target = tmp_path / "out" / "transform_fn"
    (tmp_path / "out").mkdir()
    assert copy_tree(f"{src}/", str(target)) == 4
    want = {k: v for k, v in _tree(src).items() if not k.startswith(TFT_METADATA_DIR)}
    assert _tree(target) == want
    assert "assets/empty" in want  # an empty directory too


def test_a_copy_replaces_what_was_there_and_can_be_repeated(tmp_path):
    src = _source(tmp_path)
    target = tmp_path / "transform_fn"
    (target / "variables").mkdir(parents=True)
    (target / "variables" / "stale.index").write_bytes(b"from an earlier attempt")
    (target / "saved_model.pb").write_bytes(b"old")
    copy_tree(str(src), str(target))
    first = _tree(target)
    assert "variables/stale.index" not in first and first["saved_model.pb"] == b"\x08\x01graph"
    assert copy_tree(str(src), f"{target}/") == 4
    assert _tree(target) == first
