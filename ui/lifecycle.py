"""A change's lifecycle, rendered from its artifacts: proposed -> evidenced -> judged -> decided ->
promoted -> watched.

Every stage is lit only by something on disk: the audit chain's lines for the change id, its
evidence bundle (found by the digest those lines record) and its passport under today's
thresholds; a decision shows what the approver accepted and overrode (cells named as the
passport names them, with the reasons), as its audit lines record it. A stage with no artifact
stays dark and says what is missing; nothing is inferred from a later stage (a rejected change
was never promoted, however green its bundle). Where a change stopped short is said, not lit: a
rolled-back change ends on a warning chip with when and by whom; "watched" is lit only once its
revision served until a later change replaced it (while live it is being watched, not watched).
Reads only; the review card shows a pending change's map, the history page every decided one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimize.control import evidence as evidence_mod
from optimize.control.audit import AuditEntry
from optimize.control.autopilot import ACTOR as AUTONOMY
from optimize.control.gate import Thresholds
from optimize.control.passport import FAIL, MISSING, READY, STATE_MEANING, Passport, passport

STAGES = ("proposed", "evidenced", "judged", "decided", "promoted", "watched")
DECISIONS = ("promote", "reject", "withdraw")
WARN, NOW = "warn", "now"  # a stage's tone: where the change stopped short; under way


@dataclass(frozen=True)
class Stage:
    """One step of a change's lifecycle, lit when an artifact shows it happened."""

    name: str  # one of STAGES
    lit: bool
    detail: str
    label: str = ""  # what its chip reads when that says more than the name ("approved", "live")
    tone: str = ""  # WARN: where the change stopped short (rolled back); NOW: under way (live)

    @property
    def shown(self) -> str:
        return self.label or self.name

    @property
    def look(self) -> str:
        """The chip's style: its tone, else lit or dark."""
        return self.tone or ("lit" if self.lit else "dark")


@dataclass(frozen=True)
class ChangeLife:
    """One change id's map, for the history page."""

    change_id: str
    proposed_by: str | None
    decision: str | None  # approved, rejected, withdrawn (or displaced, withheld); None while it waits
    stages: tuple[Stage, ...]
    accepted_missing: tuple[str, ...] = ()  # cells the approver accepted as missing
    acceptance_reason: str | None = None  # and why
    accepted_by: str | None = None
    state_at_approval: str | None = None  # the passport's state when it was approved
    decided_by: str | None = None
    decision_reason: str | None = None  # a rejection's or withdrawal's reason
    overridden: tuple[str, ...] = ()  # failed cells the approver overrode
    override_reason: str | None = None

    @property
    def headline(self) -> str:
        """The decision in one line: who, and (for a rejection) why; 'waiting' while it waits."""
        if self.decision is None:
            return "waiting"
        if self.decided_by is None:  # displaced or withheld: the archive set it aside
            return f"{self.decision}: set aside without a decision"
        by = "automatically by autonomy" if self.decided_by == AUTONOMY else f"by {self.decided_by}"
        why = f": “{self.decision_reason}”" if self.decision_reason and self.decision != "approved" else ""
        return f"{self.decision} {by}{why}"

    @property
    def state_meaning(self) -> str:
        return STATE_MEANING.get(self.state_at_approval or "", "")

    @property
    def approved_short_of_ready(self) -> bool:
        return self.state_at_approval is not None and self.state_at_approval != READY

    @property
    def ended(self) -> Stage | None:
        """The stage where it stopped short (a rollback), if it did."""
        return next((s for s in self.stages if s.tone == WARN), None)


