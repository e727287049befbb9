"""Approval's re-verification: everything about a pending change, checked again from disk.

Nothing a record says is trusted: the evidence bundle must still have the digest the record
holds and be for this skill and kind; the keyed audit chain must hold the change's own
`propose` (or re-evaluation `evidence`) line; the A/B's cached champion results must still be
the sealed bytes it used; the live revision must be the evidence's champion; the candidate's
files must hash to its revision and change what the evidence was measured for (its kind,
classified again from the bytes); no injection phrase; no collision with the library as it is
now; and the passport, recomputed under today's thresholds, must not be blocked (a replay
BLOCK alone can be overridden). What a passport that is not ready asks of the approver (a
reason naming the missing cells, an override of an overridable failure) is `accepted`. Read-only: it
raises `ApprovalRefused` naming the failed check, and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ingot.errors import IngotError
from ingot.seal import Seal
from mcp_server.library import Similarity
from mcp_server.registry import parse_skill_md
from optimize.control import evidence as evidence_mod
from optimize.control.audit import AuditLog
from optimize.control.gate import Thresholds
from optimize.control.kinds import CELLS, what_changes
from optimize.control.lock import PromotionConflict
from optimize.control.passport import Passport, passport, stale_why
from optimize.control.pending import LEGACY_KINDS, PendingChange
from optimize.control.promote import ABSENT, Promoter, tree_revision
from optimize.measure.cache import SealedCache
from optimize.measure.checks import collision_check, injection_check


class ApprovalRefused(IngotError):
    """Approval re-verification failed; the reason names the check."""


@dataclass(frozen=True)
class Acceptance:
    """What a person accepted in approving a change that was not ready, for its audit lines:
    the missing cells named with a reason, and the overridable failed cells overridden with one."""

    state: str  # the passport's state at approval
    missing: tuple[str, ...] = ()
    reason: str | None = None
    override: str | None = None
    overridden: tuple[str, ...] = ()  # the failed cells the override accepts

    def audit_fields(self) -> dict[str, object]:
        fields: dict[str, object] = {"passport": self.state}
        if self.missing:
            fields |= {"accepted_missing": list(self.missing), "acceptance_reason": self.reason}
        if self.override:
            fields |= {"override_reason": self.override, "overridden": list(self.overridden)}
        return fields

    @property
    def sentence(self) -> str:
        """The same, as the promotion line's human-readable reason adds it."""
        parts = []
        if self.missing:
            parts.append(f"accepted missing {', '.join(self.missing)}: {self.reason}")
        if self.override:
            parts.append(f"overrode failed {', '.join(self.overridden) or 'cells'}: {self.override}")
        return "".join(f"; {p}" for p in parts)


class Neighbours(Protocol):
    """What approval asks the served library, as it is at approval time."""

    def similarity(self, name: str, description: str) -> Similarity:
        """`description` against every served skill's, with names and as text alone."""
        ...


