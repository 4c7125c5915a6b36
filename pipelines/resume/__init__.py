"""``--resume``: a record run that died finishes from where it stopped, byte-identical.

The launcher's side, no Beam (`pipelines.job` calls it; the stage that reuses committed work is
`transforms.stages.task_commits`):

- `output_dir`: the output directory's start, fresh, ``--overwrite`` or ``--resume`` (the
  fingerprint compared and written, the job's own outputs but the committed work deleted);
- `fingerprint`: the run's plan as far as it shapes the records, and its first difference;
- `reuse`: the directory states, which commit and checkpoint records each task reuses.

**The fingerprint** (`pipelines.resume.fingerprint`): every run stores its plan before any work;
``--resume`` refuses in one line naming the first difference: runs are never mixed.

**Committed work.** A read task that finished gives its part files their final names (a rename;
a hard link for a part a checkpoint record names) and then writes its *commit record* atomically
(`transforms.stages.atomic`): its parts' descriptions, its files' summaries and errors, its
windows, the exact moments of its analysed rows (`transforms.stages.moments`: integers, a few
hundred bytes a feature). A long task also *checkpoints* (local output only): at the first
segment end past `read_windows.CHECKPOINT_BYTES` (64 MiB) of records since the last checkpoint
it flushes its part files and records the segments since the last checkpoint as a *piece*: byte
ranges of its still-temporary part files, and the same lists and moments for those segments.
Records are named ``.tmp/commits/<task>-<start>-<stop>.json`` (the task's segments they
cover); the default in-memory runner reads in one task, so there its checkpoints are what a
killed run keeps.
`plan_reuse` chains each task's records from its first segment (a task's commit, which covers it
all, supersedes its checkpoints; each shard's part in one file; only a task's own part files),
checks their part bytes are on disk, and hands the task its records (`ReadTask.resumed`): the
read stage emits their outputs, then, for a task reused up to a checkpoint, goes on from there
(`ReadTask.start`) in the same part files, cut to the checkpoint and appended to, so each shard
is still one part (a hard link). Checkpoints fall where an uninterrupted run's do (bytes of
records, deterministic). On an
object store parts cannot be continued: no checkpoints, whole tasks only (the in-memory runner
keeps its planned tasks there). A killed process loses nothing it recorded; parts are not
fsync'ed, so after a machine crash a piece whose bytes did not reach the disk is found short and
read again. The write and finalize stages always run in full: they are cheap beside reading, and
they rebuild every shard, schema and manifest from the parts.

**What TFT sees.** The rows this run reads, not the reused ones: nothing TFT computes depends on
them. The z-score statistics come from the moments of every analysed row, reused pieces' from
their records, added exactly (`transforms.stages.exact_z_score`: the same bits as an
uninterrupted run's, whatever the pieces), and the class vocabulary is the planned class list
whatever rows TFT sees (`transforms.stages.preprocessing`). A reused record's parts are read
back only for the AUTO compression samples, as far as the last sampled row
(`transforms.stages.task_commits`). With ``--feature_dtype float16`` / ``bfloat16`` the stored
features are rounded, so those samples could not be rebuilt from them: those runs reuse nothing
(every task is read again: still exact, not faster).

**Directory states** with ``--resume``: a finished dataset of the same options (its manifest's
``params``) and format is left untouched (the result says so; other options or an older format
are refused in one line; its inputs are not compared: the fingerprint went with ``.tmp/``);
a missing, empty or foreign directory is a normal run (foreign is refused as always); one of our
unfinished runs with the same fingerprint is resumed (the job's own outputs but ``.tmp/`` and the
run marker are deleted first: shards, schemas and ``transform_fn/`` are rewritten; a file the job
does not write is refused, never deleted); without a fingerprint (killed before it was written)
it is refused: ``--resume`` never acts as ``--overwrite``. ``--resume`` with ``--overwrite`` is
refused by the config.
"""
