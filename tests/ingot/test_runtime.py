"""Process set-up that `ingot serve` and the benchmarks share."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info

from ingot.runtime import one_blas_thread


def _blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_scoring_runs_on_one_blas_thread_inside_the_block_and_as_before_after_it():
    np.ones((2, 2)) @ np.ones(2)  # BLAS is loaded
    before = _blas_threads()
    assert before
    with one_blas_thread():
        assert _blas_threads() == [1] * len(before)
    assert _blas_threads() == before
