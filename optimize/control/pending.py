"""The quarantine: proposed changes waiting for a decision, one review slot per skill.

`runs/pending/<skill>.json` (schema_version 1) holds a candidate's kind (control/kinds.py),
source, champion revision, its files (inline; none for a removal, whose candidate revision is
`absent`), candidate revision, created time, the routing cases its author was shown (their
hashes, so routing evidence leaves them out), and the evidence bundle it rests on (path +
digest). Pending content is never served: nothing under `runs/` is a skills
root. A newer candidate for the same skill moves the displaced one to
`runs/pending/archive/<skill>/<id>.json` (never dropped) and says so; so do rejections and
approvals, with their reason. The status an archived record carries decides nothing: a change's
fate is read from the audit chain (decisions.py). A record and its audit line are one recoverable step: it is
staged in `pending/.staged/`, its line appended, then placed (`stage` / `place`), and recovery
finishes or drops a staged record by whether the chain holds its line. Writes happen under the
change-control lock.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingot import faults
from ingot.errors import IngotError
from ingot.fsutil import check_relative, fsync_dir, remove_stale_temps, write_atomic
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
    # Who may replace it through create_skill: the proposer's MCP session as the server knows it
    # (mcp_server/server.py: session_owner), a digest; None: nobody (every other proposal).
    owner: str | None = None

    @property
    def removal(self) -> bool:
        return self.candidate_revision == ABSENT

    def with_evidence(self, path: str, digest: str) -> PendingChange:
        """This change re-measured: resting on the bundle at `path`, the one it rested on before
        listed in `evidence_history` (the bundle itself stays where it was)."""
        earlier = {"path": self.evidence_path or "", "digest": self.evidence_digest or ""}
        return dataclasses.replace(
            self,
            evidence_path=path,
            evidence_digest=digest,
            evidence_history=(*self.evidence_history, earlier),
        )

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
            "owner": self.owner,
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
    owner: str | None = None,
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
        owner=owner,
    )


ID_PATTERN = re.compile(r"^chg-[0-9a-f]{12}$")


def _archived(status: str, reason: str, actor: str, decision_seq: int | None) -> dict[str, Any]:
    """The fields an archived record gains: what became of it, why, by whom, and the audit line
    that decided it (`decision_seq`: unique and increasing, unlike a timestamp)."""
    return {
        "archived_status": status,
        "archived_reason": reason,
        "archived_by": actor,
        "archived_at": dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"),
        "decision_seq": decision_seq,
    }


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
            owner=str(data["owner"]) if data.get("owner") else None,
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
        self.staged_folder = self.folder / ".staged"

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

    # -- queueing: stage, audit, place ------------------------------------------------------
    # A record reaches its slot in three steps, so that it and its audit line are one
    # recoverable step: `stage` writes it where no reader looks, the caller appends the chain
    # line, `place` moves it into its slot (or, withheld, into the archive). Recovery (`staged`,
    # then `place` or `discard`) finishes a staged record whose line is in the chain and drops
    # one whose line is not: unaudited means unqueued.

    def stage(self, change: PendingChange) -> Path:
        """Step 1: the complete record, in `pending/.staged/<id>.json`; not pending yet."""
        path = self.staged_folder / f"{change.id}.json"
        self._write(path, change.to_json())
        return path

    def staged(self) -> list[tuple[Path, PendingChange | None]]:
        """Every staged record (None where it cannot be parsed), for recovery."""
        found: list[tuple[Path, PendingChange | None]] = []
        for path in sorted(self.staged_folder.glob("*.json")) if self.staged_folder.exists() else []:
            try:
                found.append((path, parse(json.loads(path.read_bytes()), path)))
            except (OSError, ValueError, IngotError):
                found.append((path, None))
        return found

    def remove_leftovers(self) -> list[str]:
        """Delete the temp files a killed write left in the queue's folders (slots, staged
        records, each skill's archive); returns their paths relative to the queue's folder. Under
        the change lock only: every write here holds it."""
        folders = [self.folder, self.staged_folder]
        if self.archive_folder.is_dir():
            folders += sorted(p for p in self.archive_folder.iterdir() if p.is_dir() and not p.is_symlink())
        return [
            (folder / name).relative_to(self.folder).as_posix()
            for folder in folders
            for name in remove_stale_temps(folder)
        ]

    def discard(self, path: Path) -> None:
        """Drop a staged record whose audit line was never written."""
        faults.point(f"unlink staged {path.name}")
        path.unlink(missing_ok=True)

    def displaced_path(self, skill: str, by: str) -> Path | None:
        """Where the record in `skill`'s slot is archived if change `by` takes the slot (None:
        the slot is empty, or already holds `by`)."""
        slot = self.slot(skill)
        try:
            record_id = str(json.loads(slot.read_bytes()).get("id", ""))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, AttributeError):
            record_id = ""
        if record_id == by:
            return None
        if not ID_PATTERN.match(record_id):  # never let a record's own text pick a path
            record_id = f"unreadable-{secrets.token_hex(6)}"
        return self.archive_folder / check_skill_name(skill) / f"{record_id}.json"

    def withheld_path(self, change: PendingChange) -> Path:
        """Where a withheld candidate is archived."""
        return self.archive_folder / check_skill_name(change.skill) / f"{change.id}.json"

    def place(self, change: PendingChange, archive: Path | None = None, withheld: str | None = None) -> None:
        """Step 3, once the chain holds the change's line: the staged record takes its slot, the
        record it displaces going to `archive`; or, `withheld` (why), it goes straight to
        `archive`. Repeatable: recovery runs it again after a kill at any point."""
        staged = self.staged_folder / f"{change.id}.json"
        if withheld is not None:
            if archive is None:
                raise PendingError(f"a withheld change ({change.id}) needs an archive path")
            if staged.exists():
                data = {**json.loads(staged.read_bytes()), **_archived("withheld", withheld, "ingot", None)}
                self._write(archive, data)
                self.discard(staged)
            return
        slot = self.slot(change.skill)
        if not staged.exists():
            return  # placed already
        if slot.exists() and self.displaced_path(change.skill, change.id) is not None:
            target = archive or self.displaced_path(change.skill, change.id)
            self._archive_file(slot, change.skill, f"displaced by {change.id}", "displaced", target=target)
        faults.point(f"rename staged {change.id} into its slot")
        os.replace(staged, slot)
        fsync_dir(self.folder)

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
        """The archived record of `change_id` (found by its id, never by time), or None. Its
        status is a copy for people to read: what became of a change is the chain's word
        (decisions.py), never this file's."""
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
        target: Path | None = None,
    ) -> Path:
        try:
            data = json.loads(slot.read_bytes())
        except (OSError, ValueError):
            data = {"unreadable_record": slot.read_bytes().decode("utf-8", "replace")}
        if not isinstance(data, dict):
            data = {"unreadable_record": str(data)}
        data.update(_archived(status, reason, actor, decision_seq))
        if target is None:
            record_id = str(data.get("id", ""))
            if not ID_PATTERN.match(record_id):  # never let a record's own text pick a path
                record_id = f"unreadable-{secrets.token_hex(6)}"
            target = self.archive_folder / check_skill_name(skill) / f"{record_id}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        self._write(target, data)
        faults.point(f"unlink slot {slot.name}")
        slot.unlink()
        return target

    @staticmethod
    def _write(path: Path, data: Mapping[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode())
