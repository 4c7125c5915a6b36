"""Beam plugin imported by every SDK worker that runs `sdk_worker_main` (``--beam_plugins``).

`runners.configure` adds ``--beam_plugins runners.worker_setup`` for the runners whose workers
start through Beam's SDK worker entry point: the DirectRunner's multi-processing workers, Docker
and PROCESS environments (Flink, Spark, a portable job service) and Dataflow. Importing it
limits the worker to one numpy/BLAS/TensorFlow thread before any DoFn runs (see
`runners.threads`: speed with many workers per machine, and byte-identical features).
"""

from __future__ import annotations

from runners import threads

threads.limit_this_process()
