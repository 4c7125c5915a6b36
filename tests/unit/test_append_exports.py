"""`pipelines.append` keeps the names its planning and commit protocol had there before they
moved to `pipelines.append_plan` and `pipelines.append_commit`: each is the same object as in
its new home (tests and tools patch the commit's functions in their home)."""

from __future__ import annotations

from pipelines import append, append_commit, append_plan


def test_every_re_exported_name_is_its_homes_object():
    assert "run_append" in append.__all__
    for name in append.__all__:
        if name == "run_append":
            continue
        homes = [m for m in (append_plan, append_commit) if hasattr(m, name)]
        assert len(homes) == 1, name
        assert getattr(append, name) is getattr(homes[0], name), name