@dataclass
class Verifier:
    """The checks `ChangeControl.approve` (and `refusal`, for the UI) runs on a change."""

    runs_dir: Path
    roots: tuple[Path, ...]
    thresholds: Thresholds
    audit: AuditLog
    promoter: Promoter
    live_revision: Callable[[str], str | None]
    root_of: Callable[[str], Path | None]
    neighbours: Callable[[], Neighbours] | None = None

    def verify(self, change: PendingChange) -> tuple[evidence_mod.Evidence, Path, Passport]:
        if not change.evidence_path or not change.evidence_digest:
            raise ApprovalRefused("the pending record names no evidence bundle")
        path = (self.runs_dir / change.evidence_path).resolve()
        if not path.is_relative_to((self.runs_dir / "evidence").resolve()):
            raise ApprovalRefused(f"the evidence path {change.evidence_path!r} is outside runs/evidence")
        try:
            bundle = evidence_mod.load(path)
        except evidence_mod.EvidenceError as exc:
            raise ApprovalRefused(str(exc)) from exc
        if bundle.digest != change.evidence_digest:
            raise ApprovalRefused(
                f"evidence.json changed after the change was recorded (digest "
                f"{bundle.digest[:12]}, recorded {change.evidence_digest[:12]})"
            )
        if bundle.data.get("skill") != change.skill:
            raise ApprovalRefused("the evidence is for a different skill")
        self.check_proposed(change)
        self.check_caches(bundle.data)
        live = self.live_revision(change.skill)
        if live != bundle.champion_revision or live != change.champion_revision:
            measured_on = (
                bundle.champion_revision if live != bundle.champion_revision else change.champion_revision
            )
            raise ApprovalRefused(
                f"{change.id} is stale: {stale_why(change.skill, change.id, measured_on, live)}"
            )
        actual = ABSENT if change.removal else tree_revision(change.files)
        if actual != bundle.candidate_revision or actual != change.candidate_revision:
            raise ApprovalRefused(
                f"the candidate's files hash to {actual[:12]}, not the evidence's candidate "
                f"{bundle.candidate_revision[:12]} (edited after the evidence)"
            )
        self.check_kind(change, live, bundle.data)
        verdict = passport(bundle.data, live, self.thresholds, change.id)
        hard = [c for c in verdict.failed if not c.overridable]
        if hard:
            raise ApprovalRefused(
                f"{change.id} is blocked: " + "; ".join(f"{c.name} fail: {c.why}" for c in hard)
            )
        root = self.root_of(change.skill) or self.roots[0]
        return bundle, root, verdict

    def check_proposed(self, change: PendingChange) -> None:
        """Only what Ingot itself queued is approvable: the change's latest `propose` (or
        re-evaluation `evidence`) line in the keyed chain must name this skill, these revisions
        and this evidence digest. A hand-made pending record has no such line, however
        consistent it is with its evidence."""
        state = self.audit.verify()
        if not state.ok:
            raise ApprovalRefused(
                f"the audit chain does not verify (line {state.bad_line}: {state.problem}); "
                "see `ingot audit verify`"
            )
        lines = [
            e
            for e in self.audit.entries()
            if e.get("change_id") == change.id and e.get("action") in ("propose", "evidence")
        ]
        if not lines:
            raise ApprovalRefused(
                f"change {change.id} has no `propose` line in the audit chain, so Ingot never queued it "
                "(a hand-made or forged pending record); reject it"
            )
        expected = {
            "skill": change.skill,
            "from_revision": change.champion_revision,
            "to_revision": change.candidate_revision,
            "evidence_digest": change.evidence_digest,
        }
        wrong = [key for key, value in expected.items() if lines[-1].get(key) != value]
        if wrong:
            raise ApprovalRefused(
                f"change {change.id} differs from its audited proposal (line {lines[-1].seq}) in "
                f"{', '.join(wrong)}: edited after it was queued; reject it"
            )

    def check_caches(self, evidence: Mapping[str, Any]) -> None:
        """The cached champion results an A/B rests on must still be the sealed bytes it used."""
        ab = evidence.get("measurements", {}).get("ab") or {}
        cache = ab.get("champion_cache") if isinstance(ab, Mapping) else None
        if not isinstance(cache, Mapping):
            return
        entries = SealedCache(self.runs_dir / "cache" / "ab", Seal(self.runs_dir / "seal.key"))
        problem = entries.still_valid(str(cache.get("file")), str(cache.get("digest")))
        if problem:
            raise ApprovalRefused(
                f"the held-out A/B's champion results cannot be trusted: {problem}; re-evaluate it"
            )

    def check_kind(self, change: PendingChange, live: str | None, evidence: Mapping[str, Any]) -> None:
        """The candidate must change what its evidence was measured for: its kind is classified
        again from the bytes against the live tree (a description change touches only the
        description), and it must be a valid skill with no injection phrase."""
        root = self.root_of(change.skill)
        current = self.promoter.read_tree(root / change.skill, change.skill) if root and live else None
        changes = what_changes(current, None if change.removal else change.files, change.skill)
        block = evidence.get("changes")
        recorded = block.get("kind") if isinstance(block, Mapping) else None
        legacy = recorded is None and change.kind in LEGACY_KINDS  # before kinds were classified
        if recorded is not None and change.kind != recorded:
            raise ApprovalRefused(
                f"the pending record calls {change.id} a {change.kind} change, but its evidence was "
                f"measured for a {recorded} change (an edited record); reject it"
            )
        if changes.kind != (recorded or change.kind) and not legacy:
            raise ApprovalRefused(
                f"the candidate is a {changes.kind} change of {change.skill!r} as it is live now, but its "
                f"evidence was measured for a {recorded or change.kind} change; re-evaluate it"
            )
        if change.removal:
            return
        try:
            text = change.files["SKILL.md"].decode("utf-8")
            _, description, body, _ = parse_skill_md(text, change.skill)
        except (KeyError, UnicodeDecodeError, IngotError) as exc:
            raise ApprovalRefused(f"the candidate is not a valid skill: {exc}") from exc
        scan = injection_check(f"{description}\n{body}")
        if not scan.passed:
            raise ApprovalRefused(scan.detail)
        if changes.description:
            self.check_collisions(change, description)

    def check_collisions(self, change: PendingChange, description: str) -> None:
        """A description must not shadow any skill served *now*: two candidates that each passed
        admission alone may collide once the first is live."""
        if self.neighbours is None:
            raise ApprovalRefused(
                "approval re-checks the description against the served library, and this process has "
                "none; approve from `ingot approve` or the UI"
            )
        similarity = self.neighbours().similarity(change.skill, description)
        collision = collision_check(similarity.named, change.skill, similarity.alone)
        if not collision.passed:
            raise ApprovalRefused(f"collision with the library as it is now: {collision.detail}")


