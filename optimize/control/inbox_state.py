"""What the candidate inbox did with each candidate: proposals from the audit chain, reports
from `<home>/inbox.json`.

Whether a candidate was proposed is the chain's alone: each `propose` line the inbox causes
names the candidate's origin (its folder, or `git:<root>:<skill>` with the git tree), and
`propose` refuses under the lock a revision its origin's newest line already holds, so a pass
killed at any point and run again proposes nothing twice. `inbox.json` keeps only what the chain
does not hold: the refusals and same-as-live outcomes already reported, so each is reported
once. They decide nothing: such a candidate is checked again on every pass. Entries an older
Ingot wrote ("queued as chg-…", before lines named origins) are believed only where the chain
holds that change's `propose` line for the same skill and revision; a file that claims a
proposal the chain does not hold is refused in one line (`InboxStateRefused`), never acted on.
`put` writes the file; its caller (the inbox) holds the change lock.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingot.errors import IngotError
from ingot.fsutil import write_atomic
from optimize.control.audit import AuditEntry, AuditError, AuditLog
from optimize.control.pending import ID_PATTERN
from optimize.control.proposals import proposed_from

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1
REPORTS = ("refused", "same as live")  # what the file may hold on its own
CLAIMS = ("queued", "withheld")  # what only an older Ingot wrote there, checked against the chain


class InboxStateRefused(IngotError):
    """`inbox.json` claims a proposal the audit chain does not hold (edited outside Ingot)."""


@dataclass(frozen=True)
class Proposal:
    """One `propose` line for a candidate the inbox read."""

    skill: str
    revision: str
    change_id: str
    seq: int
    tree: str | None = None  # the git tree it was read from (a candidate branch)
    withheld: bool = False

    @classmethod
    def of(cls, line: AuditEntry, recorded_tree: bool = True) -> Proposal:
        return cls(
            str(line.get("skill")),
            str(line.get("to_revision")),
            str(line.get("change_id")),
            line.seq,
            line.get("origin_tree") if recorded_tree else None,
            str(line.get("reason") or "").startswith("withheld: "),
        )


@dataclass(frozen=True)
class Seen:
    """Every origin the inbox has read: its proposals (the chain's, oldest first) and the
    refusal or same-as-live outcome it last reported (the file's; `after` is the seq of the
    origin's newest proposal when it was reported)."""

    proposals: Mapping[str, tuple[Proposal, ...]]
    reports: Mapping[str, Mapping[str, Any]]
    filed: frozenset[str] = frozenset()  # every origin the file has an entry for

    def latest(self, origin: str) -> Proposal | None:
        found = self.proposals.get(origin)
        return found[-1] if found else None

    def listing(self) -> dict[str, dict[str, Any]]:
        """Each origin's last outcome, for `ingot inbox` to list."""
        shown: dict[str, dict[str, Any]] = {}
        for origin in sorted({*self.proposals, *self.reports}):
            latest, report = self.latest(origin), self.reports.get(origin)
            if report is not None and (latest is None or int(report.get("after") or 0) >= latest.seq):
                shown[origin] = dict(report)
            elif latest is not None:
                did = "withheld" if latest.withheld else "queued"
                shown[origin] = {"skill": latest.skill, "revision": latest.revision}
                shown[origin] |= {"did": did, "change_id": latest.change_id, "tree": latest.tree}
        return shown


class InboxState:
    """`<home>/inbox.json` read against the chain."""

    def __init__(self, runs_dir: Path, audit: AuditLog) -> None:
        self.path = runs_dir / "inbox.json"
        self.audit = audit

    def load(self) -> Seen:
        """What the inbox has seen; `InboxStateRefused` when the file claims what the chain does not
        hold, `AuditError` when the chain does not verify (then nothing can be derived)."""
        state, entries = self.audit.verified_entries()
        if not state.ok:
            raise AuditError(
                f"the audit chain is broken at line {state.bad_line}: {state.problem}. The inbox "
                "queues nothing until it is investigated (`ingot audit verify`)"
            )
        proposals = {o: [Proposal.of(line) for line in lines] for o, lines in proposed_from(entries).items()}
        by_change = {e.get("change_id"): e for e in entries if e.get("action") == "propose"}
        withdrawn = {e.get("change_id") for e in entries if e.get("action") == "withdraw"}
        reports: dict[str, Mapping[str, Any]] = {}
        records = self.records()
        for origin, record in records.items():
            did = record.get("did") if isinstance(record, Mapping) else None
            if did in REPORTS:
                reports[origin] = record
            elif did in CLAIMS:
                line = self._claimed(origin, record, by_change)
                if line.get("change_id") not in withdrawn:
                    proposals.setdefault(origin, []).append(Proposal.of(line, recorded_tree=False))
            else:
                raise InboxStateRefused(
                    f"{self.path} has an entry for {origin} that Ingot never writes ({str(record)[:80]}): "
                    f"it was edited outside Ingot, so the inbox does nothing until it agrees with the "
                    f"audit chain. Delete it (`rm {self.path}`): the next pass rebuilds it from the chain"
                )
        ordered = {
            o: tuple(sorted({p.seq: p for p in found}.values(), key=lambda p: p.seq))
            for o, found in proposals.items()
        }
        return Seen(ordered, reports, frozenset(records))

    def _claimed(
        self, origin: str, record: Mapping[str, Any], by_change: Mapping[Any, AuditEntry]
    ) -> AuditEntry:
        """The `propose` line an older Ingot's "queued as chg-…" entry names, if the chain holds it
        for the same skill and revision (and no other origin)."""
        change_id = record.get("change_id")
        line = (
            by_change.get(change_id) if isinstance(change_id, str) and ID_PATTERN.match(change_id) else None
        )
        if (
            line is not None
            and line.get("skill") == record.get("skill")
            and line.get("to_revision") == record.get("revision")
            and line.get("origin") in (None, origin)
        ):
            return line
        revision = str(record.get("revision") or "?")[:12]
        raise InboxStateRefused(
            f"{self.path} says {origin} was {record.get('did')} as {str(change_id)[:40]} "
            f"({record.get('skill')} at {revision}), but the audit chain holds no such propose line: "
            "the file was edited outside Ingot, so the inbox does nothing until it agrees with the "
            f"chain. Delete it (`rm {self.path}`): the next pass rebuilds it from the chain"
        )

    def records(self) -> dict[str, Any]:
        """The file's entries as written, unchecked ({} when there is none; an unreadable file is
        logged and read as empty: it decides nothing, so every candidate is simply read again)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s is unreadable (%s); every candidate will be read again", self.path, exc)
            return {}
        if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
            log.warning(
                "%s is not a version-%d seen-list; every candidate will be read again",
                self.path,
                SCHEMA_VERSION,
            )
            return {}
        seen = data.get("seen", {})
        return dict(seen) if isinstance(seen, dict) else {}

    def put(self, origin: str, record: Mapping[str, Any] | None) -> None:
        """Record (None: forget) what was reported for `origin`. The caller holds the change lock."""
        records = self.records()
        if record is None:
            records.pop(origin, None)
        else:
            records[origin] = dict(record)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"schema_version": SCHEMA_VERSION, "seen": records}
        write_atomic(self.path, json.dumps(data, indent=1, sort_keys=True).encode())
