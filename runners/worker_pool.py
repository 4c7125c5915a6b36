"""Beam worker pool for ``--environment_type EXTERNAL``, limited to one numeric thread per worker.

The sidecar next to each Flink TaskManager (or the local stand-in for one)::

    python -m runners.worker_pool --service_port 50000

is Beam's ``python -m apache_beam.runners.worker.worker_pool_main`` with `runners.threads`'s
environment exported first, so the SDK worker processes it starts get one numpy/BLAS/TF thread
each. External workers do not install staged packages: this project must be installed
(``pip install -e .`` or a container image with it) where the pool runs.
"""

from __future__ import annotations

import os
import sys

from runners.threads import THREAD_ENV


def main(argv: list[str] | None = None) -> None:
    """Runs Beam's worker pool service until interrupted (same flags as worker_pool_main)."""
    for var, value in THREAD_ENV.items():
        os.environ.setdefault(var, value)
    from apache_beam.runners.worker import worker_pool_main

    worker_pool_main.main(sys.argv if argv is None else argv)


if __name__ == "__main__":
    main()
