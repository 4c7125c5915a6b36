"""runners.internals.cached_dofn_introspection: Beam's answers, computed once; stock outside.

The memoised function must return exactly what Beam's returns (fresh lists), so DoFn state specs
come out the same; notice a function whose signature inputs changed, follow a DoFn instance's
own bound method, and be gone after the block (or never installed for an untested Beam).
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core, userstate

from runners import internals

_ARGS = ["--input_pattern", "unused", "--output_dir", "unused"]  # see test_runner_internals
_COUNT = userstate.ReadModifyWriteStateSpec("count", VarIntCoder())
_COUNT_STATE = beam.DoFn.StateParam(_COUNT)


class _Counting(beam.DoFn):
    """A stateful DoFn: its state spec is found through its process signature."""

    def process(self, element, count=_COUNT_STATE):
        key, _ = element
        seen = (count.read() or 0) + 1
        count.write(seen)
        yield key, seen


class _Plain(beam.DoFn):
    def process(self, element, scale=3):
        yield element * scale


def _stock():
    return core.get_function_args_defaults


def test_answers_are_beams_and_stock_is_back_after_the_block():
    stock_args, stock_specs = _stock(), userstate.get_dofn_specs
    dofns = [_Counting(), _Plain(), beam.Map(lambda x, k=2: x * k).dofn]
    expected = [stock_specs(d) for d in dofns]
    methods = [d.process for d in dofns] + [_Plain.process]
    expected_args = [stock_args(m) for m in methods]
    with internals.cached_dofn_introspection():
        assert _stock() is not stock_args
        for _ in range(2):  # a miss, then hits
            assert [userstate.get_dofn_specs(d) for d in dofns] == expected
            assert [core.get_function_args_defaults(m) for m in methods] == expected_args
        mine = userstate.get_dofn_specs(dofns[0])[0]
        mine.clear()  # the caller's own set: the cache is unaffected
        assert userstate.get_dofn_specs(_Counting()) == expected[0]
    assert _stock() is stock_args


def test_a_changed_signature_is_seen_and_an_instance_method_is_its_own():
    def fn(x, scale=3):
        return x * scale

    with internals.cached_dofn_introspection():
        assert core.get_function_args_defaults(fn) == (["x", "scale"], [3])
        fn.__defaults__ = (4,)
        assert core.get_function_args_defaults(fn) == (["x", "scale"], [4])

        plain = _Plain()
        assert userstate.get_dofn_specs(plain) == (set(), set())
        stateful = _Counting()
        plain.process = stateful.process  # an instance's own bound method: not the class's
        assert userstate.get_dofn_specs(plain) == ({_COUNT}, set())


def test_an_untested_beam_keeps_the_stock_functions():
    before = _stock()
    with internals.cached_dofn_introspection(version="2.78.0"):
        assert _stock() == before
    assert not internals.introspection_cache_usable("2.78.0")
    assert internals.introspection_cache_usable()


def test_a_stateful_pipeline_runs_the_same_inside_the_block():
    with internals.cached_dofn_introspection():
        with beam.Pipeline(runner=fn_runner.FnApiRunner(), options=PipelineOptions(_ARGS)) as p:
            counted = (
                p
                | beam.Create([("a", 1), ("a", 2), ("b", 3)])
                | beam.ParDo(_Counting())
                | beam.Map(lambda kv, base=10: (kv[0], kv[1] + base))
            )
            assert_that(counted, equal_to([("a", 11), ("a", 12), ("b", 11)]))
