"""The promotion gate: pure functions from measured evidence to a verdict with reasons.

Nothing here reads files, clocks or settings; `evaluate` sees only the evidence record and the
thresholds, so any verdict can be recomputed later from evidence.json alone (and is, at
approval, under the thresholds in force then). A measurement that is missing is a reason to
block (or, for a new skill's quality, to say so), never a default value; a metric with no cases
is missing, not 1.0. Verdicts:
- `pass`: measured and passing (green);
- `admissible`: a new skill that passed every admission check and collides with nothing, whose
  quality was not measured (amber: a person may approve it, autonomy never does);
- `insufficient`: measured, but the tests cannot tell the challenger from the champion;
- `blocked`: a rule failed or a required measurement is missing.
Each verdict lists every rule applied with its outcome, and the significance tests as fields.
What a replay verdict asks of an approval, for every kind of change, is replay_rule.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from optimize.measure.stats import finite, paired_tests, variance_is_zero

SMALL_N = 12  # below this many cases (or with zero variance) both tests must agree
ROUTING_METRICS = ("top1", "recall_at_3", "no_route_precision")


@dataclass(frozen=True)
class Thresholds:
    """Gate settings (PROMOTE_MIN_MARGIN, PROMOTE_MIN_SAMPLES, RETENTION_WARN, PROMOTE_ALPHA,
    PROMOTE_MIN_ROUTING_CASES)."""

    min_margin: float = 0.15
    min_samples: int = 3
    retention_warn: float = 0.5
    alpha: float = 0.1  # one-sided significance for the paired tests
    min_routing_cases: int = 5  # per routing metric, for a verdict on routing


@dataclass(frozen=True)
class Verdict:
    status: str  # "pass" | "admissible" | "insufficient" | "blocked"
    reasons: tuple[str, ...]
    warnings: tuple[str, ...] = field(default=())
    statistics: tuple[Mapping[str, Any], ...] = field(default=())  # each test: name, n, statistic, p
    rules: tuple[str, ...] = field(default=())  # every rule applied, with its outcome

    @property
    def passed(self) -> bool:
        """Measured and passing (green)."""
        return self.status == "pass"

    @property
    def approvable(self) -> bool:
        """A person may approve it: green, or a new skill whose quality is simply unmeasured."""
        return self.status in ("pass", "admissible")


class _Rules:
    """Collects each rule's outcome as the gate goes, for the bundle's `gate.rules`."""

    def __init__(self) -> None:
        self.applied: list[str] = []
        self.failed: list[str] = []
        self.warnings: list[str] = []

    def check(self, name: str, ok: bool, failure: str) -> bool:
        self.applied.append(f"{name}: {'ok' if ok else 'FAILED'}")
        if not ok:
            self.failed.append(failure)
        return ok

    def verdict(self, status_if_ok: str, reason_if_ok: str, **extra: Any) -> Verdict:
        status, reasons = ("blocked", self.failed) if self.failed else (status_if_ok, [reason_if_ok])
        return Verdict(status, tuple(reasons), tuple(self.warnings), rules=tuple(self.applied), **extra)


def _measured(evidence: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    block = evidence.get("measurements", {}).get(key)
    return block if isinstance(block, Mapping) and block.get("status") == "measured" else None


def _why_missing(evidence: Mapping[str, Any], key: str) -> str:
    block = evidence.get("measurements", {}).get(key)
    why = block.get("why") if isinstance(block, Mapping) else None
    return f"not measured ({why})" if why else "not measured"


def evaluate(evidence: Mapping[str, Any], thresholds: Thresholds) -> Verdict:
    """The verdict for one evidence record, by the kind of change it supports.

    Evidence is read from disk and may be malformed (hand-edited, truncated, a wrong type where a
    list belongs): that is a blocked verdict saying so, never an exception or a pass."""
    try:
        return _evaluate(evidence, thresholds)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        return Verdict(
            "blocked", (f"the evidence is malformed ({type(exc).__name__}: {exc}); re-measure it",)
        )


def _evaluate(evidence: Mapping[str, Any], t: Thresholds) -> Verdict:
    kind = evidence.get("kind")
    if kind == "create":
        return _create(evidence, t)
    if kind == "rewrite":
        return _rewrite(evidence, t)
    if kind == "description":
        return _description(evidence, t)
    return Verdict("blocked", (f"unknown change kind {kind!r}",))


# -- admission checks and routing impact (every kind) ---------------------------------------------


def _checks(evidence: Mapping[str, Any], rules: _Rules) -> None:
    checks = _measured(evidence, "checks")
    if not rules.check(
        "safety checks measured", checks is not None, f"safety checks {_why_missing(evidence, 'checks')}"
    ):
        return
    assert checks is not None
    results = checks.get("results", {})
    for name in ("validation", "injection", "collision"):
        result = results.get(name)
        if not rules.check(
            f"{name} check measured", isinstance(result, Mapping), f"{name} check not measured"
        ):
            continue
        rules.check(
            f"{name} check passed", bool(result.get("passed")), f"{name}: {result.get('detail', 'failed')}"
        )


def _impact(evidence: Mapping[str, Any], rules: _Rules, required: bool) -> Mapping[str, Any] | None:
    """Routing impact rules: nothing another skill's cases expect is taken (shadowing)."""
    impact = _measured(evidence, "routing_impact")
    if impact is None:
        if required:
            rules.check(
                "routing impact measured", False, f"routing impact {_why_missing(evidence, 'routing_impact')}"
            )
        else:
            rules.applied.append("routing impact measured: no (not required)")
        return None
    rules.applied.append("routing impact measured: ok")
    shadowed = impact.get("shadowed", [])
    rules.check(
        "takes no task another skill's cases expect",
        not shadowed,
        f"shadows {len(shadowed)} routing case(s) of other skills, e.g. "
        + "; ".join(f"{s['task'][:70]!r} (expects {s['expected']})" for s in shadowed[:3]),
    )
    return impact


