"""`replay.keras_resume.GlobalOrderCheckpoint`: a real `model.fit` SIGKILLed mid-epoch and
restarted with the same command ends with the uninterrupted run's weights and optimizer state,
bit for bit.

The trainings are processes of their own (`tests/support/keras_trainer.py`: CPU, fixed seeds,
TensorFlow's op determinism), forked from one that imported TensorFlow and Keras once
(`tests.support.forked`), on a hand-made dataset of format version 4 (96 windows; global
batches of 8: 12 steps an epoch, 3 epochs). Each kill is made by the training itself at a
given global step, never by a timer; every variable of the model (the dropout's seed generator
state included) and of the optimizer (its iteration count, learning rate and slots) is compared
with `np.array_equal`. The quick tests train in this process: what a checkpoint holds, a save the
kernel stops half-way (the file size limit, RLIMIT_FSIZE), and the refusals.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from replay import load_info
from replay.keras_resume import CHECKPOINT_FILE, GlobalOrderCheckpoint
from tests.support.forked import Forker
from tests.support.keras_trainer import FEATURE, dataset, model_for
from tests.support.replay_fixtures import write_dataset

ROOT = Path(__file__).resolve().parents[2]
COUNTS = (40, 30, 26)  # 96 windows
G = 8  # global batch: 12 steps an epoch
EPOCHS = 3


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("keras_resume") / "data"
    write_dataset(path, num_examples_per_shard=COUNTS, compression="NONE", seed=3)
    return str(path)


@pytest.fixture(scope="module")
def trainer() -> Iterator[Forker]:
    """Runs the trainings: each ``python -m tests.support.keras_trainer`` a process of its own,
    forked from one that imported TensorFlow, Keras and `replay` once (`Forker`)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    forker = Forker(env, ROOT, preload=("tensorflow", "keras", "replay"))
    try:
        yield forker
    finally:
        forker.close()


def _train(
    trainer: Forker, data: str, directory: Path, out: Path, *args: str
) -> subprocess.CompletedProcess:
    """One run of the training script (the same command every time for a directory)."""
    command = ["-m", "tests.support.keras_trainer", data, str(directory)]
    command += [str(out), "--epochs", str(EPOCHS), "--global_batch", str(G), *args]
    return trainer.run(command, timeout=900)


def _finished(run: subprocess.CompletedProcess) -> None:
    assert run.returncode == 0, run.stderr[-3000:]


def _killed(run: subprocess.CompletedProcess) -> None:
    assert run.returncode == -9, (run.returncode, run.stderr[-3000:])


def _state(directory: Path) -> dict:
    with np.load(directory / CHECKPOINT_FILE) as data:
        return json.loads(str(data["state"]))


def _results(out: Path) -> tuple[dict[str, np.ndarray], dict]:
    with np.load(out) as data:
        arrays = {k: data[k] for k in data.files if k != "run"}
        return arrays, json.loads(str(data["run"]))


def _assert_bit_identical(out: Path, reference: Path) -> None:
    got, _ = _results(out)
    want, _ = _results(reference)
    assert sorted(got) == sorted(want)
    assert any(k.startswith("optimizer/") for k in want) and len(want) == 15
    differ = [k for k in want if not np.array_equal(got[k], want[k])]
    assert not differ, differ
    assert int(got["optimizer/0"]) == EPOCHS * 12  # the iteration count: no step run twice


@pytest.fixture(scope="module")
def reference(data, trainer, tmp_path_factory) -> Path:
    """The uninterrupted run's final variables."""
    tmp = tmp_path_factory.mktemp("keras_reference")
    _finished(_train(trainer, data, tmp / "ckpt", tmp / "out.npz"))
    _, run = _results(tmp / "out.npz")
    assert run == {"start": 0, "epochs": [0, 1, 2], "steps": 36}
    return tmp / "out.npz"


