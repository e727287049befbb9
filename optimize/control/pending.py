"""The quarantine: proposed changes waiting for a decision, one review slot per skill.

`runs/pending/<skill>.json` (schema_version 1) holds a candidate's kind (control/kinds.py),
source, champion revision, its files (inline; none for a removal, whose candidate revision is
`absent`), candidate revision, created time, the routing cases its author was shown (their
hashes, so routing evidence leaves them out), and the evidence bundle it rests on (path +
digest). Pending content is never served: nothing under `runs/` is a skills
root. A newer candidate for the same skill moves the displaced one to
`runs/pending/archive/<skill>/<id>.json` (never dropped) and says so; so do rejections and
approvals, with their reason. Writes happen under the change-control lock.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingot.errors import IngotError
from ingot.fsutil import check_relative, write_atomic
from optimize.control.kinds import KINDS
from optimize.control.promote import ABSENT, check_skill_name, tree_revision

SCHEMA_VERSION = 1
LEGACY_KINDS = ("rewrite",)  # recorded before changes were classified by what they change
SOURCES = ("agent", "optimizer", "operator", "inbox", "direct-edit")  # and "git:<commit sha>"
GIT_SOURCE = re.compile(r"^git:[0-9a-f]{40}$")


def known_source(source: str) -> bool:
    """Who proposed a change: an agent over MCP, the optimizer, an operator, a candidate folder
    (`inbox`), an edit made straight to a live skill (`direct-edit`), or a candidate branch commit."""
    return source in SOURCES or bool(GIT_SOURCE.match(str(source)))


class PendingError(IngotError):
    """A pending record is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class PendingChange:
    """A quarantined candidate for one skill."""

    id: str
    skill: str
    kind: str
    source: str
    champion_revision: str | None
    candidate_revision: str
    files: Mapping[str, bytes]
    evidence_path: str | None
    evidence_digest: str | None
    created: str
    note: str | None = None
    evidence_history: tuple[Mapping[str, str], ...] = ()  # earlier bundles, oldest first (kept on disk)
    seen: tuple[str, ...] = ()  # impact.case_key of each routing case its author was shown

    @property
    def removal(self) -> bool:
        return self.candidate_revision == ABSENT

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "id": self.id,
            "skill": self.skill,
            "kind": self.kind,
            "source": self.source,
            "champion_revision": self.champion_revision,
            "candidate_revision": self.candidate_revision,
            "files": [
                {"path": p, "base64": base64.b64encode(d).decode()} for p, d in sorted(self.files.items())
            ],
            "evidence": {"path": self.evidence_path, "digest": self.evidence_digest},
            "evidence_history": [dict(e) for e in self.evidence_history],
            "created": self.created,
            "note": self.note,
            "seen": list(self.seen),
        }


def new_change(
    skill: str,
    kind: str,
    source: str,
    champion_revision: str | None,
    files: Mapping[str, bytes],
    evidence_path: str | None,
    evidence_digest: str | None,
    note: str | None = None,
    now: dt.datetime | None = None,
    seen: tuple[str, ...] = (),
) -> PendingChange:
    """A new pending change; `files` empty and `kind` "removal" for a skill to stop serving."""
    created = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
    if kind not in KINDS or not known_source(source):
        raise PendingError(f"kind must be one of {KINDS} and source one of {SOURCES} or git:<sha>")
    check_skill_name(skill)
    for path in files:
        check_relative(path)
    return PendingChange(
        f"chg-{secrets.token_hex(6)}",
        skill,
        kind,
        source,
        champion_revision,
        ABSENT if kind == "removal" else tree_revision(files),
        dict(files),
        evidence_path,
        evidence_digest,
        created,
        note,
        seen=tuple(seen),
    )


ID_PATTERN = re.compile(r"^chg-[0-9a-f]{12}$")


def parse(data: Any, where: Path, slot_skill: str | None = None) -> PendingChange:
    """Validate a pending record read from disk; anything off is a `PendingError`."""
    try:
        if data.get("schema_version") != SCHEMA_VERSION:
            raise PendingError(f"{where} is not a version-{SCHEMA_VERSION} pending record")
        files = {
            check_relative(f["path"]): base64.b64decode(f["base64"], validate=True) for f in data["files"]
        }
        evidence = data.get("evidence") or {}
        change = PendingChange(
            id=str(data["id"]),
            skill=check_skill_name(data["skill"]),
            kind=data["kind"],
            source=data["source"],
            champion_revision=data.get("champion_revision"),
            candidate_revision=str(data["candidate_revision"]),
            files=files,
            evidence_path=evidence.get("path"),
            evidence_digest=evidence.get("digest"),
            created=str(data["created"]),
            note=data.get("note"),
            evidence_history=tuple(
                {"path": str(e["path"]), "digest": str(e["digest"])}
                for e in data.get("evidence_history") or []
            ),
            seen=tuple(str(k) for k in data.get("seen") or ()),
        )
    except PendingError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError, IngotError) as exc:
        raise PendingError(f"{where} is not a valid pending record: {exc}") from exc
    if change.kind not in (*KINDS, *LEGACY_KINDS) or not known_source(change.source):
        raise PendingError(f"{where} has an unknown kind or source")
    if not ID_PATTERN.match(change.id):
        raise PendingError(f"{where} has a malformed change id {change.id[:40]!r}")
    if slot_skill is not None and change.skill != slot_skill:
        raise PendingError(f"{where} is the slot of {slot_skill!r} but holds a change for {change.skill!r}")
    return change


