"""The benchmarks' p50 and p95 (numpy's linear percentile) against the two rounded-index
versions they replaced, kept below verbatim from `git show 40e3b32:ingot/bench/latency.py` and
`ingot/bench/routing.py`.

p50 is the ordinary median, as it always was. p95 is where the old two were right: at every n
where 0.95·(n-1) is a whole position both old versions and the new one give the value there;
elsewhere the new p95 interpolates between the two neighbours the old versions rounded to one of
(deliberately: the old ones disagreed, at n = 31 and 71, and could jump a whole sample).
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from ingot.bench.percentiles import percentiles


def old_latency_percentiles(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[min(len(ordered) - 1, int(0.95 * (len(ordered) - 1) + 0.5))], 2),
    }


def old_routing_percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))], 2),
    }


def timings(n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [round(rng.lognormvariate(2.5, 0.6), 3) for _ in range(n)]


SIZES = [(n, seed) for n in range(1, 102) for seed in range(3)]


@pytest.mark.parametrize(("n", "seed"), SIZES)
def test_p50_is_the_median_the_old_versions_printed(n, seed):
    values = timings(n, seed)
    assert percentiles(values)["p50"] == old_latency_percentiles(values)["p50"]
    assert percentiles(values)["p50"] == old_routing_percentiles(values)["p50"]


@pytest.mark.parametrize(("n", "seed"), [(n, s) for n, s in SIZES if (n - 1) % 20 == 0])
def test_p95_at_a_whole_position_is_the_value_both_old_versions_printed(n, seed):
    values = timings(n, seed)
    assert percentiles(values)["p95"] == old_latency_percentiles(values)["p95"]
    assert percentiles(values)["p95"] == old_routing_percentiles(values)["p95"]


@pytest.mark.parametrize(("n", "seed"), SIZES)
def test_p95_lies_between_the_two_samples_the_old_versions_rounded_between(n, seed):
    ordered = sorted(timings(n, seed))
    position = 0.95 * (n - 1)
    below, above = ordered[math.floor(position)], ordered[math.ceil(position)]
    p95 = percentiles(ordered)["p95"]
    assert round(below, 2) <= p95 <= round(above, 2)
    assert old_latency_percentiles(ordered)["p95"] in (round(below, 2), round(above, 2))
    assert old_routing_percentiles(ordered)["p95"] in (round(below, 2), round(above, 2))
    expected = below + (position - math.floor(position)) * (above - below)
    assert p95 == pytest.approx(round(expected, 2), abs=0.011)


def test_where_the_old_versions_disagreed_the_new_p95_sits_between_them():
    values = [float(v) for v in range(1, 32)]  # n = 31: position 28.5
    old = old_latency_percentiles(values)["p95"], old_routing_percentiles(values)["p95"]
    assert old == (30.0, 29.0)
    assert percentiles(values)["p95"] == 29.5


def test_a_percentile_of_no_timings_is_refused():
    with pytest.raises(statistics.StatisticsError):
        old_latency_percentiles([])
    with pytest.raises(ValueError, match="no timings"):
        percentiles([])
