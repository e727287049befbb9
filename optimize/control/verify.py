"""Approval's re-verification: everything about a pending change, checked again from disk.

Nothing a record says is trusted: the evidence bundle must still have the digest the record
holds and be for this skill and kind; the keyed audit chain must hold the change's own
`propose` (or re-evaluation `evidence`) line; the A/B's cached champion results must still be
the sealed bytes it used; the live revision must be the evidence's champion; the candidate's
files must hash to its revision and do what its kind says (a description change touches only
the description); no injection phrase; no collision with the library as it is now; and the
gate, recomputed under today's thresholds, must let a person approve it (and a replay WARN or
BLOCK must come with the reason it needs: `replay_accepted`). Read-only: it raises
`ApprovalRefused` naming the failed check, and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ingot.errors import IngotError
from ingot.seal import Seal
from mcp_server.library import Similarity
from mcp_server.registry import parse_skill_md
from optimize.control import evidence as evidence_mod
from optimize.control.audit import AuditLog
from optimize.control.gate import Thresholds, evaluate
from optimize.control.pending import PendingChange
from optimize.control.promote import Promoter, tree_revision
from optimize.control.replay_rule import ReplayRequirement
from optimize.measure.cache import SealedCache
from optimize.measure.checks import collision_check, injection_check


class ApprovalRefused(IngotError):
    """Approval re-verification failed; the reason names the check."""


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

    def verify(self, change: PendingChange) -> tuple[evidence_mod.Evidence, Path]:
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
        if bundle.data.get("skill") != change.skill or bundle.data.get("kind") != change.kind:
            raise ApprovalRefused("the evidence is for a different skill or kind of change")
        self.check_proposed(change)
        self.check_caches(bundle.data)
        live = self.live_revision(change.skill)
        if live != bundle.champion_revision or live != change.champion_revision:
            raise ApprovalRefused(
                f"skill {change.skill!r} changed on disk since the evidence was recorded (evidence "
                f"champion {(bundle.champion_revision or 'none')[:12]}, on disk {(live or 'none')[:12]}); "
                f"re-measure it"
            )
        self.check_kind(change, live)
        actual = tree_revision(change.files)
        if actual != bundle.candidate_revision or actual != change.candidate_revision:
            raise ApprovalRefused(
                f"the candidate's files hash to {actual[:12]}, not the evidence's candidate "
                f"{bundle.candidate_revision[:12]} (edited after the evidence)"
            )
        verdict = evaluate(bundle.data, self.thresholds)
        if not verdict.approvable:
            raise ApprovalRefused(f"the gate does not pass ({verdict.status}): {'; '.join(verdict.reasons)}")
        root = self.root_of(change.skill) or self.roots[0]
        return bundle, root

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

    def check_kind(self, change: PendingChange, live: str | None) -> None:
        """The kind of change must match what the candidate actually does to the live tree."""
        if (change.kind == "create") != (live is None):
            raise ApprovalRefused(
                f"a {change.kind} record for {change.skill!r}, but the skill "
                f"{'does not exist' if live is None else 'already exists'}; re-propose it"
            )
        try:
            text = change.files["SKILL.md"].decode("utf-8")
            _, description, body, meta = parse_skill_md(text, change.skill)
        except (KeyError, UnicodeDecodeError, IngotError) as exc:
            raise ApprovalRefused(f"the candidate is not a valid skill: {exc}") from exc
        scan = injection_check(f"{description}\n{body}")
        if not scan.passed:
            raise ApprovalRefused(scan.detail)
        self.check_collisions(change, description, live)
        if change.kind == "description":
            root = self.root_of(change.skill)
            assert root is not None
            current = self.promoter.read_tree(root / change.skill, change.skill)
            _, _, live_body, live_meta = parse_skill_md(current["SKILL.md"].decode("utf-8"), change.skill)
            same_files = {k: v for k, v in change.files.items() if k != "SKILL.md"} == {
                k: v for k, v in current.items() if k != "SKILL.md"
            }
            same_meta = {k: v for k, v in meta.items() if k != "description"} == {
                k: v for k, v in live_meta.items() if k != "description"
            }
            if not (same_files and same_meta and body == live_body):
                raise ApprovalRefused(
                    "a description change may change only the frontmatter description; "
                    "this candidate changes more"
                )

    def check_collisions(self, change: PendingChange, description: str, live: str | None) -> None:
        """A description must not shadow any skill served *now*: two candidates that each passed
        admission alone may collide once the first is live."""
        if change.kind == "rewrite" and live is not None:
            root = self.root_of(change.skill)
            assert root is not None
            current = self.promoter.read_tree(root / change.skill, change.skill)
            if parse_skill_md(current["SKILL.md"].decode("utf-8"), change.skill)[1] == description:
                return  # a body-only rewrite does not move the skill's routes
        if self.neighbours is None:
            raise ApprovalRefused(
                "approval re-checks the description against the served library, and this process has "
                "none; approve from `ingot approve` or the UI"
            )
        similarity = self.neighbours().similarity(change.skill, description)
        collision = collision_check(similarity.named, change.skill, similarity.alone)
        if not collision.passed:
            raise ApprovalRefused(f"collision with the library as it is now: {collision.detail}")


def what_changes(
    champion: Mapping[str, bytes] | None, candidate: Mapping[str, bytes], skill: str
) -> dict[str, Any]:
    """What a candidate changes relative to the live files: its description, its body, which
    other files (added, removed or edited). A new skill changes everything."""
    if champion is None:
        return {
            "description": True,
            "body": True,
            "files": sorted(p for p in candidate if p != "SKILL.md"),
            "new": True,
        }

    def parts(files: Mapping[str, bytes]) -> tuple[str, str] | None:
        try:
            _, description, body, _ = parse_skill_md(files["SKILL.md"].decode("utf-8"), skill)
        except (KeyError, UnicodeDecodeError, IngotError):
            return None
        return description, body

    before, after = parts(champion), parts(candidate)
    others = sorted(
        path
        for path in set(champion) | set(candidate)
        if path != "SKILL.md" and champion.get(path) != candidate.get(path)
    )
    return {
        "description": before is None or after is None or before[0] != after[0],
        "body": before is None or after is None or before[1] != after[1],
        "files": others,
        "new": False,
    }


def replay_accepted(rule: ReplayRequirement, reason: str | None, override: str | None) -> str:
    """What the audit line adds for the replay verdict; `ApprovalRefused` when its requirement
    is not met (a BLOCK without an override reason, a WARN without any reason)."""
    reason, override = (reason or "").strip(), (override or "").strip()
    if rule.needs == "override":
        if not override:
            raise ApprovalRefused(
                "the regression replay BLOCKs this change ("
                + "; ".join(rule.reasons)
                + "); approve only with an explicit override and its reason (--override-reason), "
                "which is audited"
            )
        return f"; replay BLOCK overridden: {override[:2000]}"
    if rule.needs == "reason":
        if not (reason or override):
            raise ApprovalRefused(
                "the regression replay WARNs ("
                + "; ".join(rule.reasons)
                + "); say why you approve it anyway (--reason)"
            )
        return f"; replay WARN accepted: {(reason or override)[:2000]}"
    return ""
