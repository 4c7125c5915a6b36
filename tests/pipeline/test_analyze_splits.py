"""TFT's full pass never sees held-out data: with --splits the z-score statistics behind
``<feature>_norm`` come from the ``train`` split (or --analyze_splits), every split is transformed
with them, and the manifest names the analysed splits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import record, record_dataset
from pipelines.config import parse_analyze_splits
from pipelines.plan import UsageError, plan_record
from tests.support import wavgen
from tests.support.record_helpers import load_manifest, read_records

WIN = 4000
SPLITS = "train=50,test=50"


def test_parse_analyze_splits_rule():
    assert parse_analyze_splits(None, split_names=("all",)) == ("all",)
    assert parse_analyze_splits(None, split_names=("train", "test")) == ("train",)
    assert parse_analyze_splits("test, train", split_names=("train", "test")) == ("test", "train")
    for value, names, reason in [
        ("train", ("all",), "needs --splits"),
        (None, ("a", "b"), "no split named 'train'"),
        ("dev", ("train", "test"), "unknown split 'dev'"),
        ("train,train", ("train", "test"), "listed twice"),
    ]:
        with pytest.raises(ValueError, match=reason):
            parse_analyze_splits(value, split_names=names)


def _corpus(directory: Path) -> str:
    """Eight files of very different loudness, so per-split statistics differ clearly."""
    for i in range(8):
        samples = wavgen.synth(3 * WIN, seed=i) * (0.02 + 0.12 * i)
        wavgen.write_wav(directory / f"f{i}_tone.wav", samples, sample_rate=16000, subtype="PCM_16")
    return str(directory / "*.wav")


def test_planning_refuses_splits_it_cannot_analyse(tmp_path):
    pattern = _corpus(tmp_path / "in")

    def plan(*extra):
        argv = [
            "--input_pattern",
            pattern,
            "--output_dir",
            str(tmp_path / "o"),
            "--win_len",
            "4000",
        ]
        argv += extra
        return plan_record(PipelineOptions(argv).view_as(record.RecordOptions))

    assert plan("--splits", SPLITS).analyzed_splits == ("train",)
    assert plan().analyzed_splits == ("all",)
    with pytest.raises(UsageError, match="no split named 'train'"):
        plan("--splits", "a=50,b=50")
    assert plan("--splits", "a=50,b=50", "--analyze_splits", "a").analyzed_splits == ("a",)
    with pytest.raises(UsageError, match="no window in the analysed split"):
        plan("--splits", "train=1,test=99999")  # every file hashes to test
    assert plan("--splits", "train=1,test=99999", "--no_normalize").analyzed_splits == ("train",)


def _stats(records: list[dict]) -> tuple[float, float]:
    """Mean and (population) std of every raw log_mel value, in float64: what TFT estimates."""
    values = np.concatenate([r["log_mel"].astype(np.float64).ravel() for r in records])
    return values.mean(), values.std()


@pytest.mark.slow
def test_norm_statistics_come_from_the_train_split_only(tmp_path):
    pattern = _corpus(tmp_path / "in")
    out = tmp_path / "out"
    record_dataset(
        input_pattern=pattern, output_dir=str(out), win_len=WIN, splits=SPLITS, features="log_mel"
    )
    m = load_manifest(out)
    assert m["analyzed_splits"] == ["train"] and m["params"]["analyze_splits"] is None
    by_split = {"train": [], "test": []}
    for r in read_records(out):
        by_split[{f["path"]: f["split"] for f in m["files"]}[r["filepath"]]].append(r)
    assert by_split["train"] and by_split["test"]
    mean, std = _stats(by_split["train"])
    leaky_mean, leaky_std = _stats(by_split["train"] + by_split["test"])
    for r in by_split["test"] + by_split["train"]:
        want = (r["log_mel"].astype(np.float64) - mean) / std
        np.testing.assert_allclose(r["log_mel_norm"], want, rtol=0, atol=2e-4)
    # The leak the default avoids is far above that tolerance on this corpus.
    x = by_split["test"][0]["log_mel"].astype(np.float64)
    assert np.abs((x - mean) / std - (x - leaky_mean) / leaky_std).max() > 0.1

    # --analyze_splits train,test (the Python keyword) analyses both: the leaky statistics.
    both = tmp_path / "both"
    record_dataset(
        input_pattern=pattern,
        output_dir=str(both),
        win_len=WIN,
        splits=SPLITS,
        features="log_mel",
        analyze_splits=["train", "test"],
    )
    assert load_manifest(both)["analyzed_splits"] == ["train", "test"]
    for r in read_records(both):
        want = (r["log_mel"].astype(np.float64) - leaky_mean) / leaky_std
        np.testing.assert_allclose(r["log_mel_norm"], want, rtol=0, atol=2e-4)
