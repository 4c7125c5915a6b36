"""gs:// for real: inputs from and a dataset on a GCS server on 127.0.0.1 (fake-gcs-server).

`tests.support.gcs_server` builds and starts the server and the fronts both clients need (Beam's
through ``STORAGE_EMULATOR_HOST``, TensorFlow's through a TLS proxy with a test CA). The job and
the readers run in processes of their own with that environment, as a user's would run against
GCS: forked (`tests.support.forked`) from one that imported Beam and TensorFlow once, or, where a
test kills them or runs two at once, fresh subprocesses:

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
- transient faults (503s and reset connections) on both clients' requests are retried and the
  dataset is byte-identical to a calm run's; the portable runner (a job service and an external
  worker pool) writes the same bytes as the DirectRunner;
- ``--append`` on a ``gs://`` dataset: the grown dataset replays as the local record of all the
  clips, version 1 reads as it was; the commit point is an object created with
  ``ifGenerationMatch=0`` (two appends at once, both past the early check: one commits, the
  other's one line and no object left); killed after its commit point, readers see the new
  version and ``--resume`` finishes it;
- no request leaves 127.0.0.1: the proxy refuses (and lists) every host but GCS's two, and each
  test ends by checking that list is empty.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from replay import load_info, replay_dataset
from tests.support.forked import ForkedProcess, Forker
from tests.support.gcs_server import running_gcs_server
from tests.support.record_helpers import without_times

pytestmark = pytest.mark.slow  # end-to-end: a Go server, subprocess jobs (runs in CI)

ROOT = Path(__file__).resolve().parents[2]
RATE = 16000
ARGS = ("--label_source", "dirname", "--win_len", "8000", "--features", "log_mel")
BROKEN = "up/broken.wav"
JOB_TIMEOUT_S = 600
GS_PATTERN = "gs://clips/speech/**/*.wav"
# TensorFlow's GCS client retries at once (its `GCS_RETRY_CONFIG_*`, 0 as in TF's own GCS tests):
# the same retries, no waiting. Any other initial delay (default 1 s) also adds a random 0-1 s to
# every retry (tsl's RetryingUtils::CallWithRetries): ~0.5 s for each of the >100 faults a job
# meets. Beam's client has no such setting: fewer faults are injected there.
QUICK_TF_RETRIES = {"GCS_RETRY_CONFIG_INIT_DELAY_TIME_US": "0"}

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


def _read_back(gcs, dataset: str, source: str, **env: str) -> dict:
    """`READ` of `dataset` in a subprocess, paths made relative to `source` like `local`'s."""
    got = json.loads(_run(gcs, "-c", READ, dataset, **env).stdout.strip().splitlines()[-1])
    rows = sorted([r[0].removeprefix(source), *r[1:]] for r in got["rows"])
    assert got["num_examples"] == len(rows)
    return {
        "rows": rows,
        "files": sorted(f.removeprefix(source) for f in got["files"]),
        "errors": [(e["path"].removeprefix(source), e["reason"]) for e in got["errors"]],
    }


# One `Forker` per environment (the server's, plus a test's own variables), for the module.
_FORKERS: dict[tuple[tuple[str, str], ...], Forker] = {}


@pytest.fixture(scope="module", autouse=True)
def _forkers():
    yield
    while _FORKERS:
        _FORKERS.popitem()[1].close()


def _run(gcs, *argv: str, code: int = 0, **env: str) -> subprocess.CompletedProcess:
    """``python <argv>`` as a process of its own with `gcs`'s environment (`Forker`: forked from
    a process that imported Beam and TensorFlow once, started the first time it is asked for)."""
    done = _forker(gcs, env).run(list(argv), timeout=JOB_TIMEOUT_S)
    assert done.returncode == code, done.stderr[-4000:]
    return done


