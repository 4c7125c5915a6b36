"""Keras `model.fit` killed mid-epoch, resumed where it stopped: `GlobalOrderCheckpoint`.

Keras 3's ``BackupAndRestore(save_freq=N)`` writes the batch number but restores only the
epoch: a `fit` killed mid-epoch restarts that epoch, on data already seen. With the global read
order (`replay.global_order`) the data of any step is fixed by (seed, position P), and P is the
steps done times the global batch size; this callback saves the steps done with the training
state and resumes inside the epoch::

    checkpoint = GlobalOrderCheckpoint("ckpt/", save_every_steps=100, global_batch_size=G)
    start = checkpoint.restore(model)  # 0 on a first run; P on a resumed one
    ds = replay_dataset(path, order=GlobalOrder(seed=0, start=start, global_batch_size=G),
                        repeat=True, batch_size=G, ...)
    model.fit(ds, epochs=E, steps_per_epoch=S, initial_epoch=checkpoint.initial_epoch,
              callbacks=[checkpoint])

What a checkpoint holds: every variable of ``model.variables`` (weights, and the non-trainable
ones: normalisation statistics, the seed generators' states of dropout and other random
layers, which ``model.save_weights`` leaves out) and of ``model.optimizer.variables`` (the
iteration count, the learning rate, every slot), plus the steps done, the epoch and the step
inside it. It is one file, ``checkpoint.npz``, written under a temporary name, flushed to disk
and renamed over the previous one (`os.replace`): a process killed while saving leaves the
previous checkpoint whole. Local paths only (a rename on an object store is not atomic).

The resumed epoch: `fit` starts at ``initial_epoch`` with the iterator of `ds` kept across
epochs (``steps_per_epoch`` on a repeated dataset); the epoch the checkpoint was taken in runs
only its remaining steps. The callback ends it early the one way Keras has, by setting
``model.stop_training`` to a marker at its last step and back to False at ``on_epoch_end``
(only while it is still that marker: a stop another callback asks for, then or in the same
epoch's end, stands). Its logs are means over the steps it ran; the next epochs are whole.
A checkpoint whose step ends an epoch is written at ``on_epoch_end`` (after validation and the
callbacks listed before this one), and a run resumed from it starts the next epoch.

Keras 3 (``import keras``): the callback and the model are Keras 3's. ``tf.keras`` is Keras 3 too,
unless ``TF_USE_LEGACY_KERAS=1`` (importing tensorflow-transform sets it) made it Keras 2.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

import keras
import numpy as np

CHECKPOINT_FILE = "checkpoint.npz"
_STATE_KEY = "state"
_VERSION = 1


class _EndOfResumedEpoch:
    """The value of ``model.stop_training`` that ends the resumed epoch only (module docstring)."""

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "<end of the resumed epoch>"


_END_EPOCH = _EndOfResumedEpoch()


class GlobalOrderCheckpoint(keras.callbacks.Callback):
    """Saves the training state and the steps done every `save_every_steps` steps; `restore`
    loads them into a model and returns the position to read from (module docstring).

    Args:
      directory: where ``checkpoint.npz`` is written (created; a local path).
      save_every_steps: a checkpoint every this many training steps (counted over the whole
        run, across epochs and restarts); a multiple of the model's ``steps_per_execution``.
      global_batch_size: elements a step takes from all input pipelines together (the
        `GlobalOrder`'s): the position after ``k`` steps is ``k * global_batch_size``.

    Attributes:
      initial_epoch: the epoch `fit` starts at (`restore` sets it; 0 before).
      steps: training steps done, those restored included.
    """

    def __init__(
        self, directory: str | os.PathLike, *, save_every_steps: int, global_batch_size: int
    ):
        super().__init__()
        for name, value in (
            ("save_every_steps", save_every_steps),
            ("global_batch_size", global_batch_size),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"GlobalOrderCheckpoint: {name} must be an integer >= 1, not {value!r}"
                )
        self.directory = os.fspath(directory)
        self.save_every_steps = save_every_steps
        self.global_batch_size = global_batch_size
        self.initial_epoch = 0
        self.steps = 0
        self._restored: dict[str, Any] | None = None  # the state `restore` read
        self._steps_per_epoch = 0
        self._epoch = 0
        self._in_epoch = 0  # steps done in the current epoch
        self._first_epoch = True
        self._batch_begin = 0
        self._pending = False  # a checkpoint due at on_epoch_end

    @property
    def path(self) -> str:
        """The checkpoint file."""
        return os.path.join(self.directory, CHECKPOINT_FILE)

    def restore(self, model: keras.Model) -> int:
        """Loads the last checkpoint into `model` (built and compiled) and its optimizer.

        Returns:
          The position to read from: ``GlobalOrder(start=...)``; 0 when there is no checkpoint
          yet (the model is left as it is). Sets `initial_epoch` for ``fit(initial_epoch=...)``.

        Raises:
          TypeError: not a Keras 3 model.
          ValueError: the model is not built or compiled, or the checkpoint is not of this
            model (other variables), or of another global batch size.
        """
        if not isinstance(model, keras.Model):
            raise TypeError(
                f"GlobalOrderCheckpoint.restore: a Keras 3 model (`import keras`), not "
                f"{type(model).__module__}.{type(model).__name__} (with TF_USE_LEGACY_KERAS=1, "
                "set by importing tensorflow_transform, tf.keras is Keras 2)"
            )
        if not model.built or model.optimizer is None:
            raise ValueError("GlobalOrderCheckpoint.restore: build and compile the model first")
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        _remove_temporaries(self.directory)
        if not os.path.exists(self.path):
            self._restored = None
            self.initial_epoch = self.steps = 0
            return 0
        with np.load(self.path, allow_pickle=False) as data:
            state = json.loads(str(data[_STATE_KEY]))
            if state.get("version") != _VERSION:
                raise ValueError(f"{self.path}: unknown checkpoint version {state.get('version')}")
            if state["global_batch_size"] != self.global_batch_size:
                raise ValueError(
                    f"{self.path}: written with global_batch_size {state['global_batch_size']}, "
                    f"not {self.global_batch_size}"
                )
            values = []
            for group, variables in _groups(model).items():
                saved = [data[f"{group}/{i}"] for i in range(len(state[group]))]
                if [_shape(v) for v in saved] != [_shape(v) for v in variables]:
                    raise ValueError(
                        f"{self.path}: not a checkpoint of this model: its {group} are "
                        f"{_described(state[group], saved)}, the model's "
                        f"{_described([_name(v) for v in variables], variables)}"
                    )
                values += zip(variables, saved, strict=True)
        for variable, value in values:
            variable.assign(value)
        self._restored = state
        self.initial_epoch = state["epoch"]
        self.steps = state["steps"]
        return self.steps * self.global_batch_size

    def on_train_begin(self, logs: dict | None = None) -> None:
        steps = self.params.get("steps")
        if not steps:
            raise ValueError(
                "GlobalOrderCheckpoint: fit needs steps_per_epoch (and a repeated dataset)"
            )
        per_execution = int(getattr(self.model, "steps_per_execution", 1) or 1)
        if self.save_every_steps % per_execution or steps % per_execution:
            raise ValueError(
                f"GlobalOrderCheckpoint: save_every_steps {self.save_every_steps} and "
                f"steps_per_epoch {steps} must be multiples of steps_per_execution {per_execution}"
            )
        restored = self._restored
        if restored is not None and restored["steps_per_epoch"] != steps:
            raise ValueError(
                f"GlobalOrderCheckpoint: {self.path} was written with steps_per_epoch "
                f"{restored['steps_per_epoch']}, this fit has {steps}"
            )
        if restored is not None and restored["steps_in_epoch"] % per_execution:
            raise ValueError(
                f"GlobalOrderCheckpoint: {self.path} stopped {restored['steps_in_epoch']} steps "
                f"into its epoch, not a multiple of steps_per_execution {per_execution}"
            )
        self._steps_per_epoch = steps
        self._first_epoch = True

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch
        self._in_epoch = 0
        self._pending = False
        if self._first_epoch:
            self._first_epoch = False
            if epoch != self.initial_epoch:
                raise ValueError(
                    f"GlobalOrderCheckpoint: fit started at epoch {epoch}; pass "
                    f"initial_epoch=checkpoint.initial_epoch ({self.initial_epoch})"
                )
            if self._restored is not None:
                self._in_epoch = self._restored["steps_in_epoch"]

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._batch_begin = batch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        done = batch - self._batch_begin + 1  # steps of this call (steps_per_execution)
        before = self.steps
        self.steps += done
        self._in_epoch += done
        epoch_done = self._in_epoch >= self._steps_per_epoch
        if epoch_done and batch + 1 < self._steps_per_epoch and not self.model.stop_training:
            self.model.stop_training = _END_EPOCH  # the resumed epoch's last step
        if self.steps // self.save_every_steps > before // self.save_every_steps:
            if epoch_done:
                self._pending = True
            else:
                self._save()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.model.stop_training is _END_EPOCH:
            self.model.stop_training = False
        if self._pending:
            self._pending = False
            self._save()

    def _save(self) -> None:
        epoch, in_epoch = self._epoch, self._in_epoch
        if in_epoch >= self._steps_per_epoch:
            epoch, in_epoch = epoch + 1, 0
        groups = _groups(self.model)
        state = {
            "version": _VERSION,
            "steps": self.steps,
            "position": self.steps * self.global_batch_size,
            "epoch": epoch,
            "steps_in_epoch": in_epoch,
            "steps_per_epoch": self._steps_per_epoch,
            "global_batch_size": self.global_batch_size,
        }
        state.update({group: [_name(v) for v in variables] for group, variables in groups.items()})
        arrays = {_STATE_KEY: np.array(json.dumps(state))}
        for group, variables in groups.items():
            for i, variable in enumerate(variables):
                arrays[f"{group}/{i}"] = np.asarray(variable.numpy())
        _write_atomically(self.path, arrays)


def _groups(model: keras.Model) -> dict[str, list]:
    """The variables a checkpoint holds, by group, in a fixed order."""
    return {
        "model_variables": list(model.variables),
        "optimizer_variables": list(model.optimizer.variables),
    }


def _remove_temporaries(directory: str) -> None:
    """Removes the temporary files of saves a kill interrupted."""
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            if name.startswith(".tmp-") and name.endswith(".npz"):
                os.remove(os.path.join(directory, name))


def _shape(value: Any) -> tuple[tuple[int, ...], str]:
    """What must match between a saved array and the variable it is loaded into."""
    return tuple(value.shape), str(getattr(value.dtype, "name", value.dtype))


def _described(names: list[str], values: list) -> list[str]:
    return [f"{n} {_shape(v)[0]} {_shape(v)[1]}" for n, v in zip(names, values, strict=True)]


def _name(variable: Any) -> str:
    return str(getattr(variable, "path", None) or variable.name)


def _write_atomically(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Writes `arrays` as an ``.npz`` file at `path`: into a temporary file of the same
    directory, flushed to disk, then renamed over `path` (and the directory flushed), so `path`
    is always a whole file, the old or the new."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".tmp-{os.getpid()}-{secrets.token_hex(4)}.npz")
    try:
        with open(tmp, "xb") as f:  # the umask's mode, as any file written
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        _commit(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _commit(tmp: str, path: str) -> None:
    """The checkpoint's one commit point: `tmp`, whole on disk, renamed to `path`."""
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
