"""The rules a measured cell is judged by: the held-out A/B's and routing impact's.

Pure functions from the evidence record and the thresholds to a `Judged` cell, so any cell can
be recomputed later from evidence.json alone, and is, at approval, under the thresholds in force
then. The passport (passport.py) calls these and owns the verdict; nothing here decides whether
a change may go live. Three outcomes:
- `pass`: the evidence shows what the cell asks (an A/B gain by the margin, significant; routes
  kept, and for a description improved, on enough held-out cases);
- `fail`: the evidence shows harm (a case the champion passed now fails, the pairwise judge
  prefers the champion, the mean score drops by the margin or more; a route lost or taken);
- `missing`: measured, but too little or too weak to decide (fewer cases than the thresholds ask
  for, a gain that is small or not significant, no routing metric improved): a person may accept
  it with a reason; autonomy never does. A metric with no cases is missing, never 1.0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optimize.control.passport import FAIL, MISSING, PASS
from optimize.measure.impact import METRIC_NAMES
from optimize.measure.stats import finite, paired_tests, variance_is_zero

SMALL_N = 12  # below this many cases (or with zero variance) both tests must agree
ROUTING_METRICS = ("top1", "recall_at_3", "no_route_precision")
# Which routing metrics each kind must keep, each on enough held-out cases (fewer: missing).
_ROUTING_RULES: Mapping[str, tuple[str, ...]] = {
    "description": ROUTING_METRICS,
    "both": ROUTING_METRICS,
    "body": ROUTING_METRICS,
    "create": ("others_top1", "no_route_precision"),
    "removal": ("others_top1",),
}


@dataclass(frozen=True)
class Thresholds:
    """Evidence settings (PROMOTE_MIN_MARGIN, PROMOTE_MIN_SAMPLES, RETENTION_WARN, PROMOTE_ALPHA,
    PROMOTE_MIN_ROUTING_CASES)."""

    min_margin: float = 0.15
    min_samples: int = 3
    retention_warn: float = 0.5
    alpha: float = 0.1  # one-sided significance for the paired tests
    min_routing_cases: int = 5  # held-out routing cases per metric, for a verdict on routing


@dataclass(frozen=True)
class Judged:
    """One measured cell's outcome: `pass`, `fail` or `missing` (measured, but too few cases to
    judge), with why, every rule applied and, for the A/B, the significance tests as fields. A
    measurement that answered "not shown better" (and found no harm) is a failure a person may
    override with an audited reason; harm (a drop, a lost case, a lost route) is not."""

    state: str
    why: str
    rules: tuple[str, ...] = ()
    statistics: tuple[Mapping[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    overridable: bool = False  # fail: measured and not shown better (no harm), which a person may override


class _Rules:
    """Collects each rule's outcome as a cell is judged."""

    def __init__(self) -> None:
        self.applied: list[str] = []
        self.failed: list[str] = []
        self.short: list[str] = []  # measured on too few cases to judge
        self.unshown: list[str] = []  # measured, no harm, but not shown better: an overridable fail
        self.warnings: list[str] = []

    # Each rule is reported in the cells' own words (passport.CELL_STATES): pass, fail, missing.
    def check(self, name: str, ok: bool, failure: str) -> bool:
        self.applied.append(f"{name}: {PASS if ok else FAIL}")
        if not ok:
            self.failed.append(failure)
        return ok

    def enough(self, name: str, ok: bool, shortfall: str) -> bool:
        self.applied.append(f"{name}: {PASS if ok else f'{MISSING} (too few to decide)'}")
        if not ok:
            self.short.append(shortfall)
        return ok

    def shown(self, name: str, ok: bool, failure: str) -> bool:
        unshown = f"{FAIL} (not shown better; an audited override may accept it)"
        self.applied.append(f"{name}: {PASS if ok else unshown}")
        if not ok:
            self.unshown.append(failure)
        return ok

    def judged(self, why_if_ok: str, **extra: Any) -> Judged:
        if self.failed:
            return Judged(FAIL, "; ".join(self.failed), tuple(self.applied), **extra)
        if self.short:
            return Judged(MISSING, "; ".join(self.short), tuple(self.applied), **extra)
        if self.unshown:
            return Judged(FAIL, "; ".join(self.unshown), tuple(self.applied), overridable=True, **extra)
        return Judged(PASS, why_if_ok, tuple(self.applied), **extra)