def when(time: str) -> str:
    """An audit line's time as the timeline shows it."""
    return f"{time[:19].replace('T', ' ')} UTC"


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
    `set_aside`: the chain's word (decisions.py) on changes that never got a decision (displaced
    by a newer candidate, or withheld behind a better one), so none of them reads as waiting."""
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


def _names(value: Any) -> tuple[str, ...]:
    return tuple(map(str, value)) if isinstance(value, list) else ()


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
    decided = next(
        (e for e in lines if e.get("action") in DECISIONS and e.get("outcome", "done") == "done"), None
    )
    # What the approval accepted is on its promotion line (an aborted one approved nothing).
    approval = decided if decided is not None and decided.get("action") == "promote" else None
    refused = [e for e in lines if e.get("action") == "approve-refused"]
    decision = {"promote": "approved", "reject": "rejected", "withdraw": "withdrawn"}.get(
        str(decided.get("action")) if decided else ""
    ) or (aside if aside in ("displaced", "withheld") else None)
    accepted = _names(approval.get("accepted_missing")) if approval is not None else ()
    overridden = _names(approval.get("overridden")) if approval is not None else ()
    override = approval.get("override_reason") if approval is not None else None
    state = str(approval.get("passport")) if approval is not None and approval.get("passport") else None
    if state is not None:
        open_cells = [f"{c} {FAIL} (overridden)" for c in overridden] + [
            f"{c} {MISSING} (accepted)" for c in accepted
        ]
        gated = Stage(
            "judged", True, f"{state} when approved" + (f": {'; '.join(open_cells)}" if open_cells else "")
        )
    elif verdict is not None:
        gated = Stage("judged", True, f"{verdict.summary} (against its champion, today's thresholds)")
    elif refused:
        gated = Stage("judged", True, f"approval refused: {refused[-1].get('reason')}")
    else:
        gated = Stage("judged", False, "its evidence bundle is not on this machine")
    return ChangeLife(
        change_id=change_id,
        proposed_by=str(proposed.get("actor")) if proposed else None,
        decision=decision,
        stages=(
            Stage(
                "proposed",
                proposed is not None,
                f"by {proposed.get('actor')}, {when(proposed.time)}" if proposed else "no propose line",
            ),
            _evidenced(lines, data),
            gated,
            _decision(decided, decision, aside),
            _promoted(decided),
            _watched(decided, entries, live),
        ),
        accepted_missing=accepted,
        acceptance_reason=str(approval.get("acceptance_reason")) if approval and accepted else None,
        accepted_by=str(approval.get("actor")) if approval and accepted else None,
        state_at_approval=state,
        decided_by=str(decided.get("actor")) if decided else None,
        decision_reason=str(decided.get("reason")) if decided and decided.get("reason") else None,
        overridden=overridden if override else (),
        override_reason=str(override) if override else None,
    )


def _decision(decided: AuditEntry | None, decision: str | None, aside: str | None) -> Stage:
    if decided is None:
        if aside in ("displaced", "withheld"):
            return Stage("decided", False, f"{aside}: set aside without a decision", aside)
        return Stage("decided", False, "waiting for a decision")
    detail = f"{decision} by {decided.get('actor')}, {when(decided.time)} (#{decided.seq})"
    if decided.get("action") != "promote" and decided.get("reason"):
        detail += f": {decided.get('reason')}"
    return Stage("decided", True, detail, decision or "")


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
    """Lit by the approval's promotion line: the revision it put live, or the skill it removed."""
    if decided is None or decided.get("action") != "promote":
        return Stage("promoted", False, "not promoted" if decided else "not yet")
    at = f"{when(decided.time)} by {decided.get('actor')}"
    revision = decided.get("to_revision")
    if revision is None:  # a removal: nothing is live after it
        return Stage("promoted", True, f"removed at {at}: no longer served", "removed")
    return Stage("promoted", True, f"{str(revision)[:12]} live at {at}", "live")


def _watched(decided: AuditEntry | None, entries: Sequence[AuditEntry], live: str | None) -> Stage:
    """How the promoted revision's watch went. Replay, mining and drift watch a revision while
    it is served: under way while it is live; done (lit) once a later change replaced it; cut
    short (a warning) by a rollback, with when, by whom and why. A removal serves nothing."""
    if decided is None or decided.get("action") != "promote":
        return Stage("watched", False, "only a promoted revision is watched")
    revision = decided.get("to_revision")
    end = next(
        (
            e
            for e in entries
            if e.seq > decided.seq
            and e.get("action") in ("promote", "rollback")
            and e.get("outcome", "done") == "done"
            and e.get("from_revision") == revision
        ),
        None,
    )
    if live == revision and revision is not None:
        again = f" (again: {_ended(end)})" if end is not None else ""
        return Stage("watched", False, f"live now{again}: replay, mining and drift watch it", "watching", NOW)
    if end is not None and end.get("action") == "rollback":
        after = end.get("to_revision")
        to = f" to {str(after)[:12]}" if after else " to before it existed (removed)"
        why = f": {end.get('reason')}" if end.get("reason") else ""
        return Stage(
            "watched",
            False,
            f"rolled back{to} at {when(end.time)} by {end.get('actor')}{why}",
            "rolled back",
            WARN,
        )
    if revision is None:
        served = f"; created again at {when(end.time)} by {end.get('actor')}" if end is not None else ""
        return Stage("watched", False, f"removed: nothing is served, so nothing is watched{served}")
    if end is not None:
        by = end.get("change_id") or "a later change"
        return Stage(
            "watched",
            True,
            f"watched while live, until {by} replaced it at {when(end.time)} "
            f"(approved by {end.get('actor')})",
        )
    return Stage("watched", False, "no longer live, and no audited line replaced it (drift?)")


def _ended(end: AuditEntry) -> str:
    verb = "rolled back" if end.get("action") == "rollback" else "replaced"
    return f"{verb} at {when(end.time)} by {end.get('actor')}, later restored"


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
