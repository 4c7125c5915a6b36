"""``python -m benchmarks``: the scenarios listed, or one run (`benchmarks.scenarios`)."""

import sys

from benchmarks.scenarios import main

sys.exit(main())
