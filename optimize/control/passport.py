"""A change's passport: the one verdict a person, the CLI, the UI and autonomy all act on.

Six cells (kinds.CELLS), each in one of CELL_STATES; a change is in exactly one of STATES. The
words, and what each means, are written down once, here (CELL_MEANING, STATE_MEANING): the CLI,
the review card, History, EVIDENCE.md and the JSON import them and print nothing else. Which
cells apply to which kind of change is kinds.APPLIES. Blocked: a replay BLOCK, or a measurement
that did not show the change better (no harm found), may be overridden with an audited reason;
harm may not. Stale: evidence measured on a champion that is no longer live describes another
change: every cell that applies is `stale`, nothing is approved, and it says how to re-measure.
Pure: evidence, the live revision and the thresholds in, a `Passport` out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from optimize.control.kinds import APPLIES, IF_CODE_RUNS, kind_of, why_not_applicable
from optimize.control.replay_rule import replay_rule

if TYPE_CHECKING:  # gate.py loads the statistics (numpy); the CLI's help reads the words without it
    from optimize.control.gate import Judged, Thresholds

PASS, FAIL, MISSING, NA, STALE = "pass", "fail", "missing", "n/a", "stale"
CELL_STATES = (PASS, FAIL, MISSING, NA, STALE)
READY, NEEDS_ACK, BLOCKED = "ready", "needs-acknowledgement", "blocked"
STATES = (READY, NEEDS_ACK, BLOCKED, STALE)  # best first: a queue sorts by it
CELL_MEANING = {
    PASS: "measured, and the evidence shows what the cell asks",
    FAIL: "measured, and the evidence shows harm, or no gain where one is required",
    MISSING: "applies to this change, was not measured (or too little to decide): says why and what "
    "would measure it",
    NA: "cannot apply to this kind of change: says why",
    STALE: "measured on a skill that is no longer live: says what to re-measure",
}
STATE_MEANING = {
    READY: "every cell that applies passed; the only state autonomy approves",
    NEEDS_ACK: "nothing failed, some cells are missing: a person may approve it by naming them "
    'with a reason (`--accept-missing "REASON" --accepting CELLS`), audited',
    BLOCKED: "a cell failed: only a replay BLOCK or a gain not shown may be overridden with an "
    "audited reason (`--override-reason`); harm cannot be approved",
    STALE: "the live skill changed since the evidence was measured: nothing can approve it until "
    "it is re-measured (`ingot evaluate SKILL --change ID`)",
}
MAX_COST_INCREASE = 0.25  # serving cost may grow by this share before the cost cell fails

# What would measure each cell, for a `missing` one (its own `why` says what was lacking).
MEASURE = {
    "held-out A/B": "a task set with a holdout (optimize/tasks/SKILL.yaml) and models (BASE_URL, "
    "AGENT_MODEL, JUDGE_MODEL), then `ingot evaluate SKILL --change ID`",
    "replay": "bless a good run of the skill (`ingot bless TRACE_ID`), then `ingot evaluate`",
    "routing impact": "`routing:` cases in a task set (or recorded traffic), then `ingot evaluate`",
    "sandbox checks": "a `check:` spec in the task set and a ready sandbox (`ingot status`), then "
    "`ingot evaluate`",
    "safety": "`ingot evaluate SKILL --change ID`",
    "cost": "a price for the serving model in PRICES_FILE, then `ingot evaluate SKILL --change ID`",
}
# What closes a replay cell that is missing because a changed instruction is in no blessed run.
UNEXERCISED = (
    "bless a run that uses it (`ingot bless TRACE_ID`, then `ingot evaluate SKILL --change ID`), "
    'or accept it with a reason (`ingot approve SKILL --change ID --accept-missing "REASON" '
    "--accepting replay`)"
)


@dataclass(frozen=True)
class Cell:
    name: str
    state: str  # one of CELL_STATES
    why: str
    measure: str = ""  # missing: what would measure it
    overridable: bool = False  # fail: a replay BLOCK or no gain shown, which an audited override may accept

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"cell": self.name, "state": self.state, "why": self.why}
        if self.measure:
            data["measure"] = self.measure
        if self.overridable:
            data["overridable"] = True
        return data


@dataclass(frozen=True)
class Passport:
    kind: str
    cells: tuple[Cell, ...]
    rules: tuple[str, ...] = ()  # every rule the measured cells were judged by
    statistics: tuple[Mapping[str, Any], ...] = ()  # the A/B's significance tests
    warnings: tuple[str, ...] = ()

    @property
    def failed(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.state == FAIL)

    @property
    def missing(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.state == MISSING)

    @property
    def stale(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.state == STALE)

    @property
    def state(self) -> str:
        """One of STATES; stale evidence outranks everything it says (it describes another change)."""
        if self.stale:
            return STALE
        if self.failed:
            return BLOCKED
        return NEEDS_ACK if self.missing else READY

    @property
    def ready(self) -> bool:
        """Every cell that applies passed: what autonomy requires."""
        return self.state == READY

    @property
    def sound(self) -> bool:
        """Nothing failed and nothing is stale: ready, or waiting only on missing cells."""
        return self.state in (READY, NEEDS_ACK)

    @property
    def overridable(self) -> bool:
        """Blocked only by failures a person may override with an audited reason: a replay BLOCK,
        or a measurement that did not show the change better (and found no harm)."""
        return bool(self.failed) and all(c.overridable for c in self.failed)

    def cell(self, name: str) -> Cell:
        return next(c for c in self.cells if c.name == name)

    @property
    def summary(self) -> str:
        """One line: the state, then the cells that made it so."""
        if self.state == READY:
            return "ready: every cell that applies passed"
        if self.state == STALE:
            return f"{STALE}: {self.stale[0].why}"
        open_cells = self.failed or self.missing
        shown = ", ".join(f"{c.name} {c.state}" for c in open_cells)
        more = (
            f"; also missing: {', '.join(c.name for c in self.missing)}"
            if self.failed and self.missing
            else ""
        )
        return f"{self.state}: {shown}{more}"

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "state": self.state,
            "cells": [c.as_json() for c in self.cells],
            "rules": list(self.rules),
            "statistics": [dict(s) for s in self.statistics],
            "warnings": list(self.warnings),
        }


def stale_why(skill: str, change_id: str | None, measured_on: str | None, live_now: str | None) -> str:
    """The one line for evidence measured on a champion that is no longer live: the passport's
    stale cells, approval's refusal and autonomy's decision all say it."""
    return (
        f"the live skill changed since this evidence was measured (measured on "
        f"{measured_on[:12] if measured_on else 'no skill (new)'}, live now "
        f"{live_now[:12] if live_now else 'nothing'}): "
        f"re-measure with `ingot evaluate {skill} --change {change_id or 'ID'}`"
    )


def passport(
    evidence: Mapping[str, Any],
    live_revision: str | None,
    thresholds: Thresholds,
    change_id: str | None = None,
) -> Passport:
    """The cells for one evidence bundle, judged against what is live now (`change_id`, when
    known, goes into the re-measure command a stale passport gives)."""
    kind = kind_of(evidence)
    ab = _judged_ab(evidence, thresholds)
    routing = _judged_routing(evidence, kind, thresholds)
    cells = (
        _ab(evidence, kind, ab),
        _replay(evidence, kind),
        _routing(evidence, kind, routing),
        _sandbox(evidence, kind),
        _safety(evidence, kind),
        _cost(evidence, kind),
    )
    judged = [j for j in (ab, routing) if j is not None]
    extra = {
        "rules": tuple(r for j in judged for r in j.rules),
        "statistics": ab.statistics if ab else (),
        "warnings": tuple(w for j in judged for w in j.warnings),
    }
    champion = evidence.get("champion_revision")
    if champion != live_revision:
        why = stale_why(str(evidence.get("skill") or "SKILL"), change_id, champion, live_revision)
        cells = tuple(c if c.state == NA else Cell(c.name, STALE, why) for c in cells)
    return Passport(kind, cells, **extra)


def _judged_ab(evidence: Mapping[str, Any], t: Thresholds) -> Judged | None:
    from optimize.control.gate import ab_cell, measured

    return ab_cell(evidence, t) if measured(evidence, "ab") else None


def _judged_routing(evidence: Mapping[str, Any], kind: str, t: Thresholds) -> Judged | None:
    from optimize.control.gate import measured, routing_cell

    return routing_cell(evidence, kind, t) if measured(evidence, "routing_impact") else None


def _block(evidence: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    blocks = evidence.get("measurements")
    block = blocks.get(name) if isinstance(blocks, Mapping) else None
    return block if isinstance(block, Mapping) else None


def _not_measured(name: str, kind: str, block: Mapping[str, Any] | None, default_why: str) -> Cell:
    """A cell that applies and has no measurement: missing, saying why. A bundle that calls such a
    cell not applicable contradicts the table, and is missing too."""
    why = str((block or {}).get("why") or default_why)
    if block is not None and block.get("status") == "not_applicable":
        why = f"the bundle calls it not applicable ({why}), but it applies to a {kind} change"
    return Cell(name, MISSING, why, MEASURE[name])


def _from_judged(name: str, judged: Judged) -> Cell:
    return Cell(
        name,
        judged.state,
        judged.why,
        MEASURE[name] if judged.state == MISSING else "",
        overridable=judged.overridable,
    )


def _ab(evidence: Mapping[str, Any], kind: str, judged: Judged | None) -> Cell:
    name = "held-out A/B"
    if why := why_not_applicable(kind, name):
        return Cell(name, NA, why)
    if judged is None:
        return _not_measured(name, kind, _block(evidence, "ab"), "no held-out A/B in the evidence")
    return _from_judged(name, judged)


def _replay(evidence: Mapping[str, Any], kind: str) -> Cell:
    name = "replay"
    if why := why_not_applicable(kind, name):
        return Cell(name, NA, why)
    requirement = replay_rule(evidence)
    reasons = "; ".join(requirement.reasons)
    if requirement.verdict is None:
        return _not_measured(name, kind, _block(evidence, "replay"), "no replay in the evidence")
    if requirement.verdict == "PASS":
        return Cell(name, PASS, reasons or "every blessed run still passes")
    if requirement.verdict == "WARN" and requirement.unexercised:  # evidence no blessed run holds
        others = [r for r in requirement.reasons if not r.startswith("not exercised by any blessed run")]
        return Cell(
            name,
            MISSING,
            f"not exercised by any blessed run: {'; '.join(requirement.unexercised)}"
            + (f"; also: {'; '.join(others)}" if others else ""),
            UNEXERCISED,
        )
    if requirement.verdict == "WARN":  # the replays could not decide: a person names why it is enough
        return Cell(
            name,
            MISSING,
            f"the replays could not decide: {reasons}",
            "look at the undecided runs (the review card, `ingot replay`); re-evaluate once the judges "
            "can decide (`ingot evaluate SKILL --change ID`), or accept it with a reason (--accept-missing)",
        )
    return Cell(name, FAIL, f"a blessed run regressed: {reasons}", overridable=True)


def _routing(evidence: Mapping[str, Any], kind: str, judged: Judged | None) -> Cell:
    name = "routing impact"
    if judged is None:
        return _not_measured(
            name, kind, _block(evidence, "routing_impact"), "no routing impact in the evidence"
        )
    return _from_judged(name, judged)


def _sandbox(evidence: Mapping[str, Any], kind: str) -> Cell:
    name = "sandbox checks"
    if why := why_not_applicable(kind, name):
        return Cell(name, NA, why)
    block = _block(evidence, "sandbox_checks")
    if block is not None and block.get("status") == "not_applicable" and APPLIES[kind][name] == IF_CODE_RUNS:
        return Cell(name, NA, str(block.get("why") or "no code runs in this skill"))
    if block is None or block.get("status") != "measured":
        return _not_measured(name, kind, block, "no sandbox checks in the evidence")
    challenger = block.get("challenger") or {}
    if not isinstance(challenger, Mapping):
        return Cell(name, FAIL, "the sandbox cell is malformed; re-measure it")
    bad = {k: v for k, v in challenger.items() if k != "passed"}
    if bad:
        return Cell(name, FAIL, ", ".join(f"{v} {k}" for k, v in sorted(bad.items())))
    return Cell(name, PASS, f"{challenger.get('passed', 0)} check(s) passed")


def _safety(evidence: Mapping[str, Any], kind: str) -> Cell:
    name = "safety"
    if why := why_not_applicable(kind, name):
        return Cell(name, NA, why)
    block = _block(evidence, "checks")
    if block is None or block.get("status") != "measured":
        return _not_measured(name, kind, block, "no admission checks in the evidence")
    results = block.get("results") or {}
    needed = ("validation", "injection", "collision")
    absent = [n for n in needed if not isinstance(results.get(n), Mapping)]
    failed = [
        f"{n}: {results[n].get('detail', 'failed')}"
        for n in needed
        if n not in absent and not results[n].get("passed")
    ]
    if failed:
        return Cell(name, FAIL, "; ".join(failed))
    if absent:
        return Cell(name, MISSING, f"{', '.join(absent)} not checked", MEASURE[name])
    return Cell(name, PASS, "valid, no injection phrase, no collision")


def _cost(evidence: Mapping[str, Any], kind: str) -> Cell:
    name = "cost"
    if why := why_not_applicable(kind, name):
        return Cell(name, NA, why)
    ab = _block(evidence, "ab")
    if ab is None or ab.get("status") != "measured":
        return Cell(
            name, MISSING, "the serving cost comes from the held-out A/B, which did not run", MEASURE[name]
        )
    before, after = ab.get("champion_usd"), ab.get("challenger_usd")
    if not isinstance(before, int | float) or not isinstance(after, int | float):
        return Cell(
            name,
            MISSING,
            "the serving model has no price in PRICES_FILE, so the cost is unknown",
            MEASURE[name],
        )
    if before <= 0:
        return Cell(name, PASS, f"${after:.5f} over the holdout (the champion's was $0)")
    growth = (after - before) / before
    state = FAIL if growth > MAX_COST_INCREASE else PASS
    return Cell(name, state, f"serving cost {growth:+.0%} over the holdout (limit +{MAX_COST_INCREASE:.0%})")
