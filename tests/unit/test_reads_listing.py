"""`pipelines.plan.reads.match_stamped`'s local listing (`local_stamps`): Beam's very result for
local patterns, from a real tree (nested folders, files the pattern does not match, a symlink to
a file, a broken one, a symlinked folder, names with glob characters)."""

from __future__ import annotations

import os

import pytest
from apache_beam.io.filesystems import FileSystems

from pipelines.config import UsageError
from pipelines.plan import reads


def _tree(root):
    for rel, size in [
        ("a/x.wav", 3),
        ("a/y.WAV", 4),
        ("a/z.flac", 5),
        ("a/deep/d.wav", 6),
        ("b/w.wav", 7),
        ("b/[x].wav", 8),
        ("b/notes.txt", 9),
        ("c d/e.wav", 10),
        ("top.wav", 11),
    ]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * size)
    os.symlink(root / "a/x.wav", root / "b/link.wav")
    os.symlink(root / "missing.wav", root / "b/broken.wav")
    os.symlink(root / "a", root / "linked")
    return root


def _beam(pattern):
    (result,) = FileSystems.match([pattern])
    return sorted(
        (m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in result.metadata_list
    )


@pytest.mark.parametrize(
    "pattern",
    [
        "*/*.wav",
        "**/*.wav",
        "**.wav",
        "a/*",
        "a/",
        "?/*.wav",
        "[ab]/*.wav",
        "b/[[]x].wav",
        "c d/*.wav",
        "a/x.wav",
        "a/nothing.wav",
        "nowhere/*.wav",
        "*.wav",
        "a/deep",
    ],
)
def test_local_stamps_are_beams_match(tmp_path, pattern):
    root = _tree(tmp_path / "in")
    full = f"{root}/{pattern}"
    assert sorted(reads.local_stamps(full)) == _beam(full)
    assert reads.match_stamped(full) == _beam(full)


def test_a_relative_pattern_is_listed_as_beam_lists_it(tmp_path, monkeypatch):
    _tree(tmp_path / "in")
    monkeypatch.chdir(tmp_path)
    for pattern in ("in/*/*.wav", "*.wav", "in/**"):
        assert sorted(reads.local_stamps(pattern)) == _beam(pattern)


def test_braces_and_an_empty_match(tmp_path):
    root = _tree(tmp_path / "in")
    both = reads.match_stamped(f"{root}/a/*.{{wav,flac}}")
    assert both == sorted(_beam(f"{root}/a/*.wav") + _beam(f"{root}/a/*.flac"))
    assert reads.match_stamped(f"{root}/zz/*.wav") == []
    with pytest.raises(UsageError, match="cannot list files"):
        reads.match_stamped("nosuchscheme://bucket/*.wav")
