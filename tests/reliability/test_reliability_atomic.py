"""Guarantee 2, atomic output: a record run killed at any point leaves an *incomplete* dataset.

The CLI runs as a process of its own (its own process group; forked from one that imported Beam
and TensorFlow once, `tests.support.forked`) and gets SIGKILL while it reads, while it writes
shards, and while it finalises: `tests.support.pause_points` freezes it (SIGSTOP) at a
function entry of that phase, so the kill lands there every time, however fast the machine is. Each
time the directory must be refused by `replay_dataset` / `load_info` / `pipelines.verify` with a
clear "incomplete" error, never read as a dataset missing shards; re-running the same command with
``--overwrite`` then gives exactly the uninterrupted run's dataset. The deletion that
``--overwrite`` starts with is interrupted at every step too (in-process).
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from pipelines import record, verify
from pipelines.plan.reads import RUN_MARKER, output_dir_state
from pipelines.resume.output_dir import prepare_output_dir
from replay import IncompleteDatasetError, load_info
from tests.support.pause_points import PHASES
from tests.support.reliability import (
    assert_same_dataset,
    copy_dataset,
    kill,
    record_args,
    wait_until_paused,
)

pytestmark = pytest.mark.slow


def _names(directory: Path, pattern: str) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.glob(pattern))


def assert_in_phase(out: Path, phase: str) -> None:
    """The paused run's output directory is in `phase` (3 shards in these runs)."""
    shards = _names(out, "*.tfrecord-*")
    parts = _names(out, ".tmp/parts/**/*.records*")
    if phase == "reading":
        assert parts and all(".tmp-" in p for p in parts) and not shards, (parts, shards)
    elif phase == "writing shards":
        assert len(shards) == 1 and parts, (parts, shards)
    else:
        assert len(shards) == 3 and (out / "feature_fn").is_dir(), shards
        assert (out / "schema.pbtxt").exists()
    assert not (out / "manifest.json").exists()


def assert_refused_as_incomplete(out: Path, capsys) -> None:
    """`out` is not readable as a dataset, with an "incomplete" error everywhere, and ours."""
    from replay import replay_dataset

    assert not (out / "manifest.json").exists()
    for read in (load_info, replay_dataset):
        with pytest.raises(IncompleteDatasetError, match="incomplete dataset"):
            read(out)
    capsys.readouterr()
    assert verify.run([str(out)]) == 1
    assert "incomplete dataset" in capsys.readouterr().out
    assert output_dir_state(str(out)) == "ours"  # so --overwrite may replace it


def test_sigkill_in_every_phase_then_overwrite_recovers(
    reliability_reference, forker, tmp_path_factory, capsys
):
    pattern, labels, reference = reliability_reference
    out = tmp_path_factory.mktemp("killed") / "out"
    args = record_args(pattern, labels, out, "--overwrite")
    for phase in PHASES:
        marker = out.parent / f"{phase}.paused"
        log = out.parent / f"{phase}.log"
        argv = ["-m", "tests.support.pause_points", phase, str(marker), *args]
        proc = forker.start(argv, stdout=log)
        try:
            wait_until_paused(proc, marker)
            assert_in_phase(out, phase)
        finally:
            kill(proc)
        assert_refused_as_incomplete(out, capsys)
    record.run(args)  # the same command, uninterrupted this time
    assert_same_dataset(out, reference)
    assert not (out / RUN_MARKER).exists() and not (out / ".tmp").exists()
    capsys.readouterr()
    assert verify.run([str(out)]) == 0


def test_kill_while_overwrite_deletes_the_old_dataset(
    reliability_reference, tmp_path_factory, monkeypatch, capsys
):
    """`prepare_output_dir` interrupted after each deletion: always ours, never half a dataset."""
    import tensorflow as tf

    _, _, reference = reliability_reference
    base = tmp_path_factory.mktemp("overwrite")
    steps = 0
    while True:
        out = copy_dataset(reference, base / f"try{steps}")
        calls = []

        def killed_after(fn, steps=steps, calls=calls):
            def wrapper(path):
                if len(calls) == steps:
                    raise KeyboardInterrupt("killed")  # the process stops here
                calls.append(path)
                return fn(path)

            return wrapper

        with monkeypatch.context() as m:
            m.setattr(tf.io.gfile, "remove", killed_after(tf.io.gfile.remove))
            m.setattr(tf.io.gfile, "rmtree", killed_after(tf.io.gfile.rmtree))
            try:
                prepare_output_dir(types.SimpleNamespace(output_dir=str(out)))
                finished = True
            except KeyboardInterrupt:
                finished = False
        assert output_dir_state(str(out)) == "ours", (steps, calls)
        if steps == 0:
            assert verify.run([str(out)]) == 0  # nothing deleted yet: still the whole dataset
        else:
            assert_refused_as_incomplete(out, capsys)
        if finished:
            break
        steps += 1
    assert steps >= 5  # manifest, 3 shards, schema, ... were each a kill point
