"""The status line at the top of every page: pending changes, drifted skills, the audit chain.

Built from one `ChangeControl.status()`, which a request computes once and shares between the
header and the page; a damaged audit chain is shown (its problem and bad line), never hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

from optimize.control.status import Status


@dataclass(frozen=True)
class Header:
    pending: int
    drifted: tuple[str, ...]
    audit_ok: bool
    audit_lines: int
    audit_head: str
    audit_problem: str | None
    audit_bad_line: int | None


def header(status: Status) -> Header:
    """The page header from one `ChangeControl.status()` (which re-reads every skills root: a
    request computes it once and shares it between the header and the page)."""
    audit = status.audit
    return Header(
        pending=status.pending,
        drifted=tuple(s.name for s in status.drifted),
        audit_ok=audit.ok,
        audit_lines=audit.lines,
        audit_head=audit.head_hash,
        audit_problem=audit.problem,
        audit_bad_line=audit.bad_line,
    )