@pytest.mark.slow
def test_killed_mid_epoch_resumes_where_it_stopped(data, trainer, reference, tmp_path):
    """Checkpoints every 5 steps; killed at the end of step 18 (epoch 1, its 7th step): steps
    16-18 are lost; the same command resumes at step 15 (position 120), runs the 9 steps left
    of epoch 1, then epoch 2."""
    args = ("--save_every", "5", "--kill_at_step", "18")
    _killed(_train(trainer, data, tmp_path / "ckpt", tmp_path / "out.npz", *args))
    assert not (tmp_path / "out.npz").exists()
    state = _state(tmp_path / "ckpt")
    assert (state["steps"], state["position"], state["epoch"], state["steps_in_epoch"]) == (
        15,
        120,
        1,
        3,
    )
    _finished(_train(trainer, data, tmp_path / "ckpt", tmp_path / "out.npz", *args))
    _, run = _results(tmp_path / "out.npz")
    assert run == {"start": 120, "epochs": [1, 2], "steps": 36}
    _assert_bit_identical(tmp_path / "out.npz", reference)


@pytest.mark.slow
def test_killed_after_an_epoch_end_checkpoint_resumes_at_the_next_epoch(
    data, trainer, reference, tmp_path
):
    """Checkpoints every 6 steps: the one of step 24 ends epoch 1 (written at its end); killed
    at step 28, the resumed run starts epoch 2 whole from position 192."""
    args = ("--save_every", "6", "--kill_at_step", "28")
    _killed(_train(trainer, data, tmp_path / "ckpt", tmp_path / "out.npz", *args))
    state = _state(tmp_path / "ckpt")
    assert (state["steps"], state["epoch"], state["steps_in_epoch"]) == (24, 2, 0)
    _finished(_train(trainer, data, tmp_path / "ckpt", tmp_path / "out.npz", *args))
    _, run = _results(tmp_path / "out.npz")
    assert run == {"start": 192, "epochs": [2], "steps": 36}
    _assert_bit_identical(tmp_path / "out.npz", reference)


@pytest.mark.slow
def test_killed_while_saving_with_two_pipelines_resumes_with_one(
    data, trainer, reference, tmp_path
):
    """Two input pipelines (global batches merged by position), checkpoints every 5 steps,
    killed inside the save of step 20 (its file written under a temporary name, not renamed):
    the checkpoint of step 15 is whole and used; the resumed run reads with one pipeline."""
    args = ("--save_every", "5", "--kill_in_save", "20")
    _killed(
        _train(trainer, data, tmp_path / "ckpt", tmp_path / "out.npz", *args, "--pipelines", "2")
    )
    leftovers = [p.name for p in (tmp_path / "ckpt").iterdir() if p.name != CHECKPOINT_FILE]
    assert len(leftovers) == 1 and leftovers[0].startswith(".tmp-"), leftovers
    assert _state(tmp_path / "ckpt")["steps"] == 15
    _finished(
        _train(trainer, data, tmp_path / "ckpt", tmp_path / "out.npz", *args, "--pipelines", "1")
    )
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == [CHECKPOINT_FILE]
    _, run = _results(tmp_path / "out.npz")
    assert run == {"start": 120, "epochs": [1, 2], "steps": 36}
    _assert_bit_identical(tmp_path / "out.npz", reference)


def _fit(data: str, model, checkpoint, *, epochs: int, start: int, callbacks=None, **fit):
    ds = dataset(data, start=start, global_batch=G, pipelines=1, seed=0)
    fit = {"steps_per_epoch": 12, "initial_epoch": checkpoint.initial_epoch, **fit}
    callbacks = callbacks or [checkpoint]
    return model.fit(ds, epochs=epochs, callbacks=callbacks, verbose=0, **fit)


def _model(data: str):
    info = load_info(data)
    return model_for(info.elements[FEATURE].shape, info.num_classes)


