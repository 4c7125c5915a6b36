"""gs:// for real: inputs from and a dataset on a GCS server on 127.0.0.1 (fake-gcs-server).

`tests.support.gcs_server` builds and starts the server and the fronts both clients need (Beam's
through ``STORAGE_EMULATOR_HOST``, TensorFlow's through a TLS proxy with a test CA). The job and
the readers run in subprocesses with that environment, as a user's would run against GCS:

- ``python -m pipelines.record`` from ``gs://`` clips (a ``**`` glob) and from ``s3://`` clips
  (moto's S3 server, `tests.support.s3_server`) to a ``gs://`` dataset records the same windows,
  bit for bit, as the same files on a local disk, with every file in ``files`` or ``errors``
  under its URL, and leaves nothing under ``.tmp/``;
- `replay_dataset`, `load_info`, `verify_dataset` and ``python -m pipelines.verify`` /
  ``inspect`` read it there;
- the guarantees (docs/guarantees.md) that rest on the file system hold there: a run killed
  while it finalises (every shard written, no manifest) is refused as incomplete; reruns with
  ``--overwrite`` are byte-identical (shards, schema, source tables; the manifest apart from
  ``created_utc``);
  ``--overwrite`` refuses a directory that is not an audiorecords dataset and deletes nothing;
  a crafted manifest naming a shard in another bucket is refused as a local ``../x`` is;
- no request leaves 127.0.0.1: the proxy refuses (and lists) every host but GCS's two, and each
  test ends by checking that list is empty.
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


@pytest.fixture(autouse=True)
def _no_request_leaves_127_0_0_1(gcs):
    yield
    assert gcs.refused == [], "requests to other hosts than the emulator's"


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


@pytest.fixture(scope="module")
def local(tmp_path_factory, gcs, clips) -> dict:
    """The same clips recorded from the local disk: rows (relative path, window start, signal
    SHA-256, class), files and errors, paths relative to the clips' root."""
    out = tmp_path_factory.mktemp("local") / "ds"
    record = ["-m", "pipelines.record", *ARGS]
    _run(gcs, *record, "--input_pattern", f"{clips}/*/*.wav", "--output_dir", str(out))
    keys = ["filepath", "win_start_idx", "signal", "class"]
    rows = [
        [
            e["filepath"].decode().removeprefix(f"{clips}/"),
            int(e["win_start_idx"]),
            hashlib.sha256(e["signal"].tobytes()).hexdigest(),
            e["class"].decode(),
        ]
        for e in replay_dataset(out, features=keys, deterministic=True).as_numpy_iterator()
    ]
    info = load_info(out)
    files = sorted(f["path"].removeprefix(f"{clips}/") for f in info.files)
    errors = [(e["path"].removeprefix(f"{clips}/"), e["reason"]) for e in info.errors]
    return {"rows": sorted(rows), "files": files, "errors": errors,
            "manifest": (out / "manifest.json").read_text()}  # fmt: skip


def _read_back(gcs, dataset: str, source: str) -> dict:
    """`READ` of `dataset` in a subprocess, paths made relative to `source` like `local`'s."""
    got = json.loads(_run(gcs, "-c", READ, dataset).stdout.strip().splitlines()[-1])
    rows = sorted([r[0].removeprefix(source), *r[1:]] for r in got["rows"])
    assert got["num_examples"] == len(rows)
    return {
        "rows": rows,
        "files": sorted(f.removeprefix(source) for f in got["files"]),
        "errors": [(e["path"].removeprefix(source), e["reason"]) for e in got["errors"]],
    }


def _run(gcs, *argv: str, code: int = 0) -> subprocess.CompletedProcess:
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
    assert done.returncode == code, done.stderr[-4000:]
    return done


def test_gs_clips_to_a_gs_dataset_read_back_there(gcs, clips, local):
    record = ["-m", "pipelines.record", *ARGS, "--no_auth"]
    done = _run(gcs, *record, "--input_pattern", "gs://clips/speech/**/*.wav", "--output_dir",
                "gs://out/ds")  # fmt: skip
    assert "recorded 21 windows from 9 files (1 failed)" in done.stdout

    names = gcs.list_names("out", "ds/")
    assert "ds/manifest.json" in names and "ds/transform_fn/saved_model.pb" in names
    assert not [n for n in names if n.startswith("ds/.tmp/") or "tmp-" in n], names
    got = _read_back(gcs, "gs://out/ds", "gs://clips/speech/")
    assert got == {k: local[k] for k in got} and len(got["rows"]) == 21
    assert got["errors"][0][0] == BROKEN

    verify = _run(gcs, "-m", "pipelines.verify", "gs://out/ds")
    assert "gs://out/ds" in verify.stdout + verify.stderr
    _run(gcs, "-m", "pipelines.inspect", "gs://out/ds")


def test_s3_clips_to_a_gs_dataset(gcs, s3, clips, local):
    s3.upload_tree(clips, "clips", "speech")
    argv = ["-m", "pipelines.record", *ARGS, "--no_auth", *s3.beam_args()]
    argv += ["--input_pattern", "s3://clips/speech/*/*.wav", "--output_dir", "gs://out/from-s3"]
    _run(gcs, *argv)
    got = _read_back(gcs, "gs://out/from-s3", "s3://clips/speech/")
    assert got == {k: local[k] for k in got}


