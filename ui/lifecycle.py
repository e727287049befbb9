"""A change's lifecycle, rendered from its artifacts: proposed -> evidenced -> judged -> decided ->
promoted -> watched.

Every stage is lit only by something on disk: the audit chain's lines for the change id, its
evidence bundle (found by the digest those lines record) and its passport under today's
thresholds; a decision shows what the approver accepted (missing cells and the reason, a replay
override), as its audit line records it. A stage with no artifact stays dark and says what is
missing; nothing is inferred from a later stage (a rejected change was never promoted, however
green its bundle).
Reads only; the review card shows a pending change's map, the history page every decided one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimize.control import evidence as evidence_mod
from optimize.control.audit import AuditEntry
from optimize.control.gate import Thresholds
from optimize.control.passport import Passport, passport

STAGES = ("proposed", "evidenced", "judged", "decided", "promoted", "watched")
DECISIONS = ("promote", "reject", "withdraw")


@dataclass(frozen=True)
class Stage:
    """One step of a change's lifecycle, lit when an artifact shows it happened."""

    name: str  # one of STAGES
    lit: bool
    detail: str


@dataclass(frozen=True)
class ChangeLife:
    """One change id's map, for the history page."""

    change_id: str
    proposed_by: str | None
    decision: str | None  # approved, rejected, withdrawn; None while it waits
    stages: tuple[Stage, ...]
    accepted_missing: tuple[str, ...] = ()  # cells the approver accepted as missing
    acceptance_reason: str | None = None  # and why
    accepted_by: str | None = None
    state_at_approval: str | None = None  # the passport's state when it was approved


def bundle_paths(runs_dir: Path, skill: str) -> dict[str, Path]:
    """The skill's evidence bundles by file digest (the digest the audit chain records)."""
    folder = runs_dir / "evidence" / skill
    if not folder.is_dir():
        return {}
    return {evidence_mod.file_digest(p): p for p in folder.glob("*/evidence.json")}


def for_pending(
    lines: Sequence[AuditEntry], source: str, created: str, data: Mapping[str, Any], verdict: Passport | None
) -> tuple[Stage, ...]:
    """A change still waiting: its propose and evidence lines, its bundle's measured cells, its
    passport now. Not decided, so the last three stages are dark."""
    proposed = next((e for e in lines if e.get("action") == "propose"), None)
    return (
        Stage("proposed", proposed is not None, f"by {source}, {created}" if proposed else "no propose line"),
        _evidenced(lines, data),
        Stage(
            "judged", verdict is not None, verdict.summary if verdict is not None else "no readable bundle"
        ),
        Stage("decided", False, "waiting for a decision"),
        Stage("promoted", False, "not yet"),
        Stage("watched", False, "after promotion: replay, mining and drift watch the live revision"),
    )


def for_skill(
    entries: Sequence[AuditEntry],
    bundles: Mapping[str, Path],
    thresholds: Thresholds,
    live: str | None,
    set_aside: Mapping[str, str] | None = None,
) -> list[ChangeLife]:
    """Every change id in `entries` (one skill's audit lines, oldest first), newest first.
    `set_aside`: the archive's status of changes that never got a decision (displaced by a newer
    candidate, or withheld behind a better one), so none of them reads as still waiting."""
    by_change: dict[str, list[AuditEntry]] = {}
    for entry in entries:
        change_id = entry.get("change_id")
        if isinstance(change_id, str) and change_id:
            by_change.setdefault(change_id, []).append(entry)
    lives = [
        _decided(cid, lines, entries, bundles, thresholds, live, (set_aside or {}).get(cid))
        for cid, lines in by_change.items()
    ]
    return sorted(lives, key=lambda life: -max(e.seq for e in by_change[life.change_id]))


