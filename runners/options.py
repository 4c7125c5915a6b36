"""The job's PipelineOptions: `JobOptions` (Beam's, with each view built once).

It lives in `runners.internals` with the other library internals the project leans on (its
guard and the ``AUDIORECORDS_STOCK_BEAM`` opt-out); this name stays for its importers.
"""

from __future__ import annotations

from runners.internals import JobOptions

__all__ = ["JobOptions"]