def test_a_checkpoint_holds_the_position_and_every_variable(data, tmp_path):
    """In process: 2 epochs, a checkpoint every 5 steps: the last (step 20, 8 steps into epoch
    1) holds position 160 and the variables of then; `restore` loads them into a new model and
    returns 160 (initial_epoch 1); a checkpoint at an epoch's end resumes at the next epoch."""
    model = _model(data)
    checkpoint = GlobalOrderCheckpoint(tmp_path / "c", save_every_steps=5, global_batch_size=G)
    assert checkpoint.restore(model) == 0 and checkpoint.initial_epoch == 0
    _fit(data, model, checkpoint, epochs=2, start=0)
    assert [p.name for p in (tmp_path / "c").iterdir()] == [CHECKPOINT_FILE]
    state = _state(tmp_path / "c")
    assert (state["steps"], state["position"], state["epoch"], state["steps_in_epoch"]) == (
        20,
        160,
        1,
        8,
    )
    with np.load(tmp_path / "c" / CHECKPOINT_FILE) as saved:
        saved_iterations = int(saved["optimizer_variables/0"])
        saved_kernel = saved["model_variables/0"]
    assert saved_iterations == 20
    other = _model(data)
    resumed = GlobalOrderCheckpoint(tmp_path / "c", save_every_steps=5, global_batch_size=G)
    assert resumed.restore(other) == 160 and resumed.initial_epoch == 1 and resumed.steps == 20
    assert int(other.optimizer.iterations.numpy()) == 20
    assert np.array_equal(other.variables[0].numpy(), saved_kernel)
    assert not np.array_equal(model.variables[0].numpy(), saved_kernel)  # 4 steps later
    # the resumed epoch runs its 4 last steps, then epoch 2 its 12
    history = _fit(data, other, resumed, epochs=3, start=160)
    assert history.epoch == [1, 2] and int(other.optimizer.iterations.numpy()) == 36
    state = _state(tmp_path / "c")  # the last of every 5 steps: 35, one step before the end
    assert (state["steps"], state["epoch"], state["steps_in_epoch"]) == (35, 2, 11)
    at_end = GlobalOrderCheckpoint(tmp_path / "e", save_every_steps=12, global_batch_size=G)
    _fit(data, _model(data), at_end, epochs=1, start=0)
    state = _state(tmp_path / "e")
    assert (state["steps"], state["epoch"], state["steps_in_epoch"]) == (12, 1, 0)


class _FileSizeLimitAtStep(keras.callbacks.Callback):
    """At the end of step `step`, before the checkpoint (listed after it) saves, keeps the
    checkpoint file's bytes and lowers the process's file size limit to half of them: the kernel
    refuses the save's writes past that size (EFBIG, with SIGXFSZ ignored), half-way through."""

    def __init__(self, checkpoint: GlobalOrderCheckpoint, step: int):
        super().__init__()
        self.checkpoint, self.step = checkpoint, step
        self.before: bytes | None = None

    def on_train_batch_end(self, batch, logs=None):
        if self.checkpoint.steps + 1 == self.step:  # the checkpoint counts this step after us
            self.before = Path(self.checkpoint.path).read_bytes()
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (len(self.before) // 2, hard))


def test_a_save_interrupted_half_way_leaves_the_previous_checkpoint_whole(data, tmp_path):
    """Checkpoints every 5 steps; the save of step 10 fails half-way through its file: `fit`
    raises, the checkpoint of step 5 is there byte for byte, no temporary file is left, and a
    restore resumes from it."""
    model = _model(data)
    checkpoint = GlobalOrderCheckpoint(tmp_path, save_every_steps=5, global_batch_size=G)
    checkpoint.restore(model)
    limit = _FileSizeLimitAtStep(checkpoint, 10)
    saved_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    saved_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a killed process
    try:
        with pytest.raises(OSError) as e:
            _fit(data, model, checkpoint, epochs=1, start=0, callbacks=[limit, checkpoint])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, saved_limit)
        signal.signal(signal.SIGXFSZ, saved_handler)
    assert e.value.errno == errno.EFBIG and checkpoint.steps == 10
    assert limit.before is not None and len(limit.before) > 1000
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_FILE]
    assert (tmp_path / CHECKPOINT_FILE).read_bytes() == limit.before
    assert _state(tmp_path)["steps"] == 5
    resumed = GlobalOrderCheckpoint(tmp_path, save_every_steps=5, global_batch_size=G)
    assert resumed.restore(_model(data)) == 5 * G and resumed.initial_epoch == 0


class _StopAtEpochEnd(keras.callbacks.Callback):
    """What EarlyStopping does when it stops: ``stop_training = True`` at an epoch's end."""

    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = True


