"""A change's passport: its evidence summarised as cells a reviewer (and autonomy) reads at once.

Cells: held-out A/B, replay, routing impact, sandbox checks, safety, cost. Each is `pass`
(measured and passing), `fail` (measured and failing, or a replay WARN that needs a person),
`missing` (applies, not measured: says why), `stale` (measured on a champion that is no longer
live) or `n/a` (does not apply to this kind of change: says why). Pure: evidence, the live
revision and the thresholds in, a `Passport` out, so the review card, EVIDENCE.md and autonomy
all read the same cells. "No evidence is missing" is true only when every cell is pass or n/a.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optimize.control.gate import Thresholds, cell_rules
from optimize.control.replay_rule import replay_rule

CELLS = ("held-out A/B", "replay", "routing impact", "sandbox checks", "safety", "cost")
MAX_COST_INCREASE = 0.25  # serving cost may grow by this share before the cost cell fails


@dataclass(frozen=True)
class Cell:
    name: str
    state: str  # "pass" | "fail" | "missing" | "stale" | "n/a"
    why: str


@dataclass(frozen=True)
class Passport:
    cells: tuple[Cell, ...]

    @property
    def all_green(self) -> bool:
        """Every cell passes or does not apply: what autonomy requires, and when a page may say
        that no evidence is missing."""
        return all(c.state in ("pass", "n/a") for c in self.cells)

    @property
    def summary(self) -> str:
        if self.all_green:
            return "No evidence is missing: every cell that applies passes."
        open_cells = [f"{c.name} {c.state}" for c in self.cells if c.state not in ("pass", "n/a")]
        return "Not green: " + ", ".join(open_cells) + "."

    def as_json(self) -> list[dict[str, str]]:
        return [{"cell": c.name, "state": c.state, "why": c.why} for c in self.cells]


def change_class(kind: str, changes: Mapping[str, Any]) -> str:
    """The autonomy class of a change: create, description (only the description moves) or body."""
    if kind == "create":
        return "create"
    if kind == "description":
        return "description"
    return "body"


def _block(evidence: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    block = evidence.get("measurements", {}).get(name)
    return block if isinstance(block, Mapping) else None


def _missing_or_na(block: Mapping[str, Any] | None, default_why: str) -> Cell | None:
    """The cell when its block says not measured / not applicable (None when measured)."""
    if block is None:
        return Cell("", "missing", default_why)
    status = block.get("status")
    if status == "not_applicable":
        return Cell("", "n/a", str(block.get("why", "")))
    if status != "measured":
        return Cell("", "missing", str(block.get("why") or default_why))
    return None


def _named(cell: Cell, name: str) -> Cell:
    return Cell(name, cell.state, cell.why)


def passport(evidence: Mapping[str, Any], live_revision: str | None, thresholds: Thresholds) -> Passport:
    """The cells for one evidence bundle, judged against what is live now."""
    kind = str(evidence.get("kind"))
    if evidence.get("champion_revision") != live_revision:
        why = (
            f"measured on {str(evidence.get('champion_revision') or 'no skill')[:12]}, live is "
            f"{(live_revision or 'nothing')[:12]}: re-evaluate"
        )
        return Passport(tuple(Cell(name, "stale", why) for name in CELLS))
    rules = cell_rules(evidence, thresholds)
    return Passport(
        (
            _ab(evidence, kind, rules),
            _replay(evidence, kind),
            _impact(evidence, rules),
            _sandbox(evidence, kind),
            _safety(evidence, kind),
            _cost(evidence, kind, rules),
        )
    )


def _ab(evidence: Mapping[str, Any], kind: str, rules: Mapping[str, list[str]]) -> Cell:
    name = "held-out A/B"
    if kind == "description":
        return Cell(name, "n/a", "a description change leaves the served body unchanged")
    early = _missing_or_na(_block(evidence, "ab"), "no held-out A/B in the evidence: `ingot evaluate`")
    if early:
        return _named(early, name)
    failed = rules.get("ab", [])
    return Cell(name, "fail" if failed else "pass", "; ".join(failed) or "the held-out rules pass")


def _replay(evidence: Mapping[str, Any], kind: str) -> Cell:
    name = "replay"
    if kind == "create":
        return Cell(name, "n/a", "a new skill has no blessed runs to replay")
    if kind == "description":
        return Cell(name, "n/a", "a description change leaves the replayed body unchanged")
    requirement = replay_rule(evidence)
    if requirement.verdict is None:
        early = _missing_or_na(_block(evidence, "replay"), "no replay in the evidence")
        assert early is not None
        return _named(early, name)
    reasons = "; ".join(requirement.reasons)
    if requirement.verdict == "PASS":
        return Cell(name, "pass", reasons or "every blessed run still passes")
    return Cell(name, "fail", f"{requirement.verdict}: {reasons}")


def _impact(evidence: Mapping[str, Any], rules: Mapping[str, list[str]]) -> Cell:
    name = "routing impact"
    early = _missing_or_na(_block(evidence, "routing_impact"), "no routing impact in the evidence")
    if early:
        return _named(early, name)
    failed = rules.get("routing_impact", [])
    return Cell(name, "fail" if failed else "pass", "; ".join(failed) or "no route is taken or lost wrongly")


def _sandbox(evidence: Mapping[str, Any], kind: str) -> Cell:
    name = "sandbox checks"
    if kind == "description":
        return Cell(name, "n/a", "a description change runs no code")
    block = _block(evidence, "sandbox_checks")
    if block is None or block.get("status") != "measured":
        why = str((block or {}).get("why") or "no sandbox checks in the evidence")
        scripts = bool((evidence.get("changes") or {}).get("files"))
        if "no `check:` specs" in why and not scripts:
            return Cell(name, "n/a", "the task set has no `check:` specs and the change touches no scripts")
        return Cell(name, "missing", why)
    challenger = block.get("challenger") or {}
    bad = {k: v for k, v in challenger.items() if k != "passed"}
    if bad:
        return Cell(name, "fail", ", ".join(f"{v} {k}" for k, v in sorted(bad.items())))
    return Cell(name, "pass", f"{challenger.get('passed', 0)} check(s) passed")


def _safety(evidence: Mapping[str, Any], kind: str) -> Cell:
    name = "safety"
    early = _missing_or_na(_block(evidence, "checks"), "no admission checks in the evidence")
    if early:
        return _named(early, name)
    results = (_block(evidence, "checks") or {}).get("results") or {}
    needed = ("validation", "injection", "collision")
    missing = [n for n in needed if n not in results]
    if missing:
        return Cell(name, "missing", f"{', '.join(missing)} not checked")
    failed = [f"{n}: {results[n].get('detail', 'failed')}" for n in needed if not results[n].get("passed")]
    return Cell(
        name, "fail" if failed else "pass", "; ".join(failed) or "valid, no injection phrase, no collision"
    )


def _cost(evidence: Mapping[str, Any], kind: str, rules: Mapping[str, list[str]]) -> Cell:
    name = "cost"
    if kind != "rewrite":
        return Cell(name, "n/a", "no champion serves the same requests to compare with")
    ab = _block(evidence, "ab")
    if ab is None or ab.get("status") != "measured":
        return Cell(name, "missing", "the serving cost comes from the held-out A/B, which did not run")
    before, after = ab.get("champion_usd"), ab.get("challenger_usd")
    if not isinstance(before, int | float) or not isinstance(after, int | float):
        return Cell(name, "missing", "the serving model has no price in PRICES_FILE, so the cost is unknown")
    if before <= 0:
        return Cell(name, "pass", f"${after:.5f} over the holdout (the champion's was $0)")
    growth = (after - before) / before
    state = "fail" if growth > MAX_COST_INCREASE else "pass"
    return Cell(name, state, f"serving cost {growth:+.0%} over the holdout (limit +{MAX_COST_INCREASE:.0%})")
