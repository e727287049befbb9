"""The regression benchmark's intervals through scipy against the hand-written ones they
replaced, kept below verbatim from `git show 40e3b32:ingot/bench/regress_report.py`.

Wilson: the same four decimals for every hits/n up to n = 120 (the old z, 1.959964, and scipy's
exact one never differ at that rounding). Bootstrap: within one step of the share (1/n) of the
old interval when the edits are mixed (a different generator and scipy's interpolated percentile,
so not the same draws); when every edit agrees, or there is only one, the same point the old one
gave (scipy refuses such a sample), with the Wilson interval beside it that does not collapse.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from ingot.bench.regress_report import BOOTSTRAP_DRAWS, SEED, bootstrap, wilson

Z95 = 1.959964


def old_bootstrap(hits: Sequence[bool], draws: int = BOOTSTRAP_DRAWS, seed: int = SEED) -> list[float] | None:
    """95% percentile bootstrap interval of the share of `hits` (resampling the items)."""
    n = len(hits)
    if not n:
        return None
    rng = random.Random(seed)
    shares = sorted(sum(rng.choices(hits, k=n)) / n for _ in range(draws))
    return [round(shares[int(0.025 * draws)], 4), round(shares[int(0.975 * draws) - 1], 4)]


def old_wilson(hits: int, n: int) -> list[float] | None:
    """95% Wilson score interval of hits / n."""
    if not n:
        return None
    p, z2 = hits / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def test_wilson_gives_the_old_interval_for_every_count_up_to_120_trials():
    differing = [(k, n) for n in range(121) for k in range(n + 1) if wilson(k, n) != old_wilson(k, n)]
    assert differing == []


# Every mix for small n; a few for large n, where one share step is narrower than the gap
# between a 95% and a 90% interval.
MIXED = [(n, k) for n in (2, 3, 5, 8, 13, 20, 40) for k in range(1, n)]
MIXED += [(n, k) for n in (100, 200) for k in (n // 4, n // 2, 3 * n // 4)]


@pytest.mark.parametrize(("n", "k"), MIXED)
def test_the_bootstrap_is_within_one_share_step_of_the_old_interval(n, k):
    hits = [True] * k + [False] * (n - k)
    random.Random(n * 100 + k).shuffle(hits)
    (low, high), (old_low, old_high) = bootstrap(hits), old_bootstrap(hits)
    step = 1 / n + 1e-4  # one share of the n edits, and the four-decimal rounding
    assert abs(low - old_low) <= step and abs(high - old_high) <= step
    assert 0.0 <= low <= k / n <= high <= 1.0


@pytest.mark.parametrize("hits", [[True] * 10, [False] * 7, [True], [False]])
def test_edits_that_all_agree_collapse_to_the_point_the_old_bootstrap_gave(hits):
    share = float(hits[0])
    assert bootstrap(hits) == old_bootstrap(hits) == [share, share]
    low, high = wilson(sum(hits), len(hits))
    assert low < high  # the interval that does not collapse is still reported


def test_no_edits_have_no_interval_in_either():
    assert old_bootstrap([]) is None and bootstrap([]) is None
    assert old_wilson(0, 0) is None and wilson(0, 0) is None