def _requests_at_40_ms(gcs, *argv: str) -> tuple[subprocess.CompletedProcess, tuple[int, int]]:
    """`_run(gcs, *argv)` with 40 ms added to every request of either client (an object
    store's round trip); its output and the requests (Beam's, TensorFlow's) it sent."""
    gcs.beam_faults.requests = gcs.tf_faults.requests = 0
    gcs.beam_faults.latency_s = gcs.tf_faults.latency_s = 0.04
    try:
        done = _run(gcs, *argv)
    finally:
        gcs.beam_faults.latency_s = gcs.tf_faults.latency_s = 0.0
    return done, (gcs.beam_faults.requests, gcs.tf_faults.requests)


def _forker(gcs, env: dict[str, str]) -> Forker:
    """The `Forker` of `gcs`'s environment plus `env`, started the first time it is asked for."""
    env = {**gcs.env(), "TF_CPP_MIN_LOG_LEVEL": "2", **env}
    key = tuple(sorted(env.items()))
    if key not in _FORKERS:
        _FORKERS[key] = Forker({**os.environ, **env}, ROOT)
    return _FORKERS[key]


def _start(gcs, *argv: str, stdout: Path, stderr: Path | None = None) -> ForkedProcess:
    """``python <argv>`` started in a process group of its own with `gcs`'s environment, output
    to `stdout` (`stderr`: the same file if None); returns at once (`Forker.start`)."""
    return _forker(gcs, {}).start(list(argv), stdout=stdout, stderr=stderr)


@pytest.fixture(scope="module")
def gs_run(gcs, clips) -> subprocess.CompletedProcess:
    """``gs://clips/speech/**/*.wav`` recorded to ``gs://out/ds``, no faults."""
    record = ["-m", "pipelines.record", *ARGS, "--no_auth"]
    return _run(gcs, *record, "--input_pattern", GS_PATTERN, "--output_dir", "gs://out/ds")


def test_gs_clips_to_a_gs_dataset_read_back_there(gcs, clips, local, gs_run):
    assert "recorded 21 windows from 9 files (1 failed)" in gs_run.stdout

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
    """What guarantee 5 (docs/guarantees.md) keeps identical: shards and their record offsets
    (``offsets/<shard>.offsets``), schema, source tables, the manifest apart from created_utc
    (the same files `tests.support.reliability.assert_same_dataset` compares locally)."""
    out = {}
    for name in gcs.list_names("out", prefix):
        base = name.removeprefix(prefix)
        if ".tfrecord-" in base or base in ("schema.pbtxt", "files.jsonl", "errors.jsonl"):
            out[base] = gcs.read_object("out", name)
        elif base == "manifest.json":
            out[base] = without_times(json.loads(gcs.read_object("out", name)))
    return out


def test_gs_run_killed_while_finalising_is_refused_and_reruns_are_byte_identical(
    tmp_path, gcs, clips
):
    from tests.support.reliability import kill, wait_until_paused

    out = "gs://out/rerun"
    args = [*ARGS, "--no_auth", "--input_pattern", "gs://clips/speech/*/*.wav", "--output_dir", out]
    args.append("--overwrite")
    marker, log = tmp_path / "finalising.paused", tmp_path / "finalising.log"
    proc = _start(gcs, "-m", "tests.support.pause_points", "finalising", str(marker), *args,
                  stdout=log)  # fmt: skip
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
    assert len(first) == 6 and first == second  # 1 shard, its offsets, schema, 2 tables, manifest
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


