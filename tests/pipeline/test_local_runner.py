"""runners.direct.LocalRunner runs bundles in this process without Beam's 200 ms sampler wait
(`runners.internals.quick_state_sampler`)."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.worker import statesampler
from apache_beam.testing.util import assert_that, equal_to

from runners import direct, internals

# Once pipelines.record is imported (other tests), every pipeline's options are also parsed as
# RecordOptions, whose two required flags must then be present.
_ARGS = ["--input_pattern", "unused", "--output_dir", "unused"]


def _sampling_period(_) -> int:
    """The sampling period of the state sampler tracking the bundle that runs this."""
    return statesampler.get_current_tracker().sampling_period_ms


def _run(runner) -> None:
    with beam.Pipeline(runner=runner, options=PipelineOptions(_ARGS)) as p:
        periods = p | beam.Create([1, 2, 3]) | beam.Map(_sampling_period)
        assert_that(periods, equal_to([internals.STATE_SAMPLING_PERIOD_MS] * 3))


def test_bundles_are_sampled_at_the_short_period_and_beams_class_is_restored():
    beams = statesampler.StateSampler
    _run(direct.LocalRunner())
    assert statesampler.StateSampler is beams
    assert statesampler.DEFAULT_SAMPLING_PERIOD_MS == 200  # what a bundle waits for without it


def test_beams_own_runner_keeps_its_default_period():
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    with beam.Pipeline(runner=fn_runner.FnApiRunner(), options=PipelineOptions(_ARGS)) as p:
        periods = p | beam.Create([1]) | beam.Map(_sampling_period)
        assert_that(periods, equal_to([statesampler.DEFAULT_SAMPLING_PERIOD_MS]))