def _decided(
    change_id: str,
    lines: list[AuditEntry],
    entries: Sequence[AuditEntry],
    bundles: Mapping[str, Path],
    thresholds: Thresholds,
    live: str | None,
    aside: str | None = None,
) -> ChangeLife:
    proposed = next((e for e in lines if e.get("action") == "propose"), None)
    digests = [e.get("evidence_digest") for e in lines if e.get("action") in ("propose", "evidence")]
    data, verdict = _bundle(digests[-1] if digests else None, bundles, thresholds)
    intent = next((e for e in lines if e.get("action") == "promote-intent"), None)
    decided = next(
        (e for e in lines if e.get("action") in DECISIONS and e.get("outcome", "done") == "done"), None
    )
    refused = [e for e in lines if e.get("action") == "approve-refused"]
    decision = {"promote": "approved", "reject": "rejected", "withdraw": "withdrawn"}.get(
        str(decided.get("action")) if decided else ""
    ) or (aside if aside in ("displaced", "withheld") else None)
    if intent is not None and intent.get("passport"):
        gated = Stage("judged", True, f"{intent.get('passport')} when approved")
    elif verdict is not None:
        gated = Stage("judged", True, f"{verdict.summary} (against its champion, today's thresholds)")
    elif refused:
        gated = Stage("judged", True, f"approval refused: {refused[-1].get('reason')}")
    else:
        gated = Stage("judged", False, "its evidence bundle is not on this machine")
    accepted = intent.get("accepted_missing") if intent is not None else None
    return ChangeLife(
        change_id=change_id,
        proposed_by=str(proposed.get("actor")) if proposed else None,
        decision=decision,
        stages=(
            Stage(
                "proposed",
                proposed is not None,
                f"by {proposed.get('actor')}, {proposed.time[:19]}" if proposed else "no propose line",
            ),
            _evidenced(lines, data),
            gated,
            Stage(
                "decided",
                decided is not None,
                f"{decision} by {decided.get('actor')}, {decided.time[:19]} (#{decided.seq})"
                if decided
                else (
                    f"{aside}: set aside without a decision"
                    if aside in ("displaced", "withheld")
                    else "waiting for a decision"
                ),
            ),
            _promoted(decided),
            _watched(decided, entries, live),
        ),
        accepted_missing=tuple(map(str, accepted)) if isinstance(accepted, list) else (),
        acceptance_reason=str(intent.get("acceptance_reason")) if intent and accepted else None,
        accepted_by=str(intent.get("actor")) if intent and accepted else None,
        state_at_approval=str(intent.get("passport")) if intent and intent.get("passport") else None,
    )


def _evidenced(lines: Sequence[AuditEntry], data: Mapping[str, Any]) -> Stage:
    measured = [
        n
        for n, b in (data.get("measurements") or {}).items()
        if isinstance(b, Mapping) and b.get("status") == "measured"
    ]
    again = sum(1 for e in lines if e.get("action") == "evidence")
    return Stage(
        "evidenced",
        bool(measured),
        f"{len(measured)} cell(s) measured" + (f", re-evaluated {again}x" if again else ""),
    )


def _promoted(decided: AuditEntry | None) -> Stage:
    if decided is None or decided.get("action") != "promote":
        return Stage("promoted", False, "not promoted" if decided else "not yet")
    return Stage(
        "promoted",
        True,
        f"{str(decided.get('to_revision'))[:12]} live at {decided.time[:19]} by {decided.get('actor')}",
    )


def _watched(decided: AuditEntry | None, entries: Sequence[AuditEntry], live: str | None) -> Stage:
    """Lit while the promoted revision is served (replay, mining and drift watch it); after it was
    replaced, the line that replaced it says how its watch ended."""
    if decided is None or decided.get("action") != "promote":
        return Stage("watched", False, "only a promoted revision is watched")
    revision = decided.get("to_revision")
    later = [
        e
        for e in entries
        if e.seq > decided.seq
        and e.get("action") in ("promote", "rollback", "restore")
        and e.get("outcome", "done") == "done"
        and e.get("from_revision") == revision
    ]
    if later:
        end = later[0]
        why = f": {end.get('reason')}" if end.get("reason") else ""
        return Stage(
            "watched", True, f"until {end.time[:19]}, {end.get('action')} by {end.get('actor')}{why}"
        )
    if live == revision:
        return Stage("watched", True, "live now: replay, mining and drift watch it")
    return Stage("watched", False, "no longer live, and no audited line replaced it (drift?)")


def _bundle(
    digest: Any, bundles: Mapping[str, Path], thresholds: Thresholds
) -> tuple[Mapping[str, Any], Passport | None]:
    """The bundle and its passport judged against the champion it was measured on (a decided
    change's champion is history, not what is live now)."""
    path = bundles.get(str(digest)) if digest else None
    if path is None:
        return {}, None
    try:
        data = evidence_mod.load(path).data
    except evidence_mod.EvidenceError:
        return {}, None
    return data, passport(data, data.get("champion_revision"), thresholds)
