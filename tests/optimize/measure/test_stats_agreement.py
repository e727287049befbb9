"""The paired tests through scipy agree with the hand-written ones they replaced, where those were
right: the exact sign-flip p is the same fraction of the 2^n sign patterns for every input tried
(n <= 16, scores on the judge's 0.1 grid, with ties, and continuous), the Monte Carlo p is
within sampling error of the old estimate, and the t-test is unchanged.

The old functions are kept below verbatim (from `git show 40e3b32:optimize/measure/stats.py`) as
the reference. Deliberate differences, each tested: fewer than two pairs, or every delta zero,
now gives no p (the old said 0.5 or 1.0 for one pair, 1.0 for all zeros), and the Monte Carlo p
is (hits + 1) / (draws + 1), never 0 (the old could say 0).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pytest
from scipy.stats import ttest_rel

from optimize.measure.stats import EXACT_MAX_N, MONTE_CARLO_DRAWS, paired_t, sign_flip

OLD_SEED = 20261130


def old_deltas(champion: Sequence[float], challenger: Sequence[float]) -> list[float]:
    return [float(b) - float(a) for a, b in zip(champion, challenger, strict=True)]


def old_paired_t(champion: Sequence[float], challenger: Sequence[float]) -> tuple[float | None, float | None]:
    """The old paired_t's (statistic, p)."""
    deltas = old_deltas(champion, challenger)
    if len(deltas) < 2:
        return None, None
    if max(deltas) - min(deltas) < 1e-12:
        return None, None
    result = ttest_rel(challenger, champion, alternative="greater")
    return float(result.statistic), float(result.pvalue)


def old_sign_flip(champion: Sequence[float], challenger: Sequence[float]) -> tuple[float, float | None]:
    """The old sign_flip's (statistic, p)."""
    deltas = np.array(old_deltas(champion, challenger))
    n = len(deltas)
    observed = float(deltas.mean()) if n else 0.0
    if n == 0:
        return 0.0, None
    if n <= EXACT_MAX_N:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    else:
        signs = np.random.default_rng(OLD_SEED).choice((1.0, -1.0), size=(MONTE_CARLO_DRAWS, n))
    means = (signs * np.abs(deltas)).mean(axis=1)
    p = float(np.mean(means >= observed - 1e-12))
    return observed, p


def pairs(n: int, seed: int, grid: bool) -> tuple[np.ndarray, np.ndarray]:
    """Champion and challenger scores for n cases: on the judge's 0.1 grid (many ties and equal
    |deltas|, where a tolerance decides), or continuous; never every delta zero."""
    rng = np.random.default_rng(seed)
    while True:
        if grid:
            champion, challenger = rng.integers(0, 11, n) / 10, rng.integers(0, 11, n) / 10
        else:
            champion, challenger = rng.random(n), np.clip(rng.random(n) + 0.1, 0, 1)
        if np.any(challenger != champion):
            return champion, challenger


SMALL = [(n, seed, grid) for n in range(2, EXACT_MAX_N + 1) for seed in range(4) for grid in (True, False)]


@pytest.mark.parametrize(("n", "seed", "grid"), SMALL)
def test_the_exact_sign_flip_p_is_the_old_fraction_of_sign_patterns(n, seed, grid):
    champion, challenger = pairs(n, 1000 * n + seed, grid)
    new = sign_flip(champion, challenger)
    statistic, p = old_sign_flip(champion, challenger)
    assert new.p == p and new.statistic == statistic
    assert new.note == f"all {2**n} sign patterns"


def test_equal_magnitudes_tie_as_the_old_tolerance_tied_them():
    """Deltas of 0.1, 0.2 and 0.3 whose float sums differ in the last bit: a sign pattern with the
    same mean as the observed one counts as at least as extreme, in both (compared exactly, 3
    of the 8 such patterns would be lost: 5/32)."""
    champion = [0.7, 0.1, 0.3, 0.6, 0.2]
    challenger = [0.8, 0.3, 0.6, 0.5, 0.1]
    assert sign_flip(champion, challenger).p == old_sign_flip(champion, challenger)[1] == 8 / 32


@pytest.mark.parametrize("seed", range(4))
def test_the_monte_carlo_p_is_within_sampling_error_of_the_old_estimate(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(EXACT_MAX_N + 1, 40))
    champion = rng.integers(0, 11, n) / 10
    challenger = np.clip(champion + rng.normal(0.05, 0.2, n), 0, 1)
    new = sign_flip(champion, challenger)
    statistic, p = old_sign_flip(champion, challenger)
    assert "Monte Carlo" in new.name and new.statistic == statistic
    # Two independent estimates from 100 000 draws each: their difference has sd <= 0.0023.
    assert new.p == pytest.approx(p, abs=0.01)


def test_the_monte_carlo_p_is_never_zero_where_the_old_said_zero():
    champion, challenger = [0.0] * 30, [0.5] * 30
    assert old_sign_flip(champion, challenger)[1] == 0.0
    assert sign_flip(champion, challenger).p == 1 / (MONTE_CARLO_DRAWS + 1)


def test_fewer_than_two_pairs_or_no_nonzero_delta_has_no_p_where_the_old_gave_one():
    assert old_sign_flip([0.2], [0.9])[1] == 0.5 and sign_flip([0.2], [0.9]).p is None
    assert old_sign_flip([0.5] * 4, [0.5] * 4)[1] == 1.0
    zero = sign_flip([0.5] * 4, [0.5] * 4)
    assert zero.p is None and zero.statistic == 0.0 and "every delta is zero" in (zero.note or "")
    assert sign_flip([], []).p is None


@pytest.mark.parametrize(("n", "seed", "grid"), SMALL[::3])
def test_the_paired_t_test_is_unchanged(n, seed, grid):
    champion, challenger = pairs(n, 1000 * n + seed, grid)
    new = paired_t(champion, challenger)
    assert (new.statistic, new.p) == old_paired_t(champion, challenger)


def test_the_paired_t_test_is_still_undefined_for_one_pair_or_equal_deltas():
    assert old_paired_t([0.2], [0.9]) == (None, None) and paired_t([0.2], [0.9]).p is None
    assert old_paired_t([0.5] * 3, [0.7] * 3) == (None, None) and paired_t([0.5] * 3, [0.7] * 3).p is None
