"""The promotion gate: pure functions from measured evidence to a verdict with reasons.

Nothing here reads files, clocks or settings; `evaluate` sees only the evidence record and the
thresholds, so any verdict can be recomputed later from evidence.json alone (and is, at
approval, under the thresholds in force then). A measurement that is missing is a reason to
block, never a default value. Verdicts: `pass`, `blocked`, or `insufficient` (the paired test
cannot tell the challenger from the champion with the samples given).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Thresholds:
    """Gate settings (PROMOTE_MIN_MARGIN, PROMOTE_MIN_SAMPLES, RETENTION_WARN, PROMOTE_ALPHA)."""

    min_margin: float = 0.15
    min_samples: int = 3
    retention_warn: float = 0.5
    alpha: float = 0.1  # one-sided significance for the paired t-test


@dataclass(frozen=True)
class Verdict:
    status: str  # "pass" | "blocked" | "insufficient"
    reasons: tuple[str, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def paired_p(champion: Sequence[float], challenger: Sequence[float]) -> float:
    """One-sided paired t-test p-value that the challenger scores higher than the champion.

    With identical deltas (no variance, common with pass/fail judges) the t statistic is
    undefined: every case moved by the same amount, so p is 0 if that amount is positive and
    1 otherwise. Fewer than two pairs can show nothing: p is 1."""
    deltas = [b - a for a, b in zip(champion, challenger, strict=True)]
    if len(deltas) < 2:
        return 1.0
    if max(deltas) - min(deltas) < 1e-12:
        return 0.0 if deltas[0] > 0 else 1.0
    from scipy.stats import ttest_rel

    return float(ttest_rel(challenger, champion, alternative="greater").pvalue)


def _measured(evidence: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    block = evidence.get("measurements", {}).get(key)
    return block if isinstance(block, Mapping) and block.get("status") == "measured" else None


def evaluate(evidence: Mapping[str, Any], thresholds: Thresholds) -> Verdict:
    """The verdict for one evidence record, by the kind of change it supports.

    Evidence is read from disk and may be malformed (hand-edited, truncated, a wrong type where a
    list belongs): that is a blocked verdict saying so, never an exception or a pass."""
    try:
        return _evaluate(evidence, thresholds)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        return Verdict(
            "blocked", (f"the evidence is malformed ({type(exc).__name__}: {exc}); re-measure it",)
        )


def _evaluate(evidence: Mapping[str, Any], thresholds: Thresholds) -> Verdict:
    kind = evidence.get("kind")
    if kind == "create":
        return _create(evidence)
    if kind == "rewrite":
        return _rewrite(evidence, thresholds)
    if kind == "description":
        return _description(evidence)
    return Verdict("blocked", (f"unknown change kind {kind!r}",))


def _create(evidence: Mapping[str, Any]) -> Verdict:
    checks = _measured(evidence, "checks")
    if checks is None:
        return Verdict("blocked", ("safety checks were not measured",))
    failed = [
        f"{name}: {result.get('detail', 'failed')}"
        for name, result in checks.get("results", {}).items()
        if not result.get("passed")
    ]
    required = {"validation", "injection", "collision"}
    missing = sorted(required - set(checks.get("results", {})))
    reasons = [f"{name} check not measured" for name in missing] + failed
    return Verdict("blocked", tuple(reasons)) if reasons else Verdict("pass", ("all safety checks passed",))


def _rewrite(evidence: Mapping[str, Any], t: Thresholds) -> Verdict:
    ab = _measured(evidence, "ab")
    if ab is None:
        return Verdict("blocked", ("held-out A/B was not measured",))
    if ab.get("leakage"):
        return Verdict("blocked", ("the task set has no train/holdout split (leakage)",))
    cases = ab.get("cases", [])
    problem = _bad_cases(cases)
    if problem:
        return Verdict("blocked", (problem,))
    champion = [float(c["champion"]) for c in cases]
    challenger = [float(c["challenger"]) for c in cases]
    reasons, warnings = [], []
    if len(cases) < t.min_samples:
        reasons.append(f"{len(cases)} held-out samples, at least {t.min_samples} needed")
    margin = (sum(challenger) - sum(champion)) / len(cases) if cases else 0.0
    if cases and margin < t.min_margin:
        reasons.append(f"margin {margin:+.3f} is below the required {t.min_margin:.3f}")
    regressions = [c["id"] for c in cases if c["champion_pass"] and not c["challenger_pass"]]
    if regressions:
        reasons.append(f"regresses held-out task(s) the champion passed: {', '.join(map(str, regressions))}")
    retention = ab.get("retention")
    if isinstance(retention, int | float) and retention < t.retention_warn:
        warnings.append(f"the challenger keeps {retention:.0%} of the champion's body")
    if reasons:
        return Verdict("blocked", tuple(reasons), tuple(warnings))
    p = paired_p(champion, challenger)
    if p > t.alpha:
        return Verdict(
            "insufficient",
            (
                f"paired t-test p={p:.3f} > {t.alpha}: not enough evidence that "
                "the challenger is better; add held-out cases",
            ),
            tuple(warnings),
        )
    return Verdict(
        "pass", (f"margin {margin:+.3f} over {len(cases)} cases, paired t-test p={p:.3f}",), tuple(warnings)
    )


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _bad_cases(cases: Any) -> str | None:
    """Why per-case results cannot be trusted (missing or non-finite values), or None."""
    if not isinstance(cases, list):
        return "per-case results were not measured"
    for case in cases:
        if not isinstance(case, Mapping) or not all(_finite(case.get(k)) for k in ("champion", "challenger")):
            label = case.get("id") if isinstance(case, Mapping) else repr(case)
            return f"case {label}: scores not measured (missing or not finite)"
        if not all(isinstance(case.get(k), bool) for k in ("champion_pass", "challenger_pass")):
            return f"case {case.get('id')}: pass/fail not measured for both sides"
    return None


def _description(evidence: Mapping[str, Any]) -> Verdict:
    routing = _measured(evidence, "routing")
    if routing is None:
        return Verdict("blocked", ("router metrics were not measured",))
    before, after = routing.get("champion", {}), routing.get("challenger", {})
    metrics = ("top1", "recall_at_3", "no_route_precision")
    missing = [m for m in metrics if not _finite(before.get(m)) or not _finite(after.get(m))]
    if missing:
        return Verdict("blocked", tuple(f"{m} not measured" for m in missing))
    reasons = [f"{m} regresses {before[m]:.3f} -> {after[m]:.3f}" for m in metrics if after[m] < before[m]]
    if routing.get("collisions"):
        reasons.append(f"the description would shadow {', '.join(routing['collisions'])}")
    if not any(after[m] > before[m] for m in metrics):
        reasons.append("no routing metric strictly improves")
    return (
        Verdict("blocked", tuple(reasons))
        if reasons
        else Verdict("pass", ("routing improves, nothing regresses",))
    )


# -- the replay rule (regression replay, issue 16): for every kind of change --------------------


@dataclass(frozen=True)
class ReplayRequirement:
    """What the replay cell asks of an approval: nothing (PASS, or not measured), a reason
    (WARN), or an explicit override whose reason is audited (BLOCK)."""

    verdict: str | None  # "PASS" | "WARN" | "BLOCK"; None when replay was not measured
    needs: str | None  # None | "reason" | "override"
    reasons: tuple[str, ...] = ()


def replay_rule(evidence: Mapping[str, Any]) -> ReplayRequirement:
    """The requirement from `measurements["replay"]`, its verdict recomputed from the per-golden
    findings (the stricter of recomputed and recorded counts). A malformed cell is a BLOCK."""
    from optimize.measure.replay_verdict import ORDER, cell_verdict

    block = evidence.get("measurements", {}).get("replay") if isinstance(evidence, Mapping) else None
    if not isinstance(block, Mapping) or block.get("status") != "measured":
        why = block.get("why") if isinstance(block, Mapping) else "not in the evidence bundle"
        return ReplayRequirement(None, None, (f"replay not measured: {why}",))
    try:
        verdict, reasons = cell_verdict(block["goldens"])
        recorded = block.get("verdict")
        if recorded not in ORDER:
            raise ValueError(f"verdict {recorded!r}")
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        return ReplayRequirement(
            "BLOCK", "override", (f"the replay cell is malformed ({exc}); re-measure it",)
        )
    if ORDER[recorded] > ORDER[verdict]:
        verdict = recorded
    needs = {"PASS": None, "WARN": "reason", "BLOCK": "override"}[verdict]
    return ReplayRequirement(verdict, needs, tuple(reasons))