class PendingQueue:
    """`runs/pending/`: the review slots and their archive."""

    def __init__(self, runs_dir: Path) -> None:
        self.folder = runs_dir / "pending"
        self.archive_folder = self.folder / "archive"

    def slot(self, skill: str) -> Path:
        return self.folder / f"{check_skill_name(skill)}.json"

    def get(self, skill: str) -> PendingChange | None:
        path = self.slot(skill)
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise PendingError(f"{path} is unreadable: {exc}") from exc
        return parse(data, path, slot_skill=skill)

    def all(self) -> list[PendingChange]:
        if not self.folder.exists():
            return []
        return [c for p in sorted(self.folder.glob("*.json")) if (c := self.get(p.stem)) is not None]

    def scan(self) -> tuple[list[PendingChange], list[str]]:
        """Every readable pending change, and what is wrong with each unreadable record (for
        reports that must keep working when one record is damaged)."""
        changes, problems = [], []
        for path in sorted(self.folder.glob("*.json")) if self.folder.exists() else []:
            try:
                change = self.get(path.stem)
            except IngotError as exc:
                problems.append(str(exc))
                continue
            if change is not None:
                changes.append(change)
        return changes, problems

    def submit(self, change: PendingChange) -> Path | None:
        """Put `change` in its skill's slot; returns where a displaced candidate was archived."""
        displaced = None
        existing = self.slot(change.skill)
        if existing.exists():
            displaced = self._archive_file(existing, change.skill, f"displaced by {change.id}", "displaced")
        self._write(existing, change.to_json())
        return displaced

    def replace_evidence(self, change: PendingChange, path: str, digest: str) -> PendingChange:
        """`change` re-measured: its record now rests on the bundle at `path`; the one it rested on
        before is listed in `evidence_history` (the bundle itself stays where it was)."""
        history = (
            *change.evidence_history,
            {"path": change.evidence_path or "", "digest": change.evidence_digest or ""},
        )
        updated = dataclasses.replace(
            change, evidence_path=path, evidence_digest=digest, evidence_history=history
        )
        self._write(self.slot(change.skill), updated.to_json())
        return updated

    def restore(self, change: PendingChange) -> None:
        """Put `change`'s record back as it was (an audit line for its update could not be written)."""
        self._write(self.slot(change.skill), change.to_json())

    def withdraw(self, change: PendingChange, displaced: Path | None) -> None:
        """Undo `submit` (its audit line could not be written): drop `change` and put back the
        candidate it displaced, so the queue holds only what the chain records."""
        slot = self.slot(change.skill)
        slot.unlink(missing_ok=True)
        if displaced is not None and displaced.exists():
            data = json.loads(displaced.read_bytes())
            for key in ("archived_status", "archived_reason", "archived_by", "archived_at", "decision_seq"):
                data.pop(key, None)
            self._write(slot, data)
            displaced.unlink()

    def archive_new(self, change: PendingChange, reason: str, status: str = "withheld") -> Path:
        """Write `change` straight into the archive (never queued), with why; returns the path."""
        target = self.archive_folder / check_skill_name(change.skill) / f"{change.id}.json"
        data = {
            **change.to_json(),
            "archived_status": status,
            "archived_reason": reason,
            "archived_by": "ingot",
            "archived_at": dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"),
            "decision_seq": None,
        }
        self._write(target, data)
        return target

    def archive(
        self, skill: str, reason: str, status: str, actor: str, decision_seq: int | None = None
    ) -> Path:
        """Move the skill's pending record to the archive with why (rejected / approved) and the
        audit line that decided it (`decision_seq`: unique and increasing, unlike a timestamp)."""
        slot = self.slot(skill)
        if not slot.exists():
            raise PendingError(f"no pending change for {skill!r}")
        return self._archive_file(slot, skill, reason, status, actor, decision_seq)

    def archived(self, skill: str) -> list[dict[str, Any]]:
        """Every archived record of `skill`, oldest decision first."""
        folder = self.archive_folder / check_skill_name(skill)
        records = [json.loads(p.read_bytes()) for p in folder.glob("*.json")] if folder.exists() else []
        return sorted(records, key=lambda r: (r.get("decision_seq") or 0, r.get("archived_at", "")))

    def decided(self, skill: str, change_id: str) -> dict[str, Any] | None:
        """The archived record of `change_id` (found by its id, never by time), or None."""
        if not ID_PATTERN.match(change_id):
            return None
        path = self.archive_folder / check_skill_name(skill) / f"{change_id}.json"
        try:
            return json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise PendingError(f"{path} is unreadable: {exc}") from exc

    def _archive_file(
        self,
        slot: Path,
        skill: str,
        reason: str,
        status: str,
        actor: str = "ingot",
        decision_seq: int | None = None,
    ) -> Path:
        try:
            data = json.loads(slot.read_bytes())
        except (OSError, ValueError):
            data = {"unreadable_record": slot.read_bytes().decode("utf-8", "replace")}
        data.update(
            {
                "archived_status": status,
                "archived_reason": reason,
                "archived_by": actor,
                "archived_at": dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"),
                "decision_seq": decision_seq,
            }
        )
        record_id = str(data.get("id", ""))
        if not ID_PATTERN.match(record_id):  # never let a record's own text pick a path
            record_id = f"unreadable-{secrets.token_hex(6)}"
        target = self.archive_folder / check_skill_name(skill) / f"{record_id}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        self._write(target, data)
        slot.unlink()
        return target

    @staticmethod
    def _write(path: Path, data: Mapping[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode())
