"""gs:// for real: inputs from and a dataset on a GCS server on 127.0.0.1 (fake-gcs-server).

`tests.support.gcs_server` builds and starts the server and the fronts both clients need (Beam's
through ``STORAGE_EMULATOR_HOST``, TensorFlow's through a TLS proxy with a test CA). The job and
the readers run in subprocesses with that environment, as a user's would run against GCS:

- ``python -m pipelines.record`` from ``gs://`` clips to a ``gs://`` dataset records the same
  windows, bit for bit, as the same files on a local disk, with every file in ``files`` or
  ``errors`` under its gs:// path, and leaves nothing under ``.tmp/``;
- `replay_dataset`, `load_info`, `verify_dataset` and ``python -m pipelines.verify`` /
  ``inspect`` read it there.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from replay import load_info, replay_dataset
from tests.support.gcs_server import running_gcs_server

pytestmark = pytest.mark.slow  # end-to-end: a Go server, subprocess jobs (runs in CI)

ROOT = Path(__file__).resolve().parents[2]
RATE = 16000
ARGS = ("--label_source", "dirname", "--win_len", "8000", "--features", "log_mel")
BROKEN = "up/broken.wav"
JOB_TIMEOUT_S = 600

READ = """
import hashlib, json, sys
from replay import load_info, replay_dataset, verify_dataset
path, keys = sys.argv[1], ["filepath", "win_start_idx", "signal", "class"]
info = verify_dataset(path)
rows = [
    [e["filepath"].decode(), int(e["win_start_idx"]),
     hashlib.sha256(e["signal"].tobytes()).hexdigest(), e["class"].decode()]
    for e in replay_dataset(path, features=keys, deterministic=True).as_numpy_iterator()
]
print(json.dumps({"rows": rows, "files": [f["path"] for f in info.files],
                  "errors": [dict(e) for e in info.errors], "num_examples": info.num_examples()}))
"""


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    with running_gcs_server(tmp_path_factory.mktemp("gcs-tls")) as server:
        yield server


@pytest.fixture(scope="module")
def clips(tmp_path_factory, gcs) -> Path:
    """9 clips of 1-1.5 s in 3 class folders and a file that is not a WAV; the same tree
    locally and under gs://clips/speech/."""
    root = tmp_path_factory.mktemp("clips")
    rng = np.random.default_rng(29)
    for name in ("down", "go", "up"):
        (root / name).mkdir()
        for i in range(3):
            x = rng.integers(-30000, 30000, size=RATE + 4000 * i, dtype=np.int16)
            sf.write(root / name / f"clip{i}.wav", x, RATE, "PCM_16")
    (root / BROKEN).write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk-not-a-chunk")
    gcs.create_bucket("clips")
    gcs.create_bucket("out")
    gcs.upload_tree(root, "clips", "speech")
    return root


def _run(gcs, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **gcs.env(), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def test_gs_clips_to_a_gs_dataset_read_back_there(tmp_path, gcs, clips):
    local = tmp_path / "local"
    record = ["-m", "pipelines.record", *ARGS, "--no_auth"]
    _run(gcs, *record, "--input_pattern", f"{clips}/*/*.wav", "--output_dir", str(local))
    done = _run(gcs, *record, "--input_pattern", "gs://clips/speech/*/*.wav", "--output_dir",
                "gs://out/ds")  # fmt: skip
    assert "recorded 21 windows from 9 files (1 failed)" in done.stdout

    names = gcs.list_names("out", "ds/")
    assert "ds/manifest.json" in names and "ds/transform_fn/saved_model.pb" in names
    assert not [n for n in names if n.startswith("ds/.tmp/") or "tmp-" in n], names

    got = json.loads(_run(gcs, "-c", READ, "gs://out/ds").stdout.strip().splitlines()[-1])
    want = [
        [
            e["filepath"].decode().replace(f"{clips}/", "gs://clips/speech/"),
            int(e["win_start_idx"]),
            hashlib.sha256(e["signal"].tobytes()).hexdigest(),
            e["class"].decode(),
        ]
        for e in replay_dataset(
            local, features=["filepath", "win_start_idx", "signal", "class"], deterministic=True
        ).as_numpy_iterator()  # fmt: skip
    ]
    assert sorted(got["rows"]) == sorted(want) and got["num_examples"] == len(want) == 21
    info = load_info(local)
    assert sorted(got["files"]) == sorted(
        f["path"].replace(f"{clips}/", "gs://clips/speech/") for f in info.files
    )
    assert [e["path"] for e in got["errors"]] == [f"gs://clips/speech/{BROKEN}"]
    assert got["errors"][0]["reason"] == info.errors[0]["reason"]

    verify = _run(gcs, "-m", "pipelines.verify", "gs://out/ds")
    assert "gs://out/ds" in verify.stdout + verify.stderr
    _run(gcs, "-m", "pipelines.inspect", "gs://out/ds")
