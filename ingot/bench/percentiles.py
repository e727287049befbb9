"""The p50 and p95 every benchmark prints, computed one way.

numpy's `percentile` with `method="linear"` (Hyndman & Fan type 7, numpy's and R's default): the
value at position q·(n-1) of the sorted sample, interpolated between its two neighbours when that
position falls between them. p50 is therefore the ordinary median, and p95 need not be a value
that was observed. The benchmarks used to round the position instead, two ways that disagreed
(p95 at n = 31); a percentile of nothing is refused, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

METHOD = "linear"


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """{"p50", "p95"} of `values` (milliseconds or seconds alike), rounded to 2 decimals."""
    if not values:
        raise ValueError("no timings to take percentiles of")
    p50, p95 = np.percentile(np.asarray(values, dtype=float), [50, 95], method=METHOD)
    return {"p50": round(float(p50), 2), "p95": round(float(p95), 2)}
