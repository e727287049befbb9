"""`ingot bench optimize` counts what it reports: the repeat run's savings are measured calls,
and its seed side is zero because the caches answer it (the optimizer's cost table in the README)."""

from __future__ import annotations

from scripts.bench_optimize import run


def test_the_repeat_run_is_counted_and_pays_nothing_for_the_seed_side():
    report = run(candidates=2)
    first, repeat = report["body_pass"], report["repeat_run"]
    assert report["body_pass"]["ab"] == "pass" and repeat["first_run_seed_side_calls"] > 0
    assert report["body_pass"]["passport"] == "needs-acknowledgement"  # no goldens, no prices
    assert repeat["seed_side_calls"] == 0
    assert repeat["calls_saved"] == first["model_calls"] - repeat["model_calls"]
    assert repeat["calls_saved"] == repeat["first_run_seed_side_calls"]  # exactly the seed side, no more
    assert repeat["calls_by_model"]["teacher-model"] == first["calls_by_model"]["teacher-model"]