def accepted(
    change: PendingChange,
    verdict: Passport,
    accept_missing: str | None,
    override: str | None,
    accepting: Collection[str] | None = None,
) -> Acceptance:
    """What approving `change` with this passport takes: nothing when it is ready; a reason naming
    its missing cells (`accept_missing`) when some are missing; an override reason when an overridable
    failure blocks it (a replay BLOCK, a measurement that did not show a gain). `accepting`: the
    cells the person saw missing (the confirmation page always
    sends them): a cell missing now that is not among them is a conflict, never accepted unseen.
    `ApprovalRefused` says what is lacking; autonomy never passes either."""
    override_given = override is not None and override != ""
    reason, override = (accept_missing or "").strip()[:2000], (override or "").strip()[:2000]
    unknown = sorted(set(accepting or ()) - set(CELLS))
    if unknown:
        raise ApprovalRefused(
            f"unknown cell(s) {', '.join(map(repr, unknown))} in --accepting; the cells are "
            f"{', '.join(CELLS)}"
        )
    if override_given and not override:
        raise ApprovalRefused(
            'a reason is required: --override-reason "WHY" (why the failed cells are acceptable; audited)'
        )
    if verdict.failed and not override:
        raise ApprovalRefused(
            f"{change.id} is blocked ("
            + "; ".join(f"{c.name} fail: {c.why}" for c in verdict.failed)
            + "); approve only with an explicit override and its reason (--override-reason), which is audited"
        )
    missing = tuple(c.name for c in verdict.missing)
    if accept_missing is not None and not reason:
        raise ApprovalRefused(
            'a reason is required: --accept-missing "REASON" (why the missing cells are acceptable; '
            "audited with them)"
        )
    extra = [name for name in accepting or () if name not in missing]
    unseen = [name for name in missing if accepting is not None and name not in set(accepting)]
    listed = ", ".join(missing) or "none"
    if extra:
        named = "; ".join(f"{n}: {verdict.cell(n).state}" for n in extra)
        are = "is" if len(extra) == 1 else "are"
        not_missing = f"{', '.join(extra)} {are} not missing on this change ({named})"
        if not unseen:  # a wrong name, not a change since: say which cells are missing
            raise ApprovalRefused(
                f"{not_missing}, so there is nothing to accept for {'it' if len(extra) == 1 else 'them'}; "
                f"the missing cells are: {listed}"
                + (f'. Name only those: --accepting "{",".join(missing)}"' if missing else "")
            )
    if missing and not reason:
        listed = "; ".join(f"{c.name} ({c.why})" for c in verdict.missing)
        raise ApprovalRefused(
            f"{change.id} needs acknowledgement: {len(missing)} cell(s) missing: {listed}. Approve it only "
            "by naming why that is enough (the reason on the confirmation page, or `ingot approve "
            f'--accept-missing "REASON" --accepting "{",".join(missing)}"`), audited with the cells'
        )
    if unseen and extra:  # named the wrong cells: which are missing, and that nothing unseen is accepted
        one = len(unseen) == 1
        raise PromotionConflict(
            f"{not_missing}, and {', '.join(unseen)} {'is' if one else 'are'} missing now and you did not "
            f"accept {'it' if one else 'them'}; the missing cells are: {listed}. If that is what you saw, "
            f'name them (--accepting "{",".join(missing)}"); if not, review {change.id} again'
        )
    if unseen:
        one = len(unseen) == 1
        raise PromotionConflict(
            f"{', '.join(unseen)} {'is' if one else 'are'} missing now and you did not accept "
            f"{'it' if one else 'them'} (--accepting, or the confirmation page): if "
            f"{'it was' if one else 'they were'} missing when you looked, name {'it' if one else 'them'} "
            f"too; if not, {change.id}'s passport changed since: review it again"
        )
    overridden = tuple(c.name for c in verdict.failed) if override else ()
    return Acceptance(verdict.state, missing, reason or None, override or None, overridden)
