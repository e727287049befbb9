"""`ingot bench latency`'s arithmetic (the benchmark itself is run by hand: `make bench-latency`)."""

from __future__ import annotations

from ingot.bench.latency import paired_overhead


def test_each_calls_overhead_subtracts_its_own_floors_before_the_median_is_taken():
    routes = [10.0, 12.0, 30.0]  # the third call ran while the machine was busy...
    gets = [3.0, 3.0, 20.0]  # ...and so did its get_skill, timed just before it
    embeds = [5.0, 6.0, 8.0]
    assert paired_overhead(routes, gets, embeds) == {"p50": 2.0, "p95": 3.0}