def test_transient_faults_on_every_request_kind_are_retried_and_the_dataset_is_byte_identical(
    gcs, clips, local, gs_run
):
    """Both clients meet transient faults: every 6th request of Beam's (listing and reading the
    inputs, the write stage's part reads, TFT's temporary files) and every 5th of TensorFlow's
    (uploads of parts, shards, schema, transform graph and manifest; reads of the vocabulary
    and statistics; stats and listings) is answered 503 or has its connection reset. Their
    retries absorb them: the dataset is byte-identical to the calm run's (`gs_run`), and it
    reads back the same, with the faults still on, through `replay_dataset` and `verify`."""
    for faults, every in ((gcs.beam_faults, 6), (gcs.tf_faults, 5)):
        faults.every, faults.resets, faults.injected, faults.reset = every, True, 0, 0
    try:
        argv = ["-m", "pipelines.record", *ARGS, "--no_auth", "--input_pattern", GS_PATTERN]
        _run(gcs, *argv, "--output_dir", "gs://out/flaky", **QUICK_TF_RETRIES)
        written = (gcs.beam_faults.injected, gcs.beam_faults.reset, gcs.tf_faults.injected,
                   gcs.tf_faults.reset)  # fmt: skip
        got = _read_back(gcs, "gs://out/flaky", "gs://clips/speech/", **QUICK_TF_RETRIES)
    finally:
        gcs.beam_faults.every = gcs.tf_faults.every = 0
    beam_503s, beam_resets, tf_faults, tf_resets = written
    assert beam_503s - beam_resets >= 3 and beam_resets >= 3, written
    assert tf_faults - tf_resets >= 3 and tf_resets >= 3, written
    assert gcs.tf_faults.injected > tf_faults  # the read back met faults too
    assert _dataset_bytes(gcs, "flaky/") == _dataset_bytes(gcs, "ds/")
    assert got == {k: local[k] for k in got}


