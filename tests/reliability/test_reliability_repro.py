"""Guarantee 5, reproducible: the same input and options give byte-identical shards, schema and
manifest (apart from ``created_utc``) on one worker (in_memory) and on two worker processes
(multi_processing). The other reliability tests re-run the reference command in_memory and
compare the same way (test_reliability_atomic, test_reliability_retries).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines import record
from tests.support.reliability import (
    assert_same_dataset,
    manifest_without_time,
    record_args,
)

pytestmark = pytest.mark.slow


MULTI = ("--direct_running_mode", "multi_processing", "--direct_num_workers", "2")


@pytest.fixture(scope="module")
def one_and_two_workers(tmp_path_factory, reliability_reference) -> tuple[Path, Path]:
    """The reference command recorded by one process, then by two worker processes into the
    same directory (the graphs name it; a space in its name, as in the reference's file
    names): (the one-process copy, the two-process output)."""
    pattern, labels, _ = reliability_reference
    root = tmp_path_factory.mktemp("repro")
    out, one = root / "the output", root / "one process"
    record.run(record_args(pattern, labels, out))
    out.rename(one)
    record.run(record_args(pattern, labels, out, *MULTI))
    return one, out


def test_two_worker_processes_write_the_one_worker_bytes(
    one_and_two_workers, reliability_reference
):
    _, two = one_and_two_workers
    assert_same_dataset(two, reliability_reference[2])
    manifest = manifest_without_time(two)
    assert manifest["num_examples"] == 32 and manifest["num_files"] == 8
    assert manifest["params"]["num_shards"] == 3


def _clips_corpus(directory) -> str:
    """400 clips of 0.5 s at 16 kHz, at ten levels: their spectrograms (48 x 257 float32) fill
    several 8 MiB analysis batches. TFT's own statistics (float32 per-batch sums, merged in the
    runner's order) differed in the mean's last bits between the two modes here (0.5956254
    against 0.59562534)."""
    from tests.support import wavgen

    directory.mkdir(parents=True)
    for i in range(400):
        label = ("engine", "bird", "rain")[i % 3]
        signal = wavgen.synth(8000, seed=100 + i) * (0.01 + 0.09 * (i % 10))
        path = directory / f"clip{i:04d}_{label}.wav"
        wavgen.write_wav(path, signal, sample_rate=16000, subtype="PCM_16")
    return str(directory / "*.wav")


def test_two_worker_processes_give_the_one_worker_statistics_bit_for_bit(tmp_path):
    """Guarantee 5 without its former exception: with several analysis batches, the manifest's
    mean/var and transform_fn/'s statistics (the constants its graph captures) are the same bits
    in both modes, as are the shards, schema and tables (saved_model.pb itself differs: it names
    the run's temp dir and the process's traced-function counters)."""
    from transforms.spec.layout import RecordLayout
    from transforms.stages.finalize import read_z_score_statistics

    pattern = _clips_corpus(tmp_path / "in")
    base = ["--input_pattern", pattern, "--win_len", "8000", "--features", "spectrogram"]
    base += ["--num_shards", "2", "--direct_num_workers"]
    one, two = tmp_path / "one", tmp_path / "two"
    record.run([*base, "1", "--direct_running_mode", "in_memory", "--output_dir", str(one)])
    multi = ["--direct_running_mode", "multi_processing", "--output_dir", str(two)]
    record.run([*base, "2", *multi])
    assert_same_dataset(two, one)
    manifest = manifest_without_time(one)
    assert manifest["num_examples"] == 400
    norm = manifest["elements"]["spectrogram_norm"]
    shape = tuple(manifest["elements"]["spectrogram"]["shape"])
    layout = RecordLayout(feature_shapes={"spectrogram": shape})
    stats = read_z_score_statistics(str(one), layout)
    assert read_z_score_statistics(str(two), layout) == stats
    assert (norm["mean"], norm["var"]) == stats["spectrogram"]
    vocabulary = (one / "transform_fn" / "assets" / "class").read_bytes()
    assert vocabulary == (two / "transform_fn" / "assets" / "class").read_bytes()


def _fingerprint(saved_model: Path) -> dict:
    import tensorflow as tf

    fingerprint = tf.saved_model.experimental.read_fingerprint(str(saved_model))
    return {
        name: getattr(fingerprint, name)
        for name in (
            "saved_model_checksum",
            "graph_def_program_hash",
            "signature_def_hash",
            "saved_object_graph_hash",
            "checkpoint_hash",
        )
    }


def test_saved_models_are_the_same_programs_from_one_or_two_worker_processes(one_and_two_workers):
    """Guarantee 5's SavedModels: transform_fn/ and feature_fn/ recorded into the same
    directory by one process and by two worker processes hold the same program (TensorFlow's
    fingerprint hashes of the graph with its function names regularised, the signatures, the
    object graph and the variables) and the same variables and assets; only saved_model.pb's
    bytes may differ (``saved_model_checksum``): TensorFlow names each traced function with a
    counter of its process, and a worker traces after whatever it ran before."""
    one, out = one_and_two_workers  # recorded into the same directory: the graph names it
    assert_same_dataset(out, one)
    for model in ("transform_fn", "feature_fn"):
        got, want = _fingerprint(out / model), _fingerprint(one / model)
        del got["saved_model_checksum"], want["saved_model_checksum"]
        assert got == want, model
        for path in sorted((one / model).rglob("*")):
            if path.is_file() and path.name not in ("saved_model.pb", "fingerprint.pb"):
                relative = path.relative_to(one)
                assert (out / relative).read_bytes() == path.read_bytes(), relative
