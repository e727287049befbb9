"""Routing impact: what a change does to the routes of the whole library, measured in memory.

Every kind of change moves routes: a new skill can take traffic, a description moves it, a body
moves BM25 and the body vectors. The routing cases of *every* skill's task set, and the
library's recent real traffic (routed tasks from the trace store, redacted), are routed twice:
by the served library, and by the same library with the candidate in its place (a private
router; nothing served changes). The cell lists, per skill, the tasks it gains and loses;
a task that another skill's cases expect and that the candidate now takes is *shadowing*. The
library-wide metrics (top-1, recall@3, no-route precision) are computed on every routing case
with an expected answer, each with its own count: a metric with no cases is missing, never 1.0.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from mcp_server.router import Router

TRAFFIC_LIMIT = 500  # most recent distinct routed tasks considered
NONE = "(nothing)"


@dataclass(frozen=True)
class LabelledCase:
    """A routing case and where it came from (`task set <skill>`)."""

    task: str
    expected: str | None
    origin: str


def _choice(router: Router, task: str) -> tuple[str | None, tuple[str, ...]]:
    result = router.route(task, k=3)
    return (result.skill.name if result.skill else None), tuple(c.name for c in result.ranked[:3])


def _metrics(
    choices: Sequence[tuple[LabelledCase, str | None, tuple[str, ...]]], skill: str
) -> tuple[dict, dict]:
    """(values, counts): top-1 and recall@3 over cases expecting a skill; no-route precision over
    cases that do not expect `skill` (the changed skill must not take them)."""
    expecting = [(c, chosen, top) for c, chosen, top in choices if c.expected]
    others = [(c, chosen) for c, chosen, _ in choices if c.expected != skill]
    values = {
        "top1": round(sum(chosen == c.expected for c, chosen, _ in expecting) / len(expecting), 4)
        if expecting
        else None,
        "recall_at_3": round(sum(c.expected in top for c, _, top in expecting) / len(expecting), 4)
        if expecting
        else None,
        "no_route_precision": round(sum(chosen != skill for _, chosen in others) / len(others), 4)
        if others
        else None,
    }
    return values, {"top1": len(expecting), "recall_at_3": len(expecting), "no_route_precision": len(others)}


def routing_impact(
    skill: str,
    champion: Router,
    candidate: Router,
    cases: Sequence[LabelledCase],
    traffic: Sequence[str],
    inputs: dict | None = None,
) -> dict:
    """The `routing_impact` cell for a change to `skill` (see the module docstring)."""
    routed = []
    by_skill: dict[str, dict[str, list[str]]] = defaultdict(lambda: {"gained": [], "lost": []})
    shadowed = []
    for case in cases:
        before, before_top = _choice(champion, case.task)
        after, after_top = _choice(candidate, case.task)
        routed.append((case, before, before_top, after, after_top))
        if before != after:
            by_skill[before or NONE]["lost"].append(case.task[:200])
            by_skill[after or NONE]["gained"].append(case.task[:200])
        if after == skill and before != skill and case.expected not in (None, skill):
            shadowed.append(
                {"task": case.task[:200], "expected": case.expected, "was": before, "origin": case.origin}
            )
    moved_traffic = []
    for task in list(dict.fromkeys(traffic))[:TRAFFIC_LIMIT]:
        before, _ = _choice(champion, task)
        after, _ = _choice(candidate, task)
        if before != after:
            moved_traffic.append({"task": task[:200], "from": before, "to": after})
            by_skill[before or NONE]["lost"].append(task[:200])
            by_skill[after or NONE]["gained"].append(task[:200])
    champion_values, counts = _metrics([(c, b, bt) for c, b, bt, _, _ in routed], skill)
    challenger_values, _ = _metrics([(c, a, at) for c, _, _, a, at in routed], skill)
    labelled = [c.task for c in cases]
    return {
        "status": "measured",
        "cases": {
            "total": len(cases),
            "expecting_skill": sum(c.expected == skill for c in cases),
            "expecting_other": sum(c.expected not in (None, skill) for c in cases),
            "expecting_none": sum(c.expected is None for c in cases),
            "traffic": min(len(set(traffic)), TRAFFIC_LIMIT),
        },
        "metrics": {"champion": champion_values, "challenger": challenger_values, "n": counts},
        "by_skill": {name: moved for name, moved in sorted(by_skill.items())},
        "shadowed": shadowed,
        "traffic_moved": moved_traffic,
        "inputs": {
            **(inputs or {}),
            "cases_sha256": hashlib.sha256(json.dumps(labelled).encode()).hexdigest(),
            "traffic_sha256": hashlib.sha256(json.dumps(sorted(set(traffic))).encode()).hexdigest(),
        },
    }
