"""Paired significance tests for held-out A/B deltas: a t-test and an exact sign-flip test.

Pure functions over per-case scores, both scipy's: `ttest_rel` and `permutation_test` with
`permutation_type="samples"` (swapping a pair's two scores flips its delta's sign), one-sided.
The t-test assumes roughly normal deltas and is undefined when every delta is the same (zero
variance): it then reports no p at all rather than 0. The sign-flip test assumes only that, under
"no difference", each delta's sign is a coin flip: exact (all 2^n sign patterns) up to
EXACT_MAX_N cases, else a seeded Monte Carlo estimate ((hits + 1) / (draws + 1), never 0). It is
undefined for fewer than two pairs or when every delta is zero (no sign to flip). With three
cases the smallest p it can give is 1/8: three cases can never be significant at 0.1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

EXACT_MAX_N = 16
MONTE_CARLO_DRAWS = 100_000
SEED = 20261130  # fixed: the same deltas always give the same p


@dataclass(frozen=True)
class TestResult:
    """One test's outcome; `p` None means the test is undefined for these data (and says why)."""

    name: str
    n: int
    statistic: float | None
    p: float | None
    note: str | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "test": self.name,
            "n": self.n,
            "statistic": None if self.statistic is None else round(self.statistic, 6),
            "p": None if self.p is None else round(self.p, 6),
            "note": self.note,
        }


def _deltas(champion: Sequence[float], challenger: Sequence[float]) -> list[float]:
    return [float(b) - float(a) for a, b in zip(champion, challenger, strict=True)]


def paired_t(champion: Sequence[float], challenger: Sequence[float]) -> TestResult:
    """One-sided paired t-test that the challenger scores higher."""
    deltas = _deltas(champion, challenger)
    name = "paired t-test (one-sided)"
    if len(deltas) < 2:
        return TestResult(name, len(deltas), None, None, "fewer than two pairs")
    if max(deltas) - min(deltas) < 1e-12:
        return TestResult(name, len(deltas), None, None, "every delta is the same: zero variance")
    from scipy.stats import ttest_rel  # scipy.stats costs ~1 s to import: only when testing

    result = ttest_rel(challenger, champion, alternative="greater")
    return TestResult(name, len(deltas), float(result.statistic), float(result.pvalue))


def _mean_delta(challenger: np.ndarray, champion: np.ndarray, axis: int = -1) -> np.ndarray:
    # Rounded so that sign patterns whose means are equal compare equal despite float sums.
    return np.round(np.mean(challenger - champion, axis=axis), 12)


def sign_flip(champion: Sequence[float], challenger: Sequence[float]) -> TestResult:
    """One-sided sign-flip permutation test on the mean delta (exact for small n)."""
    deltas = _deltas(champion, challenger)
    n = len(deltas)
    if n < 2:
        return TestResult("sign-flip permutation (one-sided)", n, None, None, "fewer than two pairs")
    if not any(deltas):
        return TestResult(
            "sign-flip permutation (one-sided)", n, 0.0, None, "every delta is zero: no sign to flip"
        )
    if n <= EXACT_MAX_N:
        draws, rng = np.inf, None
        name, note = "exact sign-flip permutation (one-sided)", f"all {2**n} sign patterns"
    else:
        draws, rng = MONTE_CARLO_DRAWS, np.random.default_rng(SEED)
        name, note = (
            "sign-flip permutation (one-sided, Monte Carlo)",
            f"{MONTE_CARLO_DRAWS} draws, seed {SEED}",
        )
    from scipy.stats import permutation_test

    result = permutation_test(
        (np.asarray(challenger, dtype=float), np.asarray(champion, dtype=float)),
        _mean_delta,
        permutation_type="samples",
        vectorized=True,
        n_resamples=draws,
        alternative="greater",
        rng=rng,
    )
    return TestResult(name, n, float(np.mean(deltas)), float(result.pvalue), note)


def paired_tests(champion: Sequence[float], challenger: Sequence[float]) -> tuple[TestResult, TestResult]:
    return paired_t(champion, challenger), sign_flip(champion, challenger)


def variance_is_zero(champion: Sequence[float], challenger: Sequence[float]) -> bool:
    deltas = _deltas(champion, challenger)
    return len(deltas) < 2 or max(deltas) - min(deltas) < 1e-12


def finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