def _routing_metrics(impact: Mapping[str, Any], rules: _Rules, t: Thresholds, must_improve: bool) -> None:
    """No routing metric regresses, each measured on at least `min_routing_cases` cases; for a
    description change one must strictly improve. A metric without enough cases blocks."""
    metrics = impact.get("metrics", {})
    before, after, counts = metrics.get("champion", {}), metrics.get("challenger", {}), metrics.get("n", {})
    usable = []
    for m in ROUTING_METRICS:
        n = counts.get(m, 0)
        enough = finite(before.get(m)) and finite(after.get(m)) and n >= t.min_routing_cases
        if rules.check(
            f"{m} measured on >= {t.min_routing_cases} cases",
            enough,
            f"{m} measured on {n} routing case(s); at least {t.min_routing_cases} needed "
            "(add `routing:` cases)",
        ):
            usable.append(m)
            rules.check(
                f"{m} does not regress",
                after[m] >= before[m],
                f"{m} regresses {before[m]:.3f} -> {after[m]:.3f}",
            )
    if must_improve and usable:
        rules.check(
            "one routing metric strictly improves",
            any(after[m] > before[m] for m in usable),
            "no routing metric strictly improves",
        )


# -- kinds -------------------------------------------------------------------------------------


def _create(evidence: Mapping[str, Any], t: Thresholds) -> Verdict:
    rules = _Rules()
    _checks(evidence, rules)
    _impact(evidence, rules, required=False)
    if rules.failed:
        return rules.verdict("blocked", "")
    if _measured(evidence, "ab") is None:
        return Verdict(
            "admissible",
            (f"admissible, quality not measured: held-out A/B {_why_missing(evidence, 'ab')}",),
            tuple(rules.warnings),
            rules=(*rules.applied, "quality (held-out A/B against no skill) measured: no"),
        )
    return _quality(evidence, t, rules, "all admission checks passed and quality measured")


def _rewrite(evidence: Mapping[str, Any], t: Thresholds) -> Verdict:
    rules = _Rules()
    changes = evidence.get("changes", {})
    if changes.get("description"):  # a rewrite that also moves the skill's routes
        impact = _impact(evidence, rules, required=True)
        if impact is not None:
            _routing_metrics(impact, rules, t, must_improve=False)
    return _quality(evidence, t, rules, "")


