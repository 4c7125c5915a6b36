"""The job's PipelineOptions: Beam's, with each view built once.

`PipelineOptions.view_as(cls)` builds a new argparse parser for `cls` and re-parses the
command line on every call (~0.45 ms). Beam 2.77 calls it on the pipeline's options about a
thousand times for one record job, mostly for TFT's ~250 transforms: per applied transform
(`Pipeline._apply_internal`, `_infer_result_type`) and per type-consistency check
(`typehints.is_consistent_with` asks for `TypeOptions` every time). Measured on the 60-minute
benchmark corpus (2 cores): 1,018 option parses -> 20, and ~1 s less CPU and wall time per run
(12.1 -> 11.1 s mean of 4 interleaved CLI pairs; benchmarks/RESULTS.md, Update 4). Beam has
no switch for this, so this subclass keeps the views it has built.

A cached view is exactly what `view_as` documents: views hold no values of their own, they
read and write the options' shared value store (`_all_options`), so a value set through any
view is seen through every other one, cached or new.
"""

from __future__ import annotations

from typing import TypeVar

from apache_beam.options.pipeline_options import PipelineOptions

OptionsT = TypeVar("OptionsT", bound=PipelineOptions)
_VIEWS = "_views"  # instance attribute: {options class: its view}


class JobOptions(PipelineOptions):
    """PipelineOptions whose `view_as` returns one view per options class.

    Parses flags exactly like `PipelineOptions(flags)` (it adds no options of its own). The
    cache is not pickled or deep-copied (Beam deep-copies the options into every Pipeline and
    pickles them into the job): a copy builds its own views, on its own value store.
    """

    def view_as(self, cls: type[OptionsT]) -> OptionsT:
        """Same as `PipelineOptions.view_as`; the view for `cls` is built on first use."""
        views = self.__dict__.setdefault(_VIEWS, {})
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())
        state.pop(_VIEWS, None)
        return state
