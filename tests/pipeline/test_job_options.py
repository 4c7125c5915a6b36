"""runners.internals.JobOptions: Beam's PipelineOptions with each view built once."""

from __future__ import annotations

import copy
import pickle

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DebugOptions,
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
    TypeOptions,
)
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that, equal_to

from pipelines.record import RecordOptions
from runners.internals import JobOptions

ARGV = [
    "--input_pattern=in/*.wav",
    "--output_dir",
    "out",
    "--win_len",
    "16000",
    "--runner",
    "DirectRunner",
    "--direct_num_workers=2",
    "--experiments",
    "a",
    "--experiments=b",
]


def test_parses_exactly_like_pipeline_options():
    ours, beams = JobOptions(ARGV), PipelineOptions(ARGV)
    assert ours.get_all_options() == beams.get_all_options()
    assert ours.view_as(RecordOptions).win_len == beams.view_as(RecordOptions).win_len == 16000
    assert ours.view_as(DebugOptions).experiments == ["a", "b"]


def test_one_view_per_class_sharing_the_values_with_every_other_view():
    options = JobOptions(ARGV)
    standard = options.view_as(StandardOptions)
    assert options.view_as(StandardOptions) is standard
    assert options.view_as(DirectOptions) is not standard
    standard.runner = "PortableRunner"
    assert options.view_as(StandardOptions).runner == "PortableRunner"
    # a view made the uncached way reads the same store
    assert PipelineOptions.view_as(options, StandardOptions).runner == "PortableRunner"
    options.view_as(DebugOptions).experiments.append("c")
    assert PipelineOptions.view_as(options, DebugOptions).experiments == ["a", "b", "c"]
    assert options.get_all_options()["runner"] == "PortableRunner"


def test_copies_do_not_share_views_or_values_with_the_original():
    options = JobOptions(ARGV)
    options.view_as(StandardOptions)  # cached before copying
    for clone in (copy.deepcopy(options), pickle.loads(pickle.dumps(options))):
        assert type(clone) is JobOptions
        assert clone.get_all_options() == options.get_all_options()
        clone.view_as(StandardOptions).runner = "DataflowRunner"
        assert clone.view_as(StandardOptions).runner == "DataflowRunner"
        assert options.view_as(StandardOptions).runner == "DirectRunner"


def test_pickling_drops_the_impersonated_account_and_keeps_one_value_store():
    options = JobOptions(["--impersonate_service_account", "someone@example.com"])
    assert options.view_as(GoogleCloudOptions).impersonate_service_account  # cached
    options.view_as(StandardOptions)  # cached
    clone = pickle.loads(pickle.dumps(options))
    assert clone.view_as(GoogleCloudOptions).impersonate_service_account is None
    # Beam scrubs a copy of the value store; the clone's views must all use that copy
    clone.view_as(StandardOptions).runner = "DataflowRunner"
    assert PipelineOptions.view_as(clone, StandardOptions).runner == "DataflowRunner"


def test_a_pipeline_runs_on_them_and_keeps_one_view_per_class():
    argv = ["--input_pattern=x", "--output_dir=y", "--runner", "DirectRunner"]  # RecordOptions
    # The FnApiRunner by name: "DirectRunner" would first try to download Prism (network).
    with beam.Pipeline(runner=fn_runner.FnApiRunner(), options=JobOptions(argv)) as p:
        assert type(p.options) is JobOptions  # Beam's own deep copy
        assert p.options.view_as(TypeOptions) is p.options.view_as(TypeOptions)
        squares = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * x)
        assert_that(squares, equal_to([1, 4, 9]))
