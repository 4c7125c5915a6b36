"""Guarantee 8, untrusted datasets: hypothesis fuzzers over a real record run's manifest.

Field-aware mutations (`fuzz.manifest_target.mutate`: replace a node with a hostile value, delete
it, duplicate it, nudge a count by one, add an unknown key) of the manifest of a real small
record run. Every example must end in a valid dataset (read to the end, or failing on a record
that disagrees with the manifest with TensorFlow's error) or a `ReplayError` naming the dataset;
no other exception, no hang (tests/support/hang_guard.py ends the process), and no file outside the
dataset directory opened: Python's opens are watched by an audit hook, TensorFlow's (C++) by a
decoy shard just outside the directory whose access time must not move. `inspect`'s summary and
HTML report keep every manifest string as text. The run is format version 3: a mutation of the
source tables' counts, sizes or digests leaves `load_info` and reading intact (they never open
the tables) and must be refused by `pipelines.verify` and `inspect`, which read them.

CI runs a few dozen examples; run more with e.g.
``AUDIORECORDS_FUZZ_EXAMPLES=4000 python -m pytest tests/reliability/test_manifest_fuzz.py``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import tensorflow as tf
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fuzz.manifest_target import (
    HOSTILE_VALUES,
    MARKUP,
    OPS,
    OpenWatch,
    check_report,
    json_paths,
    mutate,
    page_tags,
)
from pipelines import inspect as inspect_cli
from pipelines import verify as verify_cli
from replay import ReplayError, load_info, replay_dataset
from replay import format as fmt
from tests.support.hang_guard import hang_guard
from tests.support.record_helpers import SAMPLE_DIR, record
from tests.support.replay_fixtures import set_tables, write_tables

pytestmark = pytest.mark.slow  # one real record run

EXAMPLES = int(os.environ.get("AUDIORECORDS_FUZZ_EXAMPLES", "0")) or None
DECOY = "outside.tfrecord"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """A real record run (2 splits x 2 GZIP shards, log_mel) and a decoy shard beside it."""
    root = tmp_path_factory.mktemp("manifest_fuzz")
    out = root / "recorded"
    record(
        str(SAMPLE_DIR / "*.wav"), out, "--win_len", "1024", "--max_windows_per_signal", "2",
        "--splits", "train=50,test=50", "--num_shards", "2", "--compression", "GZIP",
        "--features", "log_mel", "--num_mel_bins", "8", "--frame_length", "256",
        "--frame_step", "256", "--fft_length", "256",
    )  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format_version"] >= 3 and manifest["num_files"] > 0
    shard = out / manifest["splits"]["train"]["shards"][0]["filename"]
    shutil.copy(shard, root / DECOY)
    dataset = root / "dataset"
    shutil.copytree(out, dataset)
    tables = {name: (out / name).read_bytes() for name in (fmt.FILES_TABLE, fmt.ERRORS_TABLE)}
    return {"dataset": dataset, "manifest": manifest, "decoy": root / DECOY, "tables": tables}


def _decoy_untouched(decoy: Path) -> bool | None:
    """Whether the decoy was not read since `_arm_decoy` (None: this file system keeps no atime)."""
    return os.stat(decoy).st_atime_ns == 0


def _arm_decoy(decoy: Path) -> bool:
    """Sets the decoy's atime to 1970; returns whether a read moves it here (relatime, tmpfs)."""
    os.utime(decoy, ns=(0, os.stat(decoy).st_mtime_ns))
    with open(decoy, "rb") as f:
        f.read(1)
    works = os.stat(decoy).st_atime_ns != 0
    os.utime(decoy, ns=(0, os.stat(decoy).st_mtime_ns))
    return works


def _edits(manifest: dict) -> st.SearchStrategy:
    paths = json_paths(manifest)
    core = [i for i, p in enumerate(paths) if p and p[0] not in ("files", "params", "versions")]
    where = st.one_of(st.sampled_from(core), st.integers(1, len(paths) - 1))  # not the root
    value = st.one_of(
        st.sampled_from(HOSTILE_VALUES),
        st.integers(-(2**64), 2**64),
        st.text(max_size=12),
        st.lists(st.integers(-3, 2**20), max_size=3),
        st.floats(allow_nan=True),
    )
    return st.lists(st.tuples(where, st.integers(0, len(OPS) - 1), value), min_size=1, max_size=4)


