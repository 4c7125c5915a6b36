"""The size of the job a record run submits, at several corpus sizes (issue 27: it must not grow
with the number of files).

    python benchmarks/job_size.py DIR [DIR ...] [--label_source dirname]

For each input directory (``DIR/*/*.wav``) the record job is translated for Dataflow offline,
as tests/pipeline/test_dataflow.py does (``--template_location``, ``--dataflow_endpoint``
pointing nowhere, ``--no_auth``): nothing is submitted, Beam writes the job description and
stages the pipeline proto. Printed per corpus: files matched, the job description
(``job.json``) and the staged pipeline proto (``pipeline.pb``) in bytes, and what the launcher
staged beside the output (``.tmp/plan/``: the read tasks, read back by the job), plus the ratio
of the largest corpus's job to the smallest's. Each translation is a whole process.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def translate(input_dir: str, work: Path, extra: list[str]) -> dict:
    """Translates the job for `input_dir` in a child process; its sizes in bytes."""
    work.mkdir(parents=True)
    out, staging = work / "out", work / "staging"
    staging.mkdir()
    argv = [
        sys.executable, "-m", "pipelines.record",
        "--input_pattern", f"{input_dir}/*/*.wav", "--output_dir", str(out),
        "--win_len", "4000", "--features", "log_mel", *extra,
        "--runner", "DataflowRunner", "--project", "p", "--region", "europe-west1",
        "--dataflow_endpoint", "http://localhost:1", "--no_auth",
        "--temp_location", str(work / "tmp"), "--staging_location", str(staging),
        "--template_location", str(work / "job.json"),
    ]  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"translation of {input_dir} failed:\n{done.stderr[-3000:]}")
    plan = [p for p in (out / ".tmp" / "plan").glob("*") if p.is_file()]
    return {
        "files": len(glob.glob(f"{input_dir}/*/*.wav")),
        "seconds": time.monotonic() - start,
        "job_json": (work / "job.json").stat().st_size,
        "pipeline_pb": (staging / "pipeline.pb").stat().st_size,
        "staged_plan": sum(p.stat().st_size for p in plan),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", help="corpora: DIR/<class>/<clip>.wav")
    parser.add_argument("--label_source", default="dirname")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="job-size-") as tmp:
        for i, d in enumerate(args.dirs):
            row = translate(d, Path(tmp) / str(i), ["--label_source", args.label_source])
            rows.append(row)
            print(
                f"{row['files']:>9,} files: job.json {row['job_json']:>9,} B, pipeline.pb "
                f"{row['pipeline_pb']:>9,} B, staged plan {row['staged_plan']:>11,} B "
                f"(translation {row['seconds']:.1f} s)",
                flush=True,
            )
    small, large = min(rows, key=lambda r: r["files"]), max(rows, key=lambda r: r["files"])
    job = {r["files"]: r["job_json"] + r["pipeline_pb"] for r in rows}
    print(
        f"job (job.json + pipeline.pb) at {large['files']:,} files / at {small['files']:,}: "
        f"{job[large['files']] / job[small['files']]:.3f}x"
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
