"""The output directory's start: fresh, ``--overwrite`` or ``--resume``.

`start_output_dir` (a run planned in the launcher) makes the run's fingerprint
(`pipelines.resume.fingerprint`), then either prepares the directory (`prepare_output_dir`: a
new run or ``--overwrite``) or, resuming one of our unfinished runs, compares the fingerprints
and deletes the job's own outputs but the committed work (`clear_for_resume`) and decides what
each task reuses (`resume_output_dir`), and writes the fingerprint before any work. A run
planned in the job (`job_fingerprint`: made from the listing) is resumed in the job: the
launcher compares and clears (`resume_in_job`), the job's plan step decides task by task what
is reused (`pipelines.plan.in_job`). The design of ``--resume`` is in `pipelines.resume`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pipelines.config import UsageError
from pipelines.plan.reads import RUN_MARKER, output_dir_state
from pipelines.resume import fingerprint as fp
from pipelines.resume import reuse
from replay import format as fmt
from replay.storage import is_url
from transforms.stages import atomic

if TYPE_CHECKING:
    from pipelines.plan import RecordPlan, ScannedInputs


def prepare_output_dir(plan: RecordPlan) -> None:
    """Removes a previous dataset (only one of ours: checked in planning) and marks the dir.

    The marker is written first and the manifest deleted next, so a run killed while deleting
    leaves a directory that is still ours and incomplete: ``--overwrite`` recovers it.
    """
    import tensorflow as tf

    out = plan.output_dir
    tf.io.gfile.makedirs(out)
    with tf.io.gfile.GFile(f"{out}/{RUN_MARKER}", "w") as fh:
        fh.write("an audiorecords run writes here; manifest.json appears when it is complete\n")
    for name in sorted(tf.io.gfile.listdir(out), key=lambda n: n != fmt.MANIFEST_FILENAME):
        path = f"{out}/{name.rstrip('/')}"
        if name.rstrip("/") != RUN_MARKER:
            (tf.io.gfile.rmtree if tf.io.gfile.isdir(path) else tf.io.gfile.remove)(path)
    tf.io.gfile.makedirs(f"{out}/.tmp")


def resume_output_dir(plan: RecordPlan, fingerprint: dict) -> reuse.Reuse:
    """``--resume`` on one of our unfinished runs: the committed work it reuses, once the
    job's own outputs but the committed work are deleted (never a file the job does not write).

    Raises:
      UsageError: the run has no resume record, was made from another plan (the line names the
        first difference), or the directory holds files the job does not write.
    """
    import tensorflow as tf

    out = plan.output_dir
    known = reuse.job_outputs(plan.name, plan.sharding.num_shards)
    reusable = clear_for_resume(
        out,
        fingerprint,
        stored=fp.read_fingerprint(out),
        is_output=known.__contains__,
        rounded=_rounded(plan.read.layout),
    )
    if not reusable:
        return reuse.Reuse(tasks=plan.tasks)
    reused = reuse.plan_reuse(out, plan.tasks, checkpoints=not is_url(out))
    for path in reused.stale:  # a continued task rewrites the part bytes they name
        tf.io.gfile.remove(path)
    return reused


def clear_for_resume(
    out: str,
    fingerprint: Mapping[str, Any],
    *,
    stored: Mapping[str, Any] | None,
    is_output: Callable[[str], bool],
    rounded: bool,
    clear: bool = True,
) -> bool:
    """``--resume`` on one of our unfinished runs in `out`: its stored fingerprint compared with
    `fingerprint`, then the job's own outputs deleted but the committed work (``.tmp/parts``,
    ``.tmp/commits``) and the fingerprint; with `rounded` features (not re-analysable) the
    committed work too. A few listings and reads, none a file of the run. Returns whether the
    committed work is there to reuse.

    Args:
      out: the output directory.
      fingerprint: the fingerprint this run compares with the stored one.
      stored: the run's stored fingerprint (`fingerprint.read_fingerprint`), None: none.
      is_output: whether a top-level name of `out` is one the job writes (else refused).
      rounded: the run stores rounded features (``--feature_dtype`` float16 / bfloat16).
      clear: False: compared and checked only, nothing deleted.

    Raises:
      UsageError: the run has no resume record, was made from another plan (the line names the
        first difference), or the directory holds files the job does not write.
    """
    import tensorflow as tf

    if stored is None:
        raise UsageError(
            f"--resume: {out} holds an unfinished run without a resume record; "
            "use --overwrite to start again"
        )
    difference = fp.first_difference(stored, fingerprint)
    if difference is not None:
        raise UsageError(
            f"--resume: {out} holds an unfinished run of another plan: {difference}; "
            "rerun with its options and inputs, or with --overwrite to start again"
        )
    names = [n.rstrip("/") for n in tf.io.gfile.listdir(out) if n.rstrip("/") != RUN_MARKER]
    unknown = reuse.unknown_entries(names, is_output)
    if unknown:
        raise UsageError(
            f"--resume: {out} holds files a record run does not write ({', '.join(unknown[:3])}"
            f"{', ...' if len(unknown) > 3 else ''}); move them away, or use --overwrite"
        )
    if not clear:
        return not rounded
    keep_tmp = {"parts", "commits", fp.FINGERPRINT_FILE.rsplit("/", 1)[-1]}
    tmp = f"{out}/.tmp"
    doomed = [f"{out}/{n}" for n in names if n != ".tmp"]  # rewritten: shards, schemas, ...
    doomed += [f"{tmp}/{n.rstrip('/')}" for n in tf.io.gfile.listdir(tmp)]
    for path in doomed:
        if not (path.startswith(f"{tmp}/") and path.rsplit("/", 1)[-1] in keep_tmp):
            (tf.io.gfile.rmtree if tf.io.gfile.isdir(path) else tf.io.gfile.remove)(path)
    if rounded:
        logging.getLogger("audiorecords").info(
            "--resume: --feature_dtype float16 / bfloat16 stores rounded features: every task "
            "is read again"
        )
        if tf.io.gfile.exists(f"{out}/{reuse.COMMITS_DIR}"):
            tf.io.gfile.rmtree(f"{out}/{reuse.COMMITS_DIR}")
        return False
    return True


def _rounded(layout: Any) -> bool:
    """Whether `layout` (a `RecordLayout`) stores rounded features: not re-analysable."""
    return bool(layout.feature_shapes) and layout.feature_dtype != "float32"


def start_output_dir(plan: RecordPlan, *, resuming: bool) -> reuse.Reuse:
    """Prepares the output directory of a run planned in the launcher; returns the committed
    work to reuse (``--resume``). The fingerprint is written before any work
    (`pipelines.resume.fingerprint`). A run planned in the job resumes in the job
    (`resume_in_job`)."""
    ours = resuming and output_dir_state(plan.output_dir) == "ours"
    fingerprint = fp.fingerprint(plan.params, plan.input_stamps, derived=fp.plan_digest(plan))
    if ours:
        reused = resume_output_dir(plan, fingerprint)
    else:
        prepare_output_dir(plan)
        reused = reuse.Reuse(tasks=plan.tasks)
    atomic.write_atomically(f"{plan.output_dir}/{fp.FINGERPRINT_FILE}", fp.json_pieces(fingerprint))
    return reused


def resume_in_job(
    plan: RecordPlan,
    listed: ScannedInputs,
    stored: Mapping[str, Any],
    *,
    cut: Mapping[str, Any],
    clear: bool = True,
) -> tuple[dict[str, Any], bool]:
    """``--resume`` of an unfinished run planned in the job (`stored`: its fingerprint), in the
    launcher: the fingerprint of this run (`job_fingerprint` of `listed`, the listing, and
    `cut`) compared with the stored one (digested as its version did) and the directory cleared
    (`clear_for_resume`; not with `clear` False: a job description only, nothing deleted); the
    job decides task by task what it reuses (`pipelines.plan.in_job`). No request a file of
    the run.

    Returns:
      The fingerprint to write (this version's), and whether the committed work is reused.

    Raises:
      UsageError: as `clear_for_resume`.
    """
    fingerprint = job_fingerprint(plan.params, listed, cut=cut)
    compared = fingerprint
    if stored.get("fingerprint_version") == 1:  # its listing digested as version 1 did
        compared = job_fingerprint(plan.params, listed, cut=cut, version=1)
    reusable = clear_for_resume(
        plan.output_dir,
        compared,
        stored=stored,
        is_output=reuse.named_output(plan.name),
        rounded=_rounded(plan.read.layout),
        clear=clear,
    )
    return fingerprint, reusable


def job_fingerprint(
    params: Mapping[str, Any],
    listed: ScannedInputs,
    *,
    cut: Mapping[str, Any],
    version: int = fp.FINGERPRINT_VERSION,
) -> dict[str, Any]:
    """The fingerprint of a run planned in the job: the options, the stamps and what the
    launcher derives (`fp.listing_digest`, as record `version` digests it), with what the read
    tasks' cut depends on besides the files (`cut`: the launcher's ``cpu_count``, whether
    ``single_task``)."""
    derived = fp.listing_digest(listed, cut=cut, version=version)
    return fp.fingerprint(params, listed.stamps, derived=derived, planned_in_job=True)