def test_portable_runner_writes_the_same_gs_dataset(tmp_path, gcs, clips, gs_run):
    """Beam's portable path (a local job service, an external worker pool, both with the
    emulator's environment as a cluster's would have GCS credentials) records the gs:// clips
    into a gs:// dataset byte-identical to the DirectRunner's (`gs_run`)."""
    from tests.engines import clusters

    env = {**gcs.env(), "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    started = []
    try:
        job_port, pool_port = clusters.free_port(), clusters.free_port()
        command = [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main"]
        started.append(clusters.Process("job service", [*command, "--port", str(job_port)],
                                        tmp_path / "job_service.log", env=env))  # fmt: skip
        started[-1].wait_listening(job_port)
        command = [sys.executable, "-m", "runners.worker_pool", "--service_port", str(pool_port)]
        started.append(clusters.Process("worker pool", [*command, "--bind_host", "127.0.0.1"],
                                        tmp_path / "worker_pool.log", env=env))  # fmt: skip
        started[-1].wait_listening(pool_port)
        argv = ["-m", "pipelines.record", *ARGS, "--no_auth", "--input_pattern", GS_PATTERN]
        argv += ["--output_dir", "gs://out/portable", "--runner", "PortableRunner"]
        argv += ["--job_endpoint", f"localhost:{job_port}", "--environment_type", "EXTERNAL"]
        done = _run(gcs, *argv, "--environment_config", f"localhost:{pool_port}")
    finally:
        for process in reversed(started):
            process.stop()
    assert "recorded 21 windows from 9 files (1 failed)" in done.stdout
    assert _dataset_bytes(gcs, "portable/") == _dataset_bytes(gcs, "ds/")


LIST_APPENDS = """
import json, sys
import tensorflow as tf
from replay import load_info
info = load_info(sys.argv[1])
dirs = [f"appends/{n.rstrip('/')}" for n in tf.io.gfile.listdir(sys.argv[1] + "/appends")]
print(json.dumps([info.version, dirs, [c["dir"] for c in info.commits[1:]]]))
"""
V1_FILES = """
import json, sys
from replay import load_info
print(json.dumps(sorted(f["path"] for f in load_info(sys.argv[1], version=1).files)))
"""
EXCLUSIVE = """
import sys
from pipelines.append import create_exclusively
print([create_exclusively(path, b"x") for path in sys.argv[1:]])
"""


def test_a_gs_dataset_grows_by_an_append_whose_commit_is_a_generation_precondition(
    gcs, clips, local
):
    """--append on gs://: a dataset of two clips a class plus an append of the rest replays as
    the local record of all; the commit point is an object created with ifGenerationMatch=0,
    which the server refuses once the object exists."""
    record = ["-m", "pipelines.record", *ARGS, "--no_auth", "--output_dir", "gs://out/grow"]
    _run(gcs, *record, "--input_pattern", "gs://clips/speech/*/clip[01].wav")
    done = _run(gcs, *record, "--input_pattern", "gs://clips/speech/*/*.wav", "--append")
    assert "from 3 files (1 failed)" in done.stdout, done.stdout
    grown = _read_back(gcs, "gs://out/grow", "gs://clips/speech/")
    assert grown["rows"] == local["rows"] and sorted(grown["files"]) == local["files"]
    assert sorted(grown["errors"]) == sorted(local["errors"])
    first = json.loads(_run(gcs, "-c", V1_FILES, "gs://out/grow").stdout.strip().splitlines()[-1])
    assert [p.rsplit("/", 1)[-1] for p in first] == ["clip0.wav", "clip1.wav"] * 3
    manifests = "gs://out/grow/manifests"
    out = _run(gcs, "-c", EXCLUSIVE, f"{manifests}/2.json", f"{manifests}/9.json",
               f"{manifests}/9.json")  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "[False, True, False]"


def test_two_gs_appends_at_once_to_one_version_commit_one_the_other_fails_cleanly(
    tmp_path, gcs, clips
):
    """Two append processes on one gs:// dataset, each held at its commit until both have passed
    the early check (`tests.support.commit_barrier`): the generation precondition on
    ``manifests/2.json`` lets exactly one commit version 2; the other says so in one line and
    leaves no object behind."""
    record = [*ARGS, "--no_auth", "--output_dir", "gs://out/race"]
    _run(gcs, "-m", "pipelines.record", *record, "--input_pattern", "gs://clips/speech/*/clip0.wav")
    barrier = tmp_path / "barrier"
    logs = [(tmp_path / f"append{i}.out", tmp_path / f"append{i}.err") for i in (1, 2)]
    append = ["-m", "tests.support.commit_barrier", str(barrier), "2", *record, "--append"]
    procs = [
        _start(gcs, *append, "--input_pattern", pattern, stdout=out, stderr=err)
        for pattern, (out, err) in zip(
            ("gs://clips/speech/*/clip1.wav", "gs://clips/speech/*/clip2.wav"), logs, strict=True
        )
    ]
    outcomes = [
        (p.wait(timeout=JOB_TIMEOUT_S), out.read_text(), err.read_text())
        for p, (out, err) in zip(procs, logs, strict=True)
    ]
    assert len(list(barrier.iterdir())) == 2  # both reached the commit point
    codes = sorted(code for code, _, _ in outcomes)
    assert codes == [0, 2], [(c, e[-2000:]) for c, _, e in outcomes]
    (err,) = [e.strip().splitlines() for code, _, e in outcomes if code == 2]
    assert err[-1].startswith("error: --append: another append committed version 2"), err
    listing = _run(gcs, "-c", LIST_APPENDS, "gs://out/race").stdout.strip().splitlines()[-1]
    versions, dirs, committed = json.loads(listing)
    assert versions == 2
    assert sorted(dirs) == sorted(committed)
    assert gcs.read_object("out", "race/manifest.json") == gcs.read_object(
        "out", "race/manifests/2.json"
    )


def test_a_gs_append_killed_after_its_commit_point_reads_as_the_new_version_and_resumes(
    tmp_path, gcs, clips
):
    """Killed between the creation of manifests/2.json and the switch of manifest.json: a
    reader on gs:// sees version 2 whole and version 1 as it was; --append --resume finishes
    the switch and the clean-up."""
    from tests.support.reliability import kill, wait_until_paused

    record = [*ARGS, "--no_auth", "--output_dir", "gs://out/killed"]
    _run(gcs, "-m", "pipelines.record", *record, "--input_pattern", "gs://clips/speech/*/clip0.wav")
    args = [*record, "--input_pattern", "gs://clips/speech/*/clip[01].wav", "--append"]
    marker, log = tmp_path / "committed.paused", tmp_path / "committed.log"
    proc = _start(gcs, "-m", "tests.support.pause_points", "append committed", str(marker), *args,
                  stdout=log)  # fmt: skip
    try:
        wait_until_paused(proc, marker)
    finally:
        kill(proc)
    names = gcs.list_names("out", "killed/")
    assert "killed/manifests/2.json" in names and "killed/manifests/1.json" in names
    listing = _run(gcs, "-c", LIST_APPENDS, "gs://out/killed").stdout.strip().splitlines()[-1]
    assert json.loads(listing)[0] == 2  # committed: the reader follows manifests/2.json
    first = json.loads(_run(gcs, "-c", V1_FILES, "gs://out/killed").stdout.strip().splitlines()[-1])
    assert [p.rsplit("/", 1)[-1] for p in first] == ["clip0.wav"] * 3
    done = _run(gcs, "-m", "pipelines.record", *args, "--resume")
    assert "is already a finished dataset (12 windows from 6 files)" in done.stdout
    switched = gcs.read_object("out", "killed/manifest.json")
    assert switched == gcs.read_object("out", "killed/manifests/2.json")


MATCH = """
import sys
from apache_beam.io.filesystems import FileSystems
print(len(FileSystems.match([sys.argv[1]])[0].metadata_list))
"""


def test_the_fronts_count_every_request_and_add_the_latency_asked(gcs, clips, gs_run):
    """The emulator's latency knob and request counts (what a launcher's listing costs against
    its per-file reads): Beam's listing of the 10 clips is a few requests, not one a file; with
    `latency_s` each of TensorFlow's requests waits that long."""
    gcs.beam_faults.requests = gcs.tf_faults.requests = 0
    listed = _run(gcs, "-c", MATCH, "gs://clips/speech/*/*.wav").stdout.strip().splitlines()[-1]
    assert listed == "10" and 1 <= gcs.beam_faults.requests < 10, gcs.beam_faults.requests
    gcs.tf_faults.latency_s = 0.5
    try:
        start = time.monotonic()
        _run(gcs, "-c", "from replay import load_info; load_info('gs://out/ds')")
        elapsed = time.monotonic() - start
    finally:
        gcs.tf_faults.latency_s = 0.0
    assert gcs.tf_faults.requests >= 2 and elapsed >= 1.0, (gcs.tf_faults.requests, elapsed)


def test_a_gs_run_whose_every_file_fails_writes_its_empty_shard(gcs, clips):
    """Every file refused (a label outside --classes): the job still writes its shard, empty,
    and a dataset that reads back with no window and every file in errors (a writer that never
    wrote left no object to rename)."""
    args = [*ARGS, "--no_auth", "--input_pattern", "gs://clips/speech/up/*.wav"]
    done = _run(gcs, "-m", "pipelines.record", *args, "--output_dir", "gs://out/none",
                "--classes", "down,go", code=1)  # fmt: skip
    assert "every input file failed (4)" in done.stderr, done.stderr[-2000:]
    got = _read_back(gcs, "gs://out/none", "gs://clips/speech/")
    assert got["rows"] == [] and got["files"] == [] and len(got["errors"]) == 4
    assert "none/audiorecords.tfrecord-00000-of-00001" in gcs.list_names("out", "none/")


LAUNCHER = """
import sys
from apache_beam.io.filesystems import FileSystems
from pipelines import job
from pipelines.config import RecordConfig
from pipelines.plan.reads import output_dir_state, scan_headers
from pipelines.plan import list_inputs
from runners.internals import JobOptions
argv = ["--no_auth"]
options = JobOptions(argv)
FileSystems.set_options(options)
config = RecordConfig(input_pattern=sys.argv[1], output_dir="gs://out/launcher-only",
                      label_source="dirname", win_len=8000, features="log_mel")
listed = list_inputs(config)
if sys.argv[2] == "launcher":  # what run_job does before the output dir and the job
    job.launcher_plan(config, listed, output_dir_state(listed.output_dir), options=options,
                      argv=argv)
else:  # the header reads the launcher no longer makes
    scan_headers(list(listed.inputs))
print(len(listed.inputs))
"""


@pytest.fixture(scope="module")
def many(tmp_path_factory, gcs, clips) -> str:
    """40 clips of 0.25 s in 4 class folders under gs://clips/many/: their pattern."""
    many = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(3)
    for i in range(40):
        folder = many / ("down", "go", "up", "yes")[i % 4]
        folder.mkdir(parents=True, exist_ok=True)
        x = rng.integers(-3000, 3000, size=RATE // 4, dtype=np.int16)
        sf.write(folder / f"c{i:02d}.wav", x, RATE, "PCM_16")
    gcs.upload_tree(many, "clips", "many")
    return "gs://clips/many/*/*.wav"


def test_the_launcher_of_a_run_planned_in_the_job_makes_no_request_a_file(gcs, clips, many):
    """Beam's requests from the launcher's planning (listing, labels, the output dir, the
    runner, one header for the feature shapes) are as many for 40 files as for 10: none a file;
    reading every header, as the launcher did, is two a file."""
    requests = {}
    for pattern, n in (("gs://clips/speech/*/*.wav", "10"), (many, "40")):
        for step in ("launcher", "headers"):
            gcs.beam_faults.requests = 0
            listed = _run(gcs, "-c", LAUNCHER, pattern, step).stdout.strip().splitlines()[-1]
            assert listed == n
            requests[(n, step)] = gcs.beam_faults.requests
    assert requests[("10", "launcher")] == requests[("40", "launcher")] <= 6, requests
    assert requests[("40", "headers")] - requests[("10", "headers")] >= 2 * 30, requests


RESUME_LAUNCHER = """
import json, os, sys
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from pipelines import job, record
from pipelines.config import RecordConfig
from pipelines.plan import list_inputs
from pipelines.plan.reads import RUN_MARKER
from pipelines.resume import fingerprint as fp
from runners.internals import JobOptions
from transforms.stages import atomic
phase, *argv = sys.argv[1:]
if phase == "resume":  # the launcher of --resume, the job described for Dataflow, not run
    sys.exit(record.main([*argv, "--resume"]))
FileSystems.set_options(JobOptions(argv))
config = RecordConfig.from_namespace(PipelineOptions(argv).view_as(record.RecordOptions))
listed = list_inputs(config)  # an unfinished run planned in the job: its marker and record
cut = {"cpu_count": os.cpu_count() or 1, "single_task": False}
stored = job.job_fingerprint(json.loads(json.dumps(config.params())), listed, cut=cut)
atomic.write_atomically(f"{listed.output_dir}/{RUN_MARKER}", [b"ours"])
atomic.write_atomically(f"{listed.output_dir}/{fp.FINGERPRINT_FILE}", fp.json_pieces(stored))
print(len(listed.inputs))
"""


def _dataflow_args(work: Path) -> list[str]:
    """Beam's options of an offline Dataflow translation (nothing submitted) staged in `work`."""
    (work / "staging").mkdir()
    dataflow = ["--runner", "DataflowRunner", "--project", "p", "--region", "europe-west1"]
    dataflow += ["--dataflow_endpoint", "http://localhost:1", "--no_auth"]
    dataflow += ["--temp_location", str(work / "tmp")]
    return [*dataflow, "--staging_location", str(work / "staging")]


def test_the_launcher_of_a_resume_planned_in_the_job_makes_no_request_a_file(tmp_path, gcs, many):
    """``--resume`` of an unfinished run planned in the job (inputs and output on gs://),
    translated for Dataflow with 40 ms a request: the launcher's requests (Beam's and
    TensorFlow's: the listing, the fingerprint compared, the output directory, the staged
    listing, the job built) are as many for 40 files as for 10."""
    dataflow = _dataflow_args(tmp_path)
    requests = {}
    for pattern, n in (("gs://clips/speech/*/*.wav", "10"), (many, "40")):
        out = f"gs://out/resumed-{n}"
        argv = [*ARGS, "--input_pattern", pattern, "--output_dir", out, *dataflow]
        argv += ["--template_location", str(tmp_path / f"job-{n}.json")]
        listed = _run(gcs, "-c", RESUME_LAUNCHER, "unfinished", *argv).stdout.strip()
        assert listed.splitlines()[-1] == n
        _, requests[n] = _requests_at_40_ms(gcs, "-c", RESUME_LAUNCHER, "resume", *argv)
        names = gcs.list_names("out", f"resumed-{n}/")
        assert f"resumed-{n}/.tmp/resume.json" in names, names  # compared, not replaced
    assert requests["10"] == requests["40"], requests


APPEND_LAUNCHER = """
import sys
from pipelines import append_plan, record
def refused(path):
    raise AssertionError(f"the launcher read every input {path} holds")
append_plan.read_dataset = refused  # planned in the job: the held set is the job's
sys.exit(record.main(sys.argv[1:]))
"""


def test_the_launcher_of_an_append_planned_in_the_job_makes_no_request_a_file(tmp_path, gcs, many):
    """``--append`` of gs:// inputs onto a gs:// dataset (of 4 and of 16 files), translated for
    Dataflow with 40 ms a request: the launcher's requests (the latest manifest, the listing, one
    header, the append's directory, the staged listing, the job built) are as many for 10 files
    as for 40, and it never reads the dataset's files and errors tables."""
    dataflow = _dataflow_args(tmp_path)
    requests = {}
    cases = {"10": ("c0[0-3]", "c0*"), "40": ("c[0-3][0-3]", "*")}  # recorded, then appended
    for n, (recorded, appended) in cases.items():
        out = f"gs://out/appended-{n}"
        record = [*ARGS, "--no_auth", "--output_dir", out]
        _run(gcs, "-m", "pipelines.record", *record, "--input_pattern",
             f"gs://clips/many/*/{recorded}.wav")  # fmt: skip
        argv = [*ARGS, "--output_dir", out, "--input_pattern", f"gs://clips/many/*/{appended}.wav"]
        argv += [*dataflow, "--append", "--template_location", str(tmp_path / f"job-{n}.json")]
        done, requests[n] = _requests_at_40_ms(gcs, "-c", APPEND_LAUNCHER, *argv)
        assert "wrote the job description" in done.stdout, done.stdout
        assert (tmp_path / f"job-{n}.json").is_file()
    assert requests["10"] == requests["40"], requests


ANNOTATED_LAUNCHER = """
import sys
from pipelines import job, record
from pipelines.plan import listing
def refused(*args, **kwargs):
    raise AssertionError("the launcher read every header")
job.read_headers = listing.read_headers = refused  # planned in the job: the headers are the job's
sys.exit(record.main(sys.argv[1:]))
"""


def test_the_launcher_of_an_annotated_run_planned_in_the_job_makes_no_request_a_file(
    tmp_path, gcs, clips, many
):
    """``--annotations`` of gs:// inputs from one CSV on gs:// naming every file, translated for
    Dataflow with 40 ms a request: the launcher's requests (the listing, the table read and its
    rows matched, one header for the feature shapes, the staged listing, the job built) are as
    many for 10 files as for 40, and it never reads every header."""
    dataflow = _dataflow_args(tmp_path)
    requests = {}
    for pattern, n in (("gs://clips/speech/*/*.wav", "10"), (many, "40")):
        prefix = pattern.removeprefix("gs://clips/").split("/", 1)[0]
        names = [name for name in gcs.list_names("clips", f"{prefix}/") if name.endswith(".wav")]
        assert len(names) == int(n)
        rows = [f"{name},0.05,0.2,{name.split('/')[1]}" for name in names]
        table = f"tables/annotated-{n}.csv"
        gcs.upload_bytes("clips", table, "\n".join(["path,start_s,end_s,label", *rows]).encode())
        argv = ["--win_len", "8000", "--features", "log_mel", "--input_pattern", pattern]
        argv += ["--output_dir", f"gs://out/annotated-{n}", "--annotations", f"gs://clips/{table}"]
        argv += [*dataflow, "--template_location", str(tmp_path / f"job-{n}.json")]
        done, requests[n] = _requests_at_40_ms(gcs, "-c", ANNOTATED_LAUNCHER, *argv)
        assert "wrote the job description" in done.stdout, done.stdout
        assert (tmp_path / f"job-{n}.json").is_file()
    assert requests["10"] == requests["40"], requests