def test_a_crafted_gs_manifest_naming_another_bucket_is_refused_like_a_local_dotdot(
    tmp_path, gcs, clips, local
):
    """The manifest of the local run, its shard renamed; the reader refuses it before opening
    anything, on gs:// as on a local disk."""
    probe = []
    for target in ("gs://other-bucket/x", "../x"):
        text = local["manifest"]
        crafted = text.replace('"audiorecords.tfrecord-00000-of-00001"', json.dumps(target))
        assert crafted != text
        gcs.upload_bytes("out", "crafted/manifest.json", crafted.encode())
        (tmp_path / "crafted").mkdir(exist_ok=True)
        (tmp_path / "crafted" / "manifest.json").write_text(crafted)
        probe.append(_run(gcs, "-c", PROBE, "gs://out/crafted").stdout.strip().splitlines()[-1])
        probe.append(_run(gcs, "-c", PROBE, str(tmp_path / "crafted")).stdout.splitlines()[-1])
    assert all(p.startswith("ManifestError") for p in probe), probe
    assert "gs://other-bucket/x" in probe[0] and "../x" in probe[2]


PROBE = """
import sys
from replay import load_info
try:
    load_info(sys.argv[1])
    print("readable")
except Exception as e:
    print(type(e).__name__, e)
"""


def _dataset_bytes(gcs, prefix: str) -> dict[str, object]:
    """What guarantee 5 (docs/guarantees.md) keeps identical: shards, schema, source tables, the
    manifest apart from created_utc (the same files `tests.support.reliability.assert_same_dataset`
    compares locally)."""
    out = {}
    for name in gcs.list_names("out", prefix):
        base = name.removeprefix(prefix)
        if ".tfrecord-" in base or base in ("schema.pbtxt", "files.jsonl", "errors.jsonl"):
            out[base] = gcs.read_object("out", name)
        elif base == "manifest.json":
            manifest = json.loads(gcs.read_object("out", name))
            manifest.pop("created_utc")
            out[base] = manifest
    return out


def test_gs_run_killed_while_finalising_is_refused_and_reruns_are_byte_identical(
    tmp_path, gcs, clips
):
    from tests.support.reliability import cli, kill, wait_until_paused

    out = "gs://out/rerun"
    args = [*ARGS, "--no_auth", "--input_pattern", "gs://clips/speech/*/*.wav", "--output_dir", out]
    args.append("--overwrite")
    marker, log = tmp_path / "finalising.paused", tmp_path / "finalising.log"
    env = {**gcs.env(), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = cli(
        "finalising", str(marker), *args, log=log, env=env, module="tests.support.pause_points"
    )
    try:
        wait_until_paused(proc, marker)
    finally:
        kill(proc)
    names = gcs.list_names("out", "rerun/")
    assert "rerun/audiorecords.tfrecord-00000-of-00001" in names  # every shard is there
    assert "rerun/manifest.json" not in names
    probe = _run(gcs, "-c", PROBE, out).stdout.strip().splitlines()[-1]
    assert probe.startswith("IncompleteDatasetError"), probe

    _run(gcs, "-m", "pipelines.record", *args)
    first = _dataset_bytes(gcs, "rerun/")
    _run(gcs, "-m", "pipelines.record", *args)
    second = _dataset_bytes(gcs, "rerun/")
    assert len(first) == 5 and first == second
    left = gcs.list_names("out", "rerun/")
    assert not [n for n in left if n.startswith("rerun/.tmp/") or n.endswith(".audiorecords-run")]


def test_overwrite_refuses_a_foreign_gs_directory_and_deletes_nothing(gcs, clips):
    gcs.upload_bytes("out", "foreign/notes.txt", b"not a dataset")
    argv = ["-m", "pipelines.record", *ARGS, "--no_auth", "--input_pattern"]
    argv += ["gs://clips/speech/*/*.wav", "--output_dir", "gs://out/foreign", "--overwrite"]
    done = _run(gcs, *argv, code=2)
    assert "holds files that are not an audiorecords dataset" in done.stderr
    assert gcs.list_names("out", "foreign/") == ["foreign/notes.txt"]
    assert gcs.read_object("out", "foreign/notes.txt") == b"not a dataset"


def test_transient_gcs_errors_of_beams_client_are_retried_and_the_dataset_is_the_same(
    gcs, clips, local
):
    """Every 4th request of Beam's client (input listing and reads, the part reads of the write
    stage, TFT's temporary files) is answered 503: its retries absorb them, and the dataset
    reads back the same. (TensorFlow's side, `gcs.tf_faults`, is not covered yet: with every 5th
    of its requests answered 503, TFT's vocabulary table read failed with "EOF reached".)"""
    gcs.beam_faults.every = 4
    try:
        argv = ["-m", "pipelines.record", *ARGS, "--no_auth", "--input_pattern"]
        _run(gcs, *argv, "gs://clips/speech/*/*.wav", "--output_dir", "gs://out/flaky")
    finally:
        injected, gcs.beam_faults.every = gcs.beam_faults.injected, 0
    assert injected >= 5, injected
    got = _read_back(gcs, "gs://out/flaky", "gs://clips/speech/")
    assert got == {k: local[k] for k in got}