def _write(dataset: Path, manifest: object, tables: dict[str, bytes]) -> None:
    """`manifest` as manifest.json, and the source tables (format version 3) as given."""
    text = json.dumps(manifest, allow_nan=True)  # NaN / Infinity: Python's json reads them back
    (dataset / "manifest.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    for name, data in tables.items():
        (dataset / name).write_bytes(data)


def _read_everything(dataset: Path) -> str:
    """What a trainer, `pipelines.verify` and `inspect`'s summary do; returns the outcome."""
    try:
        info = load_info(dataset)
        ds = replay_dataset(dataset)
    except ReplayError as e:
        assert str(e).startswith(str(dataset)) and "\n" not in str(e), str(e)
        return f"refused: {type(e).__name__}"
    for shard in info.shard_list():  # plain names: every shard is a file of this directory
        assert os.path.dirname(shard.path) == str(dataset), shard.path
    try:
        count = sum(1 for _ in ds)
        assert count == info.num_examples()
        outcome = "read"
    except tf.errors.OpError:  # records that disagree with the manifest's shapes or counts
        outcome = "valid manifest, records disagree"
    try:
        reports = verify_cli.verify(str(dataset))  # checks the source tables first
    except ReplayError as e:  # a mutated count, size or digest of files.jsonl / errors.jsonl
        assert str(e).startswith(str(dataset)) and "\n" not in str(e), str(e)
        with pytest.raises(ReplayError):
            check_report(info)  # inspect refuses the same tables
        return f"{outcome}, tables refused: {type(e).__name__}"
    assert (outcome == "read") >= all(r.ok for r in reports)  # verify flags what reading hit
    check_report(info)
    return outcome


def _one_example(run: dict, edits: list) -> str:
    dataset, decoy = run["dataset"], run["decoy"]
    atime_works = _arm_decoy(decoy)
    _write(dataset, mutate(run["manifest"], edits), run["tables"])
    with hang_guard():
        with OpenWatch.get().watching(dataset):
            outcome = _read_everything(dataset)
    if atime_works:
        assert _decoy_untouched(decoy), "TensorFlow read the decoy shard outside the dataset"
    return outcome


def test_decoy_detects_a_read_outside(run):
    """The decoy check works: a manifest naming it (before the schema existed) would read it."""
    if not _arm_decoy(run["decoy"]):
        pytest.skip("this file system does not record access times")
    ds = tf.data.TFRecordDataset(str(run["decoy"]), compression_type="GZIP")
    assert sum(1 for _ in ds) >= 1
    assert not _decoy_untouched(run["decoy"])


@pytest.mark.parametrize("target", ["../" + DECOY, "/" + DECOY, "sub/../../" + DECOY])
def test_manifest_pointing_at_the_decoy_is_refused(run, target):
    manifest = json.loads(json.dumps(run["manifest"]))
    manifest["splits"]["train"]["shards"][0]["filename"] = target
    assert _one_example(run, [(0, 0, manifest)]) == "refused: ManifestError"


_SETTINGS = dict(
    deadline=None,  # only the hang guard watches time: no test fails by the clock
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


@settings(max_examples=EXAMPLES or 40, **_SETTINGS)
@given(data=st.data())
def test_fuzz_mutated_real_manifest(run, data):
    event(_one_example(run, data.draw(_edits(run["manifest"]))))


_LABELS = st.sampled_from([MARKUP, "</pre><script>alert(1)</script>", "a&b\"'", "\udcff", "é"])


@settings(max_examples=EXAMPLES and max(EXAMPLES // 100, 3) or 3, **_SETTINGS)
@given(label=_LABELS, path=_LABELS, reason=_LABELS)
def test_fuzz_inspect_report_escapes_manifest_strings(run, tmp_path_factory, label, path, reason):
    """The real `inspect --report` (figures included) on manifests with hostile strings."""
    manifest = json.loads(json.dumps(run["manifest"]))
    manifest["classes"][0] = label
    files = [json.loads(line) for line in run["tables"][fmt.FILES_TABLE].splitlines()]
    for entry in files:
        entry["label"], entry["path"] = label, path + entry["path"]
    errors = [{"path": path, "reason": reason}]
    manifest["created_utc"] = label
    fields = write_tables(run["dataset"], files=files, errors=errors)  # the record's own tables
    set_tables(manifest, fields)
    _write(run["dataset"], manifest, {})
    out = tmp_path_factory.mktemp("report") / "r.html"
    assert inspect_cli.run([str(run["dataset"]), "--report", str(out)]) == 0
    tags, attrs = page_tags(out.read_text(encoding="utf-8"))
    assert tags["script"] == 0 and not [a for a in attrs if a.startswith("on")]
    assert tags["img"] == tags["figure"] >= 1  # only the report's own figures