def measured(evidence: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    block = evidence.get("measurements", {}).get(key)
    return block if isinstance(block, Mapping) and block.get("status") == "measured" else None


def guarded(rule: Any, evidence: Mapping[str, Any], *args: Any) -> Judged:
    """A rule over evidence read from disk, which may be malformed (hand-edited, truncated, a wrong
    type where a list belongs): that is a failed cell saying so, never an exception or a pass."""
    try:
        return rule(evidence, *args)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        return Judged(FAIL, f"the evidence is malformed ({type(exc).__name__}: {exc}); re-measure it")


# -- held-out A/B --------------------------------------------------------------------------------


def ab_cell(evidence: Mapping[str, Any], t: Thresholds) -> Judged:
    """Held-out A/B rules: distinct samples, margin, no regressed case, pairwise agreement, and
    the paired tests (both, when n is small or the deltas have no variance). Call on a measured
    block only (the passport says why an unmeasured one is missing)."""
    return guarded(_ab, evidence, t)


def _ab(evidence: Mapping[str, Any], t: Thresholds) -> Judged:
    ab = measured(evidence, "ab")
    assert ab is not None
    rules = _Rules()
    if not rules.enough(
        "no train/holdout leakage",
        not ab.get("leakage"),
        "the task set leaks, so this A/B measures nothing: "
        + "; ".join(map(str, ab.get("why") or ["train/holdout overlap"])),
    ):
        return rules.judged("")
    cases = ab.get("cases", [])
    problem = _bad_cases(cases)
    if not rules.check("per-case results complete", problem is None, problem or ""):
        return rules.judged("")
    champion = [float(c["champion"]) for c in cases]
    challenger = [float(c["challenger"]) for c in cases]
    n = len(cases)
    if not rules.enough(
        f"at least {max(t.min_samples, 2)} distinct held-out cases",
        n >= max(t.min_samples, 2),
        f"{n} distinct held-out case(s), at least {max(t.min_samples, 2)} needed: add distinct holdout tasks",
    ):
        return rules.judged("")
    margin = (sum(challenger) - sum(champion)) / n
    rules.check(
        f"mean score does not drop by {t.min_margin} or more",
        margin > -t.min_margin,
        f"the mean score drops {margin:+.3f} (by the margin {t.min_margin:.3f} or more)",
    )
    regressions = [c["id"] for c in cases if c["champion_pass"] and not c["challenger_pass"]]
    rules.check(
        "no case the champion passed fails",
        not regressions,
        f"regresses held-out task(s) the champion passed: {', '.join(map(str, regressions))}",
    )
    _pairwise(ab, rules)
    retention = ab.get("retention")
    if finite(retention) and retention < t.retention_warn:
        rules.warnings.append(f"the challenger keeps {retention:.0%} of the champion's body")
    if rules.failed or rules.short:
        return rules.judged("", warnings=tuple(rules.warnings))
    # Measured and not shown better is a failure, never "missing": the cell asks whether the
    # candidate is better on held-out cases, and the measurement answered.
    if not rules.shown(
        f"mean margin >= {t.min_margin}",
        margin >= t.min_margin,
        f"measured no gain of the required size: margin {margin:+.3f} is below {t.min_margin:.3f} "
        "(nothing got worse); a body change must be shown better on the holdout",
    ):
        return rules.judged("", warnings=tuple(rules.warnings))
    tests = paired_tests(champion, challenger)
    stats = tuple(test.as_json() for test in tests)
    small = n < SMALL_N or variance_is_zero(champion, challenger)
    deciding = [test for test in tests if test.p is not None] if small else [tests[0]]
    shown = ", ".join(f"{test.name} {p_clause(test.p)}" for test in tests)
    significant = bool(deciding) and all(test.p is not None and test.p <= t.alpha for test in deciding)
    rule = _significance_rule(tests, deciding, small, n, t.alpha)
    rules.shown(
        f"significance ({rule}; {shown})",
        significant,
        f"not shown better: the gain is not significant ({shown}; needed {rule}); more distinct "
        "held-out cases could show it",
    )
    return rules.judged(
        f"margin {margin:+.3f} over {n} distinct cases; {shown}",
        statistics=stats,
        warnings=tuple(rules.warnings),
    )


def _significance_rule(tests: Any, deciding: Any, small: bool, n: int, alpha: float) -> str:
    """The significance rule as it was applied: which tests decided, and, when a test was
    undefined, which one and why, and what the rule used instead."""
    if not small:
        return f"paired t-test p <= {alpha} ({n} cases, at least {SMALL_N}: the t-test alone decides)"
    why_small = f"{n} cases, fewer than {SMALL_N}" if n < SMALL_N else "the deltas have no variance"
    undefined = [test for test in tests if test.p is None]
    if not undefined:
        return f"both tests p <= {alpha} ({why_small}: both must agree)"
    said = "; ".join(f"{test.name} undefined: {test.note or 'no p-value'}" for test in undefined)
    if not deciding:
        return f"both tests p <= {alpha} ({why_small}); {said}, so no test could show a gain"
    used = " and ".join(test.name for test in deciding)
    return f"{used} p <= {alpha} ({why_small}; {said}, so the rule used the {used} alone)"


def _pairwise(ab: Mapping[str, Any], rules: _Rules) -> None:
    """Each case judged pairwise in both orders (a flip is a tie): more losses than wins
    contradicts a rubric gain."""
    pairwise = ab.get("pairwise")
    if not rules.enough(
        "pairwise verdicts measured",
        isinstance(pairwise, Mapping) and pairwise.get("status") == "measured",
        "pairwise comparison not measured"
        + (f" ({pairwise.get('why')})" if isinstance(pairwise, Mapping) and pairwise.get("why") else ""),
    ):
        return
    assert isinstance(pairwise, Mapping)
    wins, ties, losses = (int(pairwise.get(k, 0)) for k in ("wins", "ties", "losses"))
    rules.check(
        "pairwise verdicts do not contradict the rubric gain",
        losses <= wins,
        f"the pairwise judge prefers the champion more often (challenger wins {wins}, ties {ties}, "
        f"loses {losses}) despite its rubric gain",
    )


def _bad_cases(cases: Any) -> str | None:
    """Why per-case results cannot be trusted (missing or non-finite values), or None."""
    if not isinstance(cases, list):
        return "per-case results were not measured"
    for case in cases:
        if not isinstance(case, Mapping) or not all(finite(case.get(k)) for k in ("champion", "challenger")):
            label = case.get("id") if isinstance(case, Mapping) else repr(case)
            return f"case {label}: scores not measured (missing or not finite)"
        if not all(isinstance(case.get(k), bool) for k in ("champion_pass", "challenger_pass")):
            return f"case {case.get('id')}: pass/fail not measured for both sides"
    return None


# -- routing impact --------------------------------------------------------------------------------


def routing_cell(evidence: Mapping[str, Any], kind: str, t: Thresholds) -> Judged:
    """Routing-impact rules for a `kind` change (call on a measured block): nothing another
    skill's cases expect is taken; the metrics this kind must not regress do not, each on enough
    held-out cases (cases the candidate was written from are leakage, not counted); a description
    change must strictly improve one, and collide with no skill."""
    return guarded(_routing, evidence, kind, t)


def _routing(evidence: Mapping[str, Any], kind: str, t: Thresholds) -> Judged:
    impact = measured(evidence, "routing_impact")
    assert impact is not None
    rules = _Rules()
    shadowed = impact.get("shadowed", [])
    if kind != "removal":  # a removal hands its cases on by design: where they go is reported
        rules.check(
            "takes no task another skill's cases expect",
            not shadowed,
            f"shadows {len(shadowed)} routing case(s) of other skills, e.g. "
            + "; ".join(f"{s['task'][:70]!r} (expects {s['expected']})" for s in shadowed[:3]),
        )
    metrics = impact.get("metrics", {})
    before, after, counts = metrics.get("champion", {}), metrics.get("challenger", {}), metrics.get("n", {})
    names = _ROUTING_RULES[kind]
    usable = []
    excluded = _leakage_clause(impact)
    for m in names:
        n = int(counts.get(m, 0) or 0)
        label = METRIC_NAMES.get(m, m)
        measured_both = finite(before.get(m)) and finite(after.get(m)) and n > 0
        if measured_both:  # a case that now routes wrong is a fact, however few cases there are
            rules.check(
                f"{label} does not regress",
                after[m] >= before[m],
                f"{label} regresses {before[m]:.3f} -> {after[m]:.3f} on {n} held-out case(s)",
            )
        if rules.enough(
            f"{label} on >= {t.min_routing_cases} held-out cases",
            measured_both and n >= t.min_routing_cases,
            f"{label} on {n} held-out routing case(s){excluded}; at least {t.min_routing_cases} needed "
            "(add `routing:` cases)",
        ):
            usable.append(m)
    if kind == "description" and usable and len(usable) == len(names):
        rules.shown(
            "one routing metric strictly improves",
            any(after[m] > before[m] for m in usable),
            "measured no routing gain: no metric strictly improves on the held-out cases (nothing "
            "regressed); a description change must route better",
        )
    if kind in ("description", "both"):
        collisions = impact.get("collisions", [])
        rules.check("collides with no skill", not collisions, f"would shadow {', '.join(collisions)}")
    shown = ", ".join(f"{METRIC_NAMES.get(m, m)} {before[m]:.3f} -> {after[m]:.3f}" for m in usable)
    if kind == "removal":
        own = impact.get("own") if isinstance(impact.get("own"), Mapping) else {}
        return rules.judged(
            f"no other skill loses its routes ({shown or 'no metric with enough cases'}); its "
            f"{own.get('cases', 0)} own routing case(s) go to another skill or to none (the evidence "
            "lists where)"
        )
    return rules.judged(
        "takes no route another skill's cases expect" + (f"; {shown}" if shown else "") + excluded
    )


def _leakage_clause(impact: Mapping[str, Any]) -> str:
    leakage = impact.get("leakage") or {}
    count = int(leakage.get("excluded", 0) or 0) if isinstance(leakage, Mapping) else 0
    return f" ({count} case(s) the candidate was written from left out as leakage)" if count else ""


def _p(p: float | None) -> str:
    if p is None:
        return "undefined"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def p_clause(p: float | None) -> str:
    """p in a sentence: "p < 0.001", "p = 0.125" or "p undefined" (never "p=0.000")."""
    shown = _p(p)
    return f"p {shown}" if shown.startswith("<") or shown == "undefined" else f"p = {shown}"
