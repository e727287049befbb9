"""Routing impact: what a change does to the routes of the whole library, measured in memory.

Every kind of change moves routes: a new skill can take traffic, a description moves it, a body
moves BM25 and the body vectors. The routing cases of *every* skill's task set, and the
library's recent real traffic (routed tasks from the trace store, redacted), are routed twice:
by the served library, and by the same library with the candidate in its place (a private
router; nothing served changes). The cell lists, per skill, the tasks it gains and loses;
a task that another skill's cases expect and that the candidate now takes is *shadowing*. The
library-wide metrics (top-1, recall@3, no-route precision, and top-1 over the cases of other
skills) are computed on the *held-out* routing cases, each with its own count: a metric with no
cases is missing, never 1.0. A case the candidate was written from is leakage, not evidence: one
its author was shown (`seen`, e.g. the description search's select half) or whose text appears
in the candidate's description or body (normalised). Leaked cases are counted and listed, left
out of the metrics, and still checked for shadowing (a case taken from another skill is a
fault however it got into the candidate).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import rfc8785

from mcp_server.router import Router

TRAFFIC_LIMIT = 500  # most recent distinct routed tasks considered
NONE = "(nothing)"
# Each library-wide metric in readable words, for every card, report and reason line.
METRIC_NAMES = {
    "top1": "top-1",
    "recall_at_3": "recall@3",
    "no_route_precision": "no-route precision",
    "others_top1": "top-1 of other skills' cases",
}


@dataclass(frozen=True)
class LabelledCase:
    """A routing case and where it came from (`task set <skill>`)."""

    task: str
    expected: str | None
    origin: str


def normalised(text: str) -> str:
    """Case, Unicode forms, punctuation and spacing folded away: how a pasted case is recognised."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(re.sub(r"[^\w]+", " ", folded).split())


def case_key(task: str) -> str:
    """A routing case's identity, for recording which cases an author was shown."""
    return hashlib.sha256(normalised(task).encode()).hexdigest()


def leaked(cases: Sequence[LabelledCase], seen: Collection[str], candidate_text: str) -> dict[int, str]:
    """Which cases (by index) the candidate was written from, and how: "seen" (its author was
    shown it) or "in the candidate" (its text appears in the candidate, normalised)."""
    text = f" {normalised(candidate_text)} "
    found = {}
    for i, case in enumerate(cases):
        norm = normalised(case.task)
        if case_key(case.task) in seen:
            found[i] = "seen"
        elif norm and f" {norm} " in text:
            found[i] = "in the candidate"
    return found


def _choice(router: Router, task: str) -> tuple[str | None, tuple[str, ...]]:
    result = router.route(task, k=3)
    return (result.skill.name if result.skill else None), tuple(c.name for c in result.ranked[:3])


def _metrics(
    choices: Sequence[tuple[LabelledCase, str | None, tuple[str, ...]]], skill: str
) -> tuple[dict, dict]:
    """(values, counts): top-1 and recall@3 over cases expecting a skill; no-route precision over
    cases that do not expect `skill` (the changed skill must not take them); top-1 over cases
    expecting another skill (no other skill loses its routes)."""
    expecting = [(c, chosen, top) for c, chosen, top in choices if c.expected]
    others = [(c, chosen) for c, chosen, _ in choices if c.expected != skill]
    theirs = [(c, chosen) for c, chosen, _ in choices if c.expected not in (None, skill)]

    def share(hits: int, total: int) -> float | None:
        return round(hits / total, 4) if total else None

    values = {
        "top1": share(sum(chosen == c.expected for c, chosen, _ in expecting), len(expecting)),
        "recall_at_3": share(sum(c.expected in top for c, _, top in expecting), len(expecting)),
        "no_route_precision": share(sum(chosen != skill for _, chosen in others), len(others)),
        "others_top1": share(sum(chosen == c.expected for c, chosen in theirs), len(theirs)),
    }
    counts = {
        "top1": len(expecting),
        "recall_at_3": len(expecting),
        "no_route_precision": len(others),
        "others_top1": len(theirs),
    }
    return values, counts


def _own(routed: Sequence[tuple], skill: str) -> dict:
    """The changed skill's own held-out cases: how many it is routed for, before and after."""
    mine = [(before, after) for c, before, _, after, _ in routed if c.expected == skill]
    return {
        "cases": len(mine),
        "champion_routed": sum(before == skill for before, _ in mine),
        "challenger_routed": sum(after == skill for _, after in mine),
    }


def routing_impact(
    skill: str,
    champion: Router,
    candidate: Router,
    cases: Sequence[LabelledCase],
    traffic: Sequence[str],
    inputs: dict | None = None,
    seen: Collection[str] = (),
    candidate_text: str = "",
) -> dict:
    """The `routing_impact` cell for a change to `skill` (see the module docstring)."""
    leaks = leaked(cases, seen, candidate_text)
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
    held_out = [r for i, r in enumerate(routed) if i not in leaks]
    champion_values, counts = _metrics([(c, b, bt) for c, b, bt, _, _ in held_out], skill)
    challenger_values, _ = _metrics([(c, a, at) for c, _, _, a, at in held_out], skill)
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
        "own": _own(held_out, skill),
        "leakage": {
            "excluded": len(leaks),
            "seen": sum(how == "seen" for how in leaks.values()),
            "in_candidate": sum(how == "in the candidate" for how in leaks.values()),
            "cases": [{"task": cases[i].task[:200], "how": how} for i, how in sorted(leaks.items())],
        },
        "by_skill": {name: moved for name, moved in sorted(by_skill.items())},
        "shadowed": shadowed,
        "traffic_moved": moved_traffic,
        "inputs": {
            **(inputs or {}),
            "cases_sha256": hashlib.sha256(rfc8785.dumps(labelled)).hexdigest(),
            "seen_sha256": hashlib.sha256(rfc8785.dumps(sorted(seen))).hexdigest(),
            "traffic_sha256": hashlib.sha256(rfc8785.dumps(sorted(set(traffic)))).hexdigest(),
        },
    }
