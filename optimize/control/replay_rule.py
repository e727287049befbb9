"""What the regression-replay cell asks of an approval, for every kind of change.

Pure, like gate.py: from the evidence record alone. The passport (passport.py) reads it: PASS is a
passing cell, WARN a missing one (a person names why it is enough), BLOCK a failing one that only
an explicit override, whose reason is audited, can accept. The verdict is
recomputed from the per-golden findings and the change's coverage with measure/replay_verdict.py's
rules, and the stricter of recomputed and recorded wins, so a forged PASS does not pass; a
malformed cell is a BLOCK. Altered instructions no blessed run exercised are named apart. A
change's cell is recomputed as a change's, never as the live revision replayed alone (whose
stale rule excuses a difference on a golden the world moved under).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# How people read a replay (measure/replay_verdict.py keeps the words beside the rules).
from optimize.measure.replay_verdict import FINDING_OF, STATE_OF  # noqa: E402, F401 - re-exported


@dataclass(frozen=True)
class ReplayRequirement:
    """What the replay cell asks of an approval: nothing (PASS, or not measured), a reason
    (WARN), or an explicit override whose reason is audited (BLOCK)."""

    verdict: str | None  # "PASS" | "WARN" | "BLOCK"; None when replay was not measured
    needs: str | None  # None | "reason" | "override"
    reasons: tuple[str, ...] = ()
    unexercised: tuple[str, ...] = ()  # altered instructions no blessed run exercised


def replay_rule(evidence: Mapping[str, Any]) -> ReplayRequirement:
    """The requirement from `measurements["replay"]`, its verdict recomputed from the per-golden
    findings (the stricter of recomputed and recorded counts). A malformed cell is a BLOCK."""
    from optimize.measure.replay_verdict import ORDER, replay_cell_verdict

    block = evidence.get("measurements", {}).get("replay") if isinstance(evidence, Mapping) else None
    if not isinstance(block, Mapping) or block.get("status") != "measured":
        why = block.get("why") if isinstance(block, Mapping) else "not in the evidence bundle"
        return ReplayRequirement(None, None, (f"replay not measured: {why}",))
    try:
        verdict, reasons, unexercised = replay_cell_verdict(block, of_a_change=True)
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
    return ReplayRequirement(verdict, needs, tuple(reasons), tuple(unexercised))
