"""The real hydrophone excerpt with a hand-written Raven table, recorded and replayed end to end
(docs/annotations.md's worked example, run as written); class-balanced replay alone:
test_balance.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.support.docs import page
from tests.support.record_helpers import load_manifest, read_records, record

ROOT = Path(__file__).resolve().parents[2]
SECTION = page("annotations.md")  # "Time-stamped annotations": the whole page
assert SECTION.startswith("# Time-stamped annotations")
# (win_start_idx, labels over (background, transient, tug)) the hand-written table gives
EXPECTED = [(i * 32000, [0, int(i == 2), 1]) for i in range(8)] + [
    (256000, [1, 0, 0]),
    (288000, [1, 0, 0]),
]


def _tolerance(p: float, n: int) -> float:
    """3 binomial standard deviations: the bound `replay.balance` documents."""
    return 3 * (p * (1 - p) / n) ** 0.5


@pytest.mark.slow
def test_hydrophone_raven_table_recorded_and_replayed(tmp_path, monkeypatch, capsys):
    import tensorflow as tf

    from replay import replay_dataset

    command = re.search(r"```bash\n(.*?)```", SECTION, flags=re.S).group(1)
    argv = shlex.split(command)[3:]  # after "python -m pipelines.record"
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    out = tmp_path / "out" / "tug"
    record(
        str(ROOT / args["--input_pattern"]),
        out,
        "--win_len", args["--win_len"], "--annotations", str(ROOT / args["--annotations"]),
    )  # fmt: skip
    m = load_manifest(out)
    assert m["classes"] == ["background", "transient", "tug"]
    assert [(e["path"].rsplit("/", 1)[-1], e["reason"]) for e in m["errors"]] == [
        (
            "hydrophone_excerpt_tug.Table.1.selections.txt:6",
            "ends at 5.4 s, beyond the file's duration (5 s)",
        )
    ]
    records = sorted(read_records(out), key=lambda r: r["win_start_idx"])
    assert [(r["win_start_idx"], r["labels"].tolist()) for r in records] == EXPECTED
    window2 = records[2]
    assert (window2["class"], window2["target"], window2["num_events"]) == ("transient+tug", -1, 2)
    # tug 0.2-3.9 s and transient 1.25-1.5 s, in samples of 64 kHz relative to 1.0 s
    assert window2["events"].tolist() == [[-51200, 185600, 2], [16000, 32000, 1]]
    assert records[0]["signal"].dtype == np.int32  # 24-bit samples, bit-exact
    tug, rate = sf.read(ROOT / args["--input_pattern"], dtype="int32")
    np.testing.assert_array_equal(records[3]["signal"], tug[96000:128000] >> 8)
    assert rate == 64000

    # inspect: windows per label, the annotation section, events drawn over the examples
    from pipelines import inspect
    from pipelines.tools import report_sample
    from replay import load_info

    assert inspect.run([str(out)]) == 0
    text = capsys.readouterr().out
    assert "Annotations (events and windows per class):" in text
    table = text.split("Annotations (events and windows per class):\n", 1)[1].splitlines()
    assert table[1].split() == ["background", "0", "-", "-", "-", "2", "0", "2", "0"]
    assert table[2].split() == ["transient", "1", "0.25", "0.25", "0.25", "1", "1", "0", "0"]
    assert table[3].split() == ["tug", "1", "3.7", "3.7", "3.7", "8", "8", "0", "0"]
    classes = text.split("Classes (windows per split):\n", 1)[1].splitlines()
    assert [line.split() for line in classes[1:4]] == [
        ["0", "background", "2"],
        ["1", "transient", "1"],
        ["2", "tug", "8"],
    ]
    sample = report_sample.sample_elements(load_info(out), examples_per_class=8)
    by_start = {ex.win_start: ex.events for ex in sample.examples["tug"]}
    assert by_start[0] == ((12800, 249600, 2),)
    assert all(ex.events == () for ex in sample.examples["background"])

    # balanced replay: every class drawn about a third of the time, seeded
    n = 900
    ds = replay_dataset(out, features=["labels"], balance="class", seed=0, shuffle_buffer=4)
    assert ds.cardinality() == tf.data.INFINITE_CARDINALITY
    labels = np.stack([e["labels"].numpy() for e in ds.take(n)])
    share = labels.mean(axis=0)
    tol = _tolerance(1 / 3, n)
    assert abs(share[0] - 1 / 3) <= tol  # background windows carry background only
    assert np.all(share >= 1 / 3 - tol)  # any label: its own third, plus co-labelled draws
    again = replay_dataset(out, features=["labels"], balance="class", seed=0, shuffle_buffer=4)
    np.testing.assert_array_equal(np.stack([e["labels"].numpy() for e in again.take(n)]), labels)

    # the page's Keras example, as written, on this dataset
    code = re.search(r"```python\n(.*?)```", SECTION, flags=re.S).group(1)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "docs/annotations.md", "exec"), namespace)  # noqa: S102 - documented
    history = namespace["model"].history.history
    assert len(history["loss"]) == 1 and history["loss"][0] > 0