@pytest.mark.parametrize("stop_first", [True, False], ids=["stop_listed_first", "stop_last"])
def test_a_stop_asked_at_the_end_of_the_resumed_epoch_stands(data, tmp_path, stop_first):
    """The resumed epoch is ended through ``model.stop_training``: a stop another callback asks
    for at that epoch's end still ends `fit`, whether it runs before the checkpoint's
    ``on_epoch_end`` (which sets the flag back only while it holds its own marker) or after."""
    model = _model(data)
    checkpoint = GlobalOrderCheckpoint(tmp_path, save_every_steps=5, global_batch_size=G)
    checkpoint.restore(model)
    _fit(data, model, checkpoint, epochs=1, start=0)  # the last checkpoint: step 10 of 12
    other = _model(data)
    resumed = GlobalOrderCheckpoint(tmp_path, save_every_steps=5, global_batch_size=G)
    assert resumed.restore(other) == 10 * G
    stop = _StopAtEpochEnd()
    callbacks = [stop, resumed] if stop_first else [resumed, stop]
    history = _fit(data, other, resumed, epochs=3, start=10 * G, callbacks=callbacks)
    assert history.epoch == [0] and int(other.optimizer.iterations.numpy()) == 12


def test_refusals(data, tmp_path):
    """What `GlobalOrderCheckpoint` refuses, each in a sentence: bad arguments, a model not of
    Keras 3 or not built, a checkpoint of another model or global batch size, a fit without
    steps_per_epoch, another steps_per_epoch or another initial_epoch than the checkpoint's; a
    temporary file of a killed save is removed by `restore`."""
    with pytest.raises(ValueError, match="save_every_steps must be an integer >= 1"):
        GlobalOrderCheckpoint(tmp_path, save_every_steps=0, global_batch_size=G)
    with pytest.raises(ValueError, match="global_batch_size must be an integer >= 1"):
        GlobalOrderCheckpoint(tmp_path, save_every_steps=1, global_batch_size=True)
    model = _model(data)
    checkpoint = GlobalOrderCheckpoint(tmp_path / "c", save_every_steps=3, global_batch_size=G)
    checkpoint.restore(model)
    _fit(data, model, checkpoint, epochs=1, start=0, steps_per_epoch=4)  # steps 3 (epoch 0)
    (tmp_path / "c" / ".tmp-1-00.npz").write_bytes(b"half a checkpoint")

    def fresh(**kw):
        kw = {"save_every_steps": 3, "global_batch_size": G, **kw}
        return GlobalOrderCheckpoint(tmp_path / "c", **kw)

    with pytest.raises(ValueError, match="written with global_batch_size 8, not 4"):
        fresh(global_batch_size=4).restore(_model(data))
    with pytest.raises(TypeError, match="a Keras 3 model"):
        fresh().restore(object())
    unbuilt = keras.Sequential([keras.layers.Dense(3)])
    with pytest.raises(ValueError, match="build and compile the model first"):
        fresh().restore(unbuilt)
    small = keras.Sequential([keras.Input((4, 8)), keras.layers.Dense(3)])
    small.compile(optimizer="adam", loss="mse")
    with pytest.raises(ValueError, match="not a checkpoint of this model"):
        fresh().restore(small)
    assert [p.name for p in (tmp_path / "c").iterdir()] == [CHECKPOINT_FILE]
    model = _model(data)
    again = fresh()
    assert again.restore(model) == 3 * G and again.initial_epoch == 0
    with pytest.raises(ValueError, match="steps_per_epoch 4, this fit has 12"):
        _fit(data, model, again, epochs=1, start=3 * G)
    with pytest.raises(ValueError, match=r"pass initial_epoch=checkpoint.initial_epoch \(0\)"):
        _fit(data, model, again, epochs=2, start=3 * G, steps_per_epoch=4, initial_epoch=1)
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((8, 4, 8)), np.zeros(8))).batch(8)
    with pytest.raises(ValueError, match="fit needs steps_per_epoch"):
        model.fit(ds.repeat(), epochs=1, callbacks=[again], verbose=0)
