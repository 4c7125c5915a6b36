"""The README's commands are the real ones: CI runs the README test command; and the examples
of docs/training.md run as written: "Train with it" trains a Keras model for an epoch on the
recorded bundled sample, "Random access" reads its records by number, "Reading without
TensorFlow" its elements, "Keras: resume a killed
`fit` mid-epoch" trains it with checkpoints and runs again from the last one, "From Python"
records it."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.support.docs import page
from tests.support.record_helpers import SAMPLE_DIR

ROOT = Path(__file__).resolve().parents[2]
README = page("README.md")
TRAINING = page("training.md")  # "Train with it", "Keras: resume ...", "From Python"


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README, flags=re.S)


def test_ci_runs_the_readme_test_command():
    install_run, test = (b.strip() for b in _bash_blocks()[:2])
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci and ci[-1] == test  # the README's command, last, as it stands
    assert "pytest" in test and "pip install" in test
    # ... inside a virtualenv .ci/run creates and activates first (nothing installed by hand)
    made = next(i for i, line in enumerate(ci) if line.startswith("python3 -m venv "))
    activated = next(i for i, line in enumerate(ci) if line.startswith("source "))
    assert made < activated < ci.index(test)
    assert "pipelines.record" in install_run and "data/sample" in install_run


def test_readme_record_command_parses_with_our_options():
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.record import RecordOptions

    command = _bash_blocks()[0].split("&&", 1)[1]
    argv = shlex.split(command)[3:]  # after "python -m pipelines.record"
    opts = PipelineOptions(argv).view_as(RecordOptions)
    assert opts.input_pattern == "data/sample/*.wav" and opts.win_len == 16000
    assert list(SAMPLE_DIR.glob("*.wav")), "the bundled sample is missing"


def _run_section(heading: str, sample_dataset, tmp_path, monkeypatch) -> dict:
    """Run the first Python block of docs/training.md's section `heading` in `tmp_path`, the
    README's recording at ``out/sample``; its namespace."""
    shutil.copytree(sample_dataset, tmp_path / "out" / "sample")
    section = re.search(re.escape(heading) + r"\n(.*?)\n## ", TRAINING, re.S)
    code = re.search(r"```python\n(.*?)```", section.group(1), flags=re.S).group(1)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "docs/training.md", "exec"), namespace)  # noqa: S102 - documented
    return namespace


@pytest.mark.slow
def test_random_access_example_runs(sample_dataset, tmp_path, monkeypatch):
    """ "Random access: any record by its number" on the README's recording: the records it
    names are the ones tf.data reads from the shards, in recorded order."""
    import tensorflow as tf

    namespace = _run_section(
        "## Random access: any record by its number", sample_dataset, tmp_path, monkeypatch
    )
    records = namespace["records"]
    shards = [str(s) for s in sorted((tmp_path / "out" / "sample").glob("*.tfrecord-*"))]
    ordered = [r.numpy() for r in tf.data.TFRecordDataset(shards)]
    assert len(records) == round(len(ordered) / 2)
    assert records.__getitems__([7, 0, 7, 2]) == [ordered[i] for i in (7, 0, 7, 2)]
    assert records.bytes_read > 0


@pytest.mark.slow
def test_open_source_example_runs(sample_dataset, tmp_path, monkeypatch):
    """ "Reading without TensorFlow: `open_source`" on the README's recording: its elements are
    `replay_dataset`'s, in recorded order."""
    from replay import replay_dataset

    namespace = _run_section(
        "## Reading without TensorFlow: `open_source`", sample_dataset, tmp_path, monkeypatch
    )
    source, batch = namespace["source"], namespace["batch"]
    features = ["log_mel_norm", "target"]
    ds = replay_dataset(
        "out/sample", split="all[:50%]", features=features, cycle_length=1, deterministic=True
    )
    theirs = [{k: v.numpy() for k, v in e.items()} for e in ds]  # in recorded order
    assert len(source) == len(theirs) > 7
    for got, i in zip(batch, [7, 0, 7, 2], strict=True):
        assert list(got) == list(theirs[i])
        for key, value in theirs[i].items():
            assert got[key].dtype == value.dtype and np.array_equal(got[key], value), key


@pytest.mark.slow
def test_train_with_it_example_runs(sample_dataset, tmp_path, monkeypatch):
    shutil.copytree(sample_dataset, tmp_path / "out" / "sample")  # the README's recording
    code = re.search(r"## Train with it\n\n```python\n(.*?)```", TRAINING, flags=re.S).group(1)
    monkeypatch.chdir(tmp_path)  # the example reads "out/sample"
    namespace: dict = {}
    exec(compile(code, "docs/training.md", "exec"), namespace)  # noqa: S102 - documented
    history = namespace["model"].history.history
    assert len(history["loss"]) == 1 and history["loss"][0] > 0


@pytest.mark.slow
def test_keras_resume_example_runs(sample_dataset, tmp_path, monkeypatch):
    """The example trains 3 epochs of 4 steps with a checkpoint every 2 (the last written at
    the end of epoch 2: position 48); run again, it restores that checkpoint and trains no more."""
    import numpy as np

    shutil.copytree(sample_dataset, tmp_path / "out" / "sample")
    heading = "### Keras: resume a killed `fit` mid-epoch\n"
    code = re.search(heading + r".*?```python\n(.*?)```", TRAINING, flags=re.S).group(1)
    monkeypatch.chdir(tmp_path)  # the example reads "out/sample" and writes "ckpt"
    first: dict = {}
    exec(compile(code, "docs/training.md", "exec"), first)  # noqa: S102 - documented
    assert first["info"].num_examples() == 18 and first["start"] == 0
    assert first["model"].history.epoch == [0, 1, 2]
    assert int(first["model"].optimizer.iterations.numpy()) == 12
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["checkpoint.npz"]
    again: dict = {}
    exec(compile(code, "docs/training.md", "exec"), again)  # noqa: S102 - documented
    assert again["start"] == 48 and again["checkpoint"].initial_epoch == 3
    assert again["model"].history.epoch == []
    for got, want in zip(again["model"].variables, first["model"].variables, strict=True):
        assert np.array_equal(got.numpy(), want.numpy())
    assert int(again["model"].optimizer.iterations.numpy()) == 12


@pytest.mark.slow
def test_from_python_example_runs(tmp_path, monkeypatch):
    code = re.search(r"## From Python\n.*?```python\n(.*?)```", TRAINING, flags=re.S).group(1)
    shutil.copytree(SAMPLE_DIR, tmp_path / "data" / "sample")
    monkeypatch.chdir(tmp_path)  # the example reads data/sample and writes out/py
    namespace: dict = {}
    exec(compile(code, "docs/training.md", "exec"), namespace)  # noqa: S102 - documented
    result = namespace["result"]
    assert result.num_examples == 18 and sum(result.split_counts.values()) == 18
