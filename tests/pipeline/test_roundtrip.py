"""Record -> replay round trip: every recorded element comes back exactly once, equal, in every
compression; the serving transform reproduces the recorded features from raw `signal`."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from tests.support.record_helpers import SAMPLE_DIR, load_manifest, read_records, record

pytestmark = pytest.mark.slow


def _key(element: dict) -> tuple:
    return (int(element["index"]), int(element.get("channel", 0)), int(element["win_start_idx"]))


@pytest.fixture(scope="module", params=["GZIP", "ZLIB", "NONE"])
def dataset(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"rt_{request.param}") / "out"
    record(
        str(SAMPLE_DIR / "*.wav"),
        out,
        "--win_len",
        "4000",
        "--hop_len",
        "3000",
        "--features",
        "log_mel,mfcc",
        "--num_shards",
        "3",
        "--compression",
        request.param,
    )
    return out


def test_every_element_replayed_once_and_equal(dataset):
    from replay import replay_dataset

    manifest = load_manifest(dataset)
    assert manifest["compression"] in ("GZIP", "ZLIB", "NONE")
    written = {_key(e): e for e in read_records(dataset)}
    ds = replay_dataset(dataset)
    assert int(ds.cardinality()) == manifest["num_examples"] == len(written)
    seen = collections.Counter()
    for element in ds.as_numpy_iterator():
        key = _key(element)
        seen[key] += 1
        want = written[key]
        assert set(element) == set(want)
        for name, value in element.items():
            if isinstance(value, bytes):
                value = value.decode()
            if name == "signal":
                assert value.dtype == want[name].dtype
            np.testing.assert_array_equal(value, want[name], err_msg=name)
    assert set(seen) == set(written) and set(seen.values()) == {1}


def test_serving_transform_reproduces_recorded_features(dataset):
    from replay import load_transform, replay_dataset

    transform = load_transform(dataset)
    batch = next(iter(replay_dataset(dataset, batch_size=32).as_numpy_iterator()))
    out = transform({"signal": batch["signal"], "class": batch["class"]})
    for name in ("log_mel", "mfcc", "log_mel_norm", "mfcc_norm"):
        np.testing.assert_allclose(
            out[name].numpy(), batch[name], rtol=1e-5, atol=1e-5, err_msg=name
        )
    np.testing.assert_array_equal(out["target"].numpy(), batch["target"])
    unknown = transform({"signal": batch["signal"][:2]})  # no class at serving time
    np.testing.assert_array_equal(unknown["target"].numpy(), [-1, -1])
