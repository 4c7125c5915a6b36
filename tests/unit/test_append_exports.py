"""`pipelines.append` keeps the names its planning and commit protocol had there before they
moved to `pipelines.append_plan` and `pipelines.append_commit`: each is the same object as in
its new home (tests and tools patch the commit's functions in their home)."""

from __future__ import annotations

from pipelines import append, append_commit, append_plan

PLAN = ("FREE_OPTIONS", "AppendPlan", "append_token", "changed_inputs", "manifest_version")
PLAN += ("option_conflicts", "plan_append", "read_dataset", "stored_config", "stored_moments")
COMMIT = ("clean_up", "commit", "create_exclusively", "finish_commit", "layout_difference")
COMMIT += ("next_manifest", "now_utc", "switch_latest")


def test_every_re_exported_name_is_its_homes_object():
    assert sorted(append.__all__) == sorted([*PLAN, *COMMIT, "run_append"])
    for names, home in ((PLAN, append_plan), (COMMIT, append_commit)):
        for name in names:
            assert getattr(append, name) is getattr(home, name), name
