"""`replay.samplers`: a training process killed mid-epoch (SIGKILL, its loader's worker
processes with it) and started again from what it saved continues the same sequence.

The training process is a child Python process that imports no TensorFlow: it reads
`open_source` through a torch ``DataLoader`` (2 workers) and `GlobalOrderSampler`, saving after
each global batch, atomically (a temporary file and ``os.replace``), ``sampler.position(step +
1)`` and the ``index`` values it consumed; or through a ``grain.DataLoader`` (2 workers) and
`GlobalOrderIndexSampler`, saving Grain's ``iterator.get_state()`` after each element. The test
kills it at a pause point in the second epoch (once it has saved there, its loader's workers
running and reading ahead), starts it again on that state, and compares what the two runs
consumed with tf.data's global order (``replay_dataset(order=GlobalOrder(...))``,
`tests.support.global_runs.tf_run`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replay import open_source
from replay.global_order import GlobalOrder
from tests.support.global_runs import tf_run
from tests.support.replay_fixtures import write_dataset

ROOT = Path(__file__).resolve().parents[2]
# 64 train records (a shard empty), 8 global batches of 8 an epoch
COUNTS = {"train": (23, 0, 30, 11), "eval": (3,)}
SPLIT = "train"
G = 8
EPOCHS = 2
ORDER = {"seed": 11, "global_batch_size": G, "block_length": 2, "window_blocks": 4}

TRAIN = """
import json, os, sys, time
from replay import open_source
from replay.global_order import GlobalOrder

framework, path, split, order, state_file, workers, epochs, stop = sys.argv[1:]
order, workers, epochs, stop = json.loads(order), int(workers), int(epochs), int(stop)


def save(state):
    with open(state_file + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(state_file + ".tmp", state_file)
    if len(state["consumed"]) == stop:  # the pause point: killed here, its loader running
        time.sleep(600)


state = {"steps": 0, "consumed": [], "position": 0, "iterator": None, "resumed": False}
if os.path.exists(state_file):
    with open(state_file) as f:
        state = {**json.load(f), "resumed": True}
source = open_source(path, split=split, features=["index"])
n = len(source)
if framework == "torch":
    from torch.utils.data import DataLoader
    from replay.samplers import GlobalOrderSampler

    start = GlobalOrder(**order, start=state["position"])
    samplers = [
        GlobalOrderSampler(source, order=start, num_replicas=workers, rank=w)
        for w in range(workers)
    ]
    loaders = [
        DataLoader(source, batch_size=order["global_batch_size"] // workers, sampler=s,
                   num_workers=2)
        for s in samplers
    ]
    for epoch in range(state["position"] // n, epochs):
        for s in samplers:
            s.set_epoch(epoch)
        for step, batches in enumerate(zip(*loaders)):  # the W pipelines' parts of a batch
            positions = {s.position(step + 1) for s in samplers}
            assert len(positions) == 1, positions
            state["position"] = positions.pop()
            state["consumed"] += [i for b in batches for i in b["index"].tolist()]
            state["steps"] += 1
            save(state)
else:
    import grain
    from replay.samplers import GlobalOrderIndexSampler

    loader = grain.DataLoader(
        data_source=source,
        sampler=GlobalOrderIndexSampler(source, order=GlobalOrder(**order), num_epochs=epochs),
        shard_options=grain.sharding.ShardOptions(shard_index=0, shard_count=1),
        worker_count=2,
    )
    iterator = iter(loader)
    if state["iterator"] is not None:
        iterator.set_state(state["iterator"].encode())
    for element in iterator:
        state["consumed"].append(int(element["index"]))
        state["iterator"] = iterator.get_state().decode()
        state["steps"] = len(state["consumed"]) // order["global_batch_size"]
        save(state)
state["done"] = True
state["tensorflow"] = sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow")
save(state)
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("samplers_kill"))
    write_dataset(path, num_examples_per_shard=COUNTS, split_names=list(COUNTS), compression="NONE")
    return path


@pytest.fixture(scope="module")
def expected(dataset) -> list[int]:
    """The ``index`` of every position of `EPOCHS` epochs of tf.data's global order."""
    n = len(open_source(dataset, split=SPLIT, features=["index"]))
    return tf_run(dataset, SPLIT, GlobalOrder(**ORDER), workers=1, take=EPOCHS * n)


def _train(framework: str, dataset: str, state_file: Path, workers: int, stop: int):
    """The training process, paused once it has consumed and saved `stop` elements (-1:
    never)."""
    args = [framework, dataset, SPLIT, json.dumps(ORDER), str(state_file), str(workers)]
    return subprocess.Popen(
        [sys.executable, "-c", TRAIN, *args, str(EPOCHS), str(stop)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the training process and its workers
    )


def _state(state_file: Path) -> dict | None:
    try:
        return json.loads(state_file.read_text())
    except FileNotFoundError:
        return None


def _kill_at(child: subprocess.Popen, state_file: Path, stop: int) -> dict:
    """SIGKILLs the child's process group (it and its loader's workers) once its saved state
    shows `stop` elements consumed (its pause point); the state it left."""
    deadline = time.monotonic() + 600
    try:
        while (state := _state(state_file)) is None or len(state["consumed"]) < stop:
            assert child.poll() is None, child.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the training process saved no state in time"
            time.sleep(0.005)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(timeout=60) == -signal.SIGKILL
    child.stderr.close()
    return _state(state_file)


@pytest.mark.slow  # a training process and its loader's worker processes, twice
@pytest.mark.parametrize(
    ("framework", "workers"), [("torch", 1), ("torch", 2), ("grain", 1)], ids=str
)
def test_a_training_process_killed_mid_epoch_resumes_the_same_sequence(
    dataset, expected, tmp_path, framework, workers
):
    n = len(expected) // EPOCHS
    # in the second epoch: after 3 global batches (torch saves a batch at a time), 3 elements
    # into the fourth (Grain saves an element at a time)
    stop = n + 3 * G + (3 if framework == "grain" else 0)
    state_file = tmp_path / "state.json"
    killed = _kill_at(_train(framework, dataset, state_file, workers, stop), state_file, stop)
    assert not killed.get("done") and not killed["resumed"]
    assert killed["consumed"] == expected[:stop]
    if framework == "torch":
        assert killed["position"] == stop and killed["steps"] == stop // G

    resumed = _train(framework, dataset, state_file, workers, -1)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    final = _state(state_file)
    assert final["done"] and final["resumed"] and final["tensorflow"] == []
    assert final["consumed"][:stop] == killed["consumed"]
    assert final["consumed"] == expected
