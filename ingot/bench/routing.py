"""`ingot bench routing`: routing quality and in-process latency on labelled cases.

Cases are JSON lines `{"id", "task", "expected": name | null, "kind", "acceptable"?: [names]}`.
Definitions (printed with the numbers):
- top1: share of cases with an expected skill whose routed skill (match or related_match, the
  one whose body is loaded) is the expected one or listed in `acceptable`.
- recall_at_3: share of those cases whose expected skill is among the three best-ranked
  candidates, before thresholds.
- no_route_rate: share of null cases where neither match nor related_match is returned.
- false_route_rate: share of routed decisions that loaded the wrong skill (null cases included).
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

from ingot.runtime import open_library
from ingot.settings import Settings


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run(settings: Settings, cases_path: Path, details: bool = False) -> dict:
    cases = [json.loads(line) for line in cases_path.read_text().splitlines() if line.strip()]
    library = open_library(settings)
    served = set(library.skills())
    for case in cases[:3]:  # warm up caches and lazy imports outside the timed loop
        library.route(case["task"])
    timings, misses = [], []
    hits = recall3 = positives = routed = wrong_routes = null_total = null_unrouted = 0
    per_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for case in cases:
        start = time.perf_counter()
        result = library.route(case["task"], k=3)
        timings.append((time.perf_counter() - start) * 1000)
        chosen = result.skill.name if result.skill else None
        expected = case.get("expected")
        ok_names = {expected, *(case.get("acceptable") or [])} if expected else set()
        correct = chosen in ok_names if expected else chosen is None
        per_kind[case.get("kind", "?")][0] += correct
        per_kind[case.get("kind", "?")][1] += 1
        if chosen is not None:
            routed += 1
            wrong_routes += chosen not in ok_names
        if expected:
            positives += 1
            hits += chosen in ok_names
            recall3 += expected in {c.name for c in result.ranked[:3]}
        else:
            null_total += 1
            null_unrouted += chosen is None
        if details and not correct:
            misses.append(
                {
                    "id": case.get("id"),
                    "kind": case.get("kind"),
                    "expected": expected,
                    "got": chosen,
                    "score": round(result.score, 4),
                    "ranked": [c.name for c in result.ranked[:3]],
                }
            )
    status = library.status()
    report = {
        "n": len(cases),
        "skills": status.skills,
        "top1": round(hits / positives, 4) if positives else None,
        "recall_at_3": round(recall3 / positives, 4) if positives else None,
        "no_route_rate": round(null_unrouted / null_total, 4) if null_total else None,
        "false_route_rate": round(wrong_routes / routed, 4) if routed else 0.0,
        "p50_ms": round(statistics.median(timings), 2),
        "p95_ms": round(_percentile(timings, 0.95), 2),
        "accuracy_by_kind": {k: round(v[0] / v[1], 4) for k, v in sorted(per_kind.items())},
        "expected_skill_not_served": sorted(
            {c["expected"] for c in cases if c.get("expected") and c["expected"] not in served}
        ),
        "skipped_skills": [{"folder": str(p.folder), "reason": p.reason} for p in status.invalid],
    }
    if details:
        report["misses"] = misses
    return report
