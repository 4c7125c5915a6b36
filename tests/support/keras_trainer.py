"""A small Keras training that `tests/pipeline/test_keras_resume.py` kills and restarts.

    python -m tests.support.keras_trainer DATA CHECKPOINT_DIR OUT [options]

Trains a small model (Flatten, Dense, Dropout, Dense; Adam) on ``log_mel_norm`` -> ``target``
of the dataset DATA read in the global order, with `replay.keras_resume.GlobalOrderCheckpoint`
in CHECKPOINT_DIR: restores, builds the dataset from the restored position, runs `model.fit`,
and writes every variable of the model and of its optimizer to OUT (an ``.npz``: ``model/i``,
``optimizer/i``, and ``epochs``: the epochs this `fit` ran). Deterministic: CPU, fixed seeds,
TensorFlow's op determinism.

The kill is made here, by the process itself, at a given global step, so it lands at the same
point on every machine:

- ``--kill_at_step K``: SIGKILL at the end of step K (after the checkpoint callback ran);
- ``--kill_in_save K``: SIGKILL inside the save of the checkpoint of step K, its file written
  under its temporary name and not yet renamed (`replay.keras_resume._commit` wrapped here:
  production code carries no test switch).

Either kills once: it writes ``CHECKPOINT_DIR.killed`` first and does not kill while that file
exists, so the same command, run again, resumes and finishes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal

import keras
import numpy as np
import tensorflow as tf

from replay import GlobalOrder, keras_resume, load_info, replay_dataset
from replay.keras_resume import GlobalOrderCheckpoint

FEATURE, TARGET = "log_mel_norm", "target"
SMALL_ORDER = {"block_length": 4, "window_blocks": 3}  # several windows a small epoch


def _kill_once(marker: str) -> None:
    if os.path.exists(marker):
        return
    with open(marker, "w") as f:
        f.write("killed\n")
        f.flush()
        os.fsync(f.fileno())
    os.kill(os.getpid(), signal.SIGKILL)


class _KillAtStep(keras.callbacks.Callback):
    """SIGKILLs the process at the end of global step `step` (once per marker)."""

    def __init__(self, checkpoint: GlobalOrderCheckpoint, step: int, marker: str):
        super().__init__()
        self.checkpoint, self.step, self.marker = checkpoint, step, marker

    def on_train_batch_end(self, batch, logs=None):
        if self.checkpoint.steps == self.step:
            _kill_once(self.marker)


def _kill_in_save(checkpoint: GlobalOrderCheckpoint, step: int, marker: str) -> None:
    """Wraps the checkpoint's commit point: SIGKILL before the rename of step `step`'s file."""
    commit = keras_resume._commit

    def commit_or_kill(tmp: str, path: str) -> None:
        if checkpoint.steps == step:
            _kill_once(marker)
        commit(tmp, path)

    keras_resume._commit = commit_or_kill


def dataset(path: str, *, start: int, global_batch: int, pipelines: int, seed: int):
    """Global batches from `start`, each merged from `pipelines` input pipelines by position."""

    def one(index: int) -> tf.data.Dataset:
        context = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=index)
        order = GlobalOrder(seed=seed, start=start, global_batch_size=global_batch, **SMALL_ORDER)
        ds = replay_dataset(
            path,
            order=order,
            features=[FEATURE, TARGET],
            repeat=True,
            batch_size=global_batch // pipelines,
            input_context=context if pipelines > 1 else None,
        )
        return ds.map(lambda e: (e[FEATURE], e[TARGET]))

    if pipelines == 1:
        return one(0)
    parts = tuple(one(i) for i in range(pipelines))
    return tf.data.Dataset.zip(parts).map(
        lambda *p: (tf.concat([x for x, _ in p], 0), tf.concat([y for _, y in p], 0))
    )


def model_for(shape: tuple[int, ...], num_classes: int) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input(shape=shape),
            keras.layers.Flatten(),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dropout(0.25),  # its seed generator's state is checkpointed too
            keras.layers.Dense(num_classes),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("checkpoint_dir")
    parser.add_argument("out")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--global_batch", type=int, default=8)
    parser.add_argument("--save_every", type=int, default=5)
    parser.add_argument("--pipelines", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kill_at_step", type=int)
    parser.add_argument("--kill_in_save", type=int)
    args = parser.parse_args(argv)

    tf.config.set_visible_devices([], "GPU")  # CPU only
    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(args.seed)
    info = load_info(args.data)
    steps_per_epoch = info.num_examples() // args.global_batch
    model = model_for(info.elements[FEATURE].shape, info.num_classes)
    checkpoint = GlobalOrderCheckpoint(
        args.checkpoint_dir, save_every_steps=args.save_every, global_batch_size=args.global_batch
    )
    marker = args.checkpoint_dir.rstrip("/") + ".killed"
    callbacks: list[keras.callbacks.Callback] = [checkpoint]
    if args.kill_at_step is not None:
        callbacks.append(_KillAtStep(checkpoint, args.kill_at_step, marker))
    if args.kill_in_save is not None:
        _kill_in_save(checkpoint, args.kill_in_save, marker)

    start = checkpoint.restore(model)
    ds = dataset(
        args.data,
        start=start,
        global_batch=args.global_batch,
        pipelines=args.pipelines,
        seed=args.seed,
    )
    history = model.fit(
        ds,
        epochs=args.epochs,
        steps_per_epoch=steps_per_epoch,
        initial_epoch=checkpoint.initial_epoch,
        callbacks=callbacks,
        verbose=0,
    )
    arrays = {f"model/{i}": v.numpy() for i, v in enumerate(model.variables)}
    arrays.update({f"optimizer/{i}": v.numpy() for i, v in enumerate(model.optimizer.variables)})
    arrays["run"] = np.array(
        json.dumps({"start": start, "epochs": history.epoch, "steps": checkpoint.steps})
    )
    np.savez(args.out, **arrays)


if __name__ == "__main__":
    main()