def _quality(evidence: Mapping[str, Any], t: Thresholds, rules: _Rules, prefix: str) -> Verdict:
    """Held-out A/B rules: distinct samples, margin, no regressed case, pairwise agreement, and
    the paired tests (both, when n is small or the deltas have no variance)."""
    ab = _measured(evidence, "ab")
    if not rules.check(
        "held-out A/B measured", ab is not None, f"held-out A/B {_why_missing(evidence, 'ab')}"
    ):
        return rules.verdict("blocked", "")
    assert ab is not None
    if not rules.check(
        "no train/holdout leakage",
        not ab.get("leakage"),
        "the task set leaks: " + "; ".join(map(str, ab.get("why") or ["train/holdout overlap"])),
    ):
        return rules.verdict("blocked", "")
    cases = ab.get("cases", [])
    problem = _bad_cases(cases)
    if not rules.check("per-case results complete", problem is None, problem or ""):
        return rules.verdict("blocked", "")
    champion = [float(c["champion"]) for c in cases]
    challenger = [float(c["challenger"]) for c in cases]
    n = len(cases)
    rules.check(
        f"at least {t.min_samples} distinct held-out cases",
        n >= t.min_samples,
        f"{n} distinct held-out case(s), at least {t.min_samples} needed",
    )
    margin = (sum(challenger) - sum(champion)) / n if n else 0.0
    if n:
        rules.check(
            f"mean margin >= {t.min_margin}",
            margin >= t.min_margin,
            f"margin {margin:+.3f} is below the required {t.min_margin:.3f}",
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
    if rules.failed:
        return rules.verdict("blocked", "")
    if n < 2:
        return Verdict(
            "insufficient",
            ("one held-out case cannot show a difference: add distinct cases",),
            tuple(rules.warnings),
            rules=tuple(rules.applied),
        )
    tests = paired_tests(champion, challenger)
    stats = tuple(test.as_json() for test in tests)
    small = n < SMALL_N or variance_is_zero(champion, challenger)
    deciding = [test for test in tests if test.p is not None] if small else [tests[0]]
    shown = ", ".join(f"{test.name} {p_clause(test.p)}" for test in tests)
    rules.applied.append(
        f"significance ({'both tests' if small else 'paired t-test'} p <= {t.alpha}; {shown})"
    )
    if not deciding or any(test.p is None or test.p > t.alpha for test in deciding):
        return Verdict(
            "insufficient",
            (
                f"not enough evidence that the challenger is better ({shown}; needed p <= {t.alpha}"
                f"{' from both' if small else ''}): add distinct held-out cases",
            ),
            tuple(rules.warnings),
            stats,
            tuple(rules.applied),
        )
    reason = f"margin {margin:+.3f} over {n} distinct cases; {shown}"
    return Verdict(
        "pass",
        (f"{prefix}; {reason}" if prefix else reason,),
        tuple(rules.warnings),
        stats,
        tuple(rules.applied),
    )


def _pairwise(ab: Mapping[str, Any], rules: _Rules) -> None:
    """Each case judged pairwise in both orders (a flip is a tie): more losses than wins
    contradicts a rubric gain."""
    pairwise = ab.get("pairwise")
    if not rules.check(
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


def _description(evidence: Mapping[str, Any], t: Thresholds) -> Verdict:
    rules = _Rules()
    impact = _impact(evidence, rules, required=True)
    if impact is not None:
        _routing_metrics(impact, rules, t, must_improve=True)
        collisions = impact.get("collisions", [])
        rules.check(
            "collides with no skill", not collisions, f"the description would shadow {', '.join(collisions)}"
        )
    return rules.verdict(
        "pass", "routing improves on every metric with enough cases; nothing regresses or is shadowed"
    )


def cell_rules(evidence: Mapping[str, Any], t: Thresholds) -> dict[str, list[str]]:
    """Each cell's own failures, for the passport (control/passport.py): "ab" (the held-out rules,
    including "not enough evidence") and "routing_impact" (the rules for this kind of change)."""
    failures: dict[str, list[str]] = {}
    try:
        ab = _Rules()
        verdict = _quality(evidence, t, ab, "")
        failures["ab"] = list(verdict.reasons) if verdict.status != "pass" else []
        routing = _Rules()
        kind = evidence.get("kind")
        impact = _impact(evidence, routing, required=True)
        if impact is not None and kind == "description":
            _routing_metrics(impact, routing, t, must_improve=True)
            collisions = impact.get("collisions", [])
            routing.check("collides with no skill", not collisions, f"would shadow {', '.join(collisions)}")
        elif impact is not None and kind == "rewrite" and evidence.get("changes", {}).get("description"):
            _routing_metrics(impact, routing, t, must_improve=False)
        failures["routing_impact"] = routing.failed
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        failures = {"ab": [f"malformed evidence ({exc})"], "routing_impact": [f"malformed evidence ({exc})"]}
    return failures


def _p(p: float | None) -> str:
    if p is None:
        return "undefined"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


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


def p_clause(p: float | None) -> str:
    """p in a sentence: "p < 0.001", "p = 0.125" or "p undefined" (never "p=0.000")."""
    shown = _p(p)
    return f"p {shown}" if shown.startswith("<") or shown == "undefined" else f"p = {shown}"
