"""The Audit page: the tamper-evident chain (optimize/control/audit.py), newest entry first, a page
at a time, with the chain's verification status at the top.

Read-only: it reads `audit.jsonl` and runs the same `AuditLog.verify` as `ingot audit verify`,
and writes nothing. A chain that does not verify is still listed, so a person can see where it
breaks: entries before the first bad line are marked verified, that line broken, every later one
not verified; a line that is not even a record is shown as unreadable, never skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse

from ingot.errors import IngotError, NotFound
from optimize.control.audit import AuditError, AuditLog
from optimize.control.audit_verify import Verification
from ui.site import Site

PER_PAGE = 50
BROKEN_ADVICE = (
    "Every change is refused until the chain verifies again. Compare audit.jsonl from that line on "
    "with your backup (or the Ingot-Audit lines of your git history), put the genuine file back, "
    "then run `ingot audit verify`."
)


@dataclass(frozen=True)
class AuditRow:
    """One line of the chain as the page shows it."""

    line: int  # 1-based line number in audit.jsonl
    check: str  # "verified" | "broken here" | "not verified"
    seq: int | None = None  # None: the line is not a readable record
    time: str = ""
    actor: str | None = None
    action: str | None = None
    outcome: str | None = None
    skill: str | None = None
    change_id: str | None = None
    from_revision: str | None = None
    to_revision: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class AuditView:
    verification: Verification
    rows: tuple[AuditRow, ...]  # this page's lines, newest first
    page: int
    pages: int
    total: int

    @property
    def advice(self) -> str | None:
        return None if self.verification.ok else BROKEN_ADVICE


def _check(line: int, verification: Verification) -> str:
    bad = verification.bad_line
    if verification.ok or bad is None or line < bad:
        return "verified"
    return "broken here" if line == bad else "not verified"


def _row(log: AuditLog, line: int, raw: bytes, verification: Verification) -> AuditRow:
    check = _check(line, verification)
    try:
        (entry,) = log.entries(raw + b"\n")
    except (AuditError, ValueError):
        return AuditRow(line, check)

    def text(key: str) -> str | None:
        value = entry.get(key)
        return None if value is None else str(value)

    return AuditRow(
        line,
        check,
        entry.seq,
        entry.time,
        text("actor"),
        text("action"),
        text("outcome"),
        text("skill"),
        text("change_id"),
        text("from_revision"),
        text("to_revision"),
        text("reason") or text("override_reason") or text("acceptance_reason"),
    )


def parse_page(value: str | None) -> int:
    """The `page` query parameter as a page number (1 when absent); a clear error otherwise."""
    if value is None or value == "":
        return 1
    if not value.isdigit() or int(value) < 1:
        raise IngotError(f"page must be a whole number from 1 up, not {value[:40]!r}")
    return int(value)


def audit_view(log: AuditLog, page: int, per_page: int = PER_PAGE) -> AuditView:
    """Page `page` (1: the newest entries) of the chain, with its verification; `NotFound` for a
    page past the end."""
    try:
        data = log.path.read_bytes()
    except FileNotFoundError:
        data = b""
    except OSError as exc:
        raise IngotError(
            f"cannot read the audit log {log.path}: {exc.strerror or exc}; fix its permissions"
        ) from exc
    lines = data.splitlines()
    try:
        verification = log.verify(data)
    except AuditError as exc:  # e.g. an unreadable key: the chain cannot be trusted, so say so
        verification = Verification(False, len(lines), "", str(exc), 1)
    total = len(lines)
    pages = max(1, -(-total // per_page))
    if page > pages:
        raise NotFound(
            f"the audit log has {pages} page{'' if pages == 1 else 's'} of {per_page} entries; "
            f"page {page} is past its end"
        )
    newest = total - (page - 1) * per_page  # line number of this page's first (newest) row
    numbers = range(newest, max(newest - per_page, 0), -1)
    rows = tuple(_row(log, n, lines[n - 1], verification) for n in numbers)
    return AuditView(verification, rows, page, pages, total)


def add_audit_routes(app: FastAPI, site: Site) -> None:
    @app.get("/audit", response_class=HTMLResponse)
    def audit(request: Request, page: str | None = None) -> HTMLResponse:
        view = audit_view(site.control.audit, parse_page(page))
        values: dict[str, Any] = {"view": view}
        return site.page(request, "audit.html", **values)
