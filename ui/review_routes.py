"""The review queue and its decisions: cards, confirm, evaluate, approve, reject; a skill's
history and rollback; an evidence bundle's page.

Every decision goes through the same `ChangeControl` methods as the CLI, one at a time
(`Site.exclusive`); this module parses form fields and redirects. A rejection needs a reason, a
rollback the revision the page showed live: a stale page is a conflict, never a silent overwrite.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from ingot.errors import IngotError, SkillNotFound
from optimize.control.audit import AuditEntry
from optimize.control.changes import ApprovalRefused, ChangeControl
from optimize.control.decisions import SET_ASIDE, fates
from optimize.control.evidence import file_digest
from optimize.control.lock import PromotionConflict
from optimize.control.promote import check_skill_name
from ui import lifecycle, markdown, review_card
from ui.history import set_aside, timeline
from ui.queue import ordered
from ui.site import NOTICES, Site

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")  # a skill name in a notice's link, nothing else


def _approval_of(control: ChangeControl, skill: str, path: Path) -> AuditEntry | None:
    """The approval that rested on this bundle (its promotion intent line), if any: a bundle is
    written once, so what the approver accepted lives in the audit chain and is shown beside it."""
    digest = file_digest(path)
    try:
        lines = control.history(skill)
    except IngotError:
        return None
    return next(
        (e for e in lines if e.get("action") == "promote-intent" and e.get("evidence_digest") == digest), None
    )


def add_review_routes(app: FastAPI, site: Site) -> None:
    control, runs, actor, page = site.control, site.runs, site.actor, site.page
    exclusive, refresh = site.exclusive, site.refresh

    @app.get("/review", response_class=HTMLResponse)
    def review(request: Request, done: str | None = None, skill: str | None = None) -> HTMLResponse:
        changes, problems = control.queue.scan()
        cards = []
        for change in changes:
            try:
                cards.append(review_card.review(control, change))
            except (IngotError, OSError, ValueError, TypeError) as exc:  # one bad change, not the page
                problems.append(f"cannot show the change for {change.skill}: {exc}")
        decided = skill if skill and done in NOTICES and _NAME.match(skill) else None
        return page(
            request,
            "review.html",
            cards=ordered(cards),
            problems=problems,
            set_aside=set_aside(control),
            notice=NOTICES.get(done or ""),
            decided=decided,
        )

    @app.get("/changes/{skill}/confirm", response_class=HTMLResponse)
    def confirm(request: Request, skill: str, change_id: str = "") -> HTMLResponse:
        """The step before approving: what will be served, in place of what, on what evidence."""
        check_skill_name(skill)
        change = control.queue.get(skill)
        if change is None or change.id != change_id:
            raise PromotionConflict(
                f"change {change_id or '(none given)'} is no longer the one waiting for {skill!r}: "
                "it was decided or replaced; go back to the review queue"
            )
        return page(request, "confirm.html", card=review_card.review(control, change))

    @app.post("/changes/{skill}/evaluate")
    def evaluate_change(skill: str, change_id: Annotated[str, Form()]) -> RedirectResponse:
        """Measure a pending change in the background (`ingot evaluate`); its log is a run page."""
        run = runs.start(skill, "evaluate", change_id)
        return RedirectResponse(f"/runs/{run.id}", status_code=303)

    @app.post("/changes/{skill}/approve")
    def approve(
        skill: str,
        change_id: Annotated[str, Form()],
        accept_missing: Annotated[str, Form()] = "",
        override_reason: Annotated[str, Form()] = "",
        accepting: Annotated[list[str] | None, Form()] = None,
        evidence_digest: Annotated[str, Form()] = "",
    ) -> RedirectResponse:
        check_skill_name(skill)
        with exclusive():  # missing cells need `accept_missing`, an overridable failure `override_reason`
            outcome = control.approve(  # pinned to the evidence and missing cells the confirmation showed
                skill,
                actor,
                change_id,
                accept_missing=accept_missing[:2000] or None,
                override_reason=override_reason[:2000] or None,
                accepting=accepting,
                evidence_digest=evidence_digest or None,
            )
        refresh(skill)
        done = "approved" if outcome.to_revision else "removed"  # an approved removal serves nothing
        return RedirectResponse(f"/review?done={done}&skill={skill}", status_code=303)

    @app.post("/changes/{skill}/reject")
    def reject(
        skill: str, change_id: Annotated[str, Form()], reason: Annotated[str, Form()] = ""
    ) -> RedirectResponse:
        check_skill_name(skill)
        if not reason.strip():
            raise ApprovalRefused("a rejection needs a reason; say why so the author can learn from it")
        with exclusive():
            control.reject(skill, reason.strip()[:2000], actor, change_id)
        return RedirectResponse(f"/review?done=rejected&skill={skill}", status_code=303)

    @app.get("/history", response_class=HTMLResponse)
    def history_index(request: Request) -> HTMLResponse:
        status = control.status()
        return page(request, "history_index.html", state=status, skills=status.skills)

    @app.get("/history/{skill}", response_class=HTMLResponse)
    def history(request: Request, skill: str, done: str | None = None) -> HTMLResponse:
        check_skill_name(skill)
        entries = timeline(control, skill)  # SkillNotFound (404) for a name nothing knows
        snapshots = control.snapshots(skill)
        live = control.live_revision(skill)
        lines = control.history(skill)
        aside = {f.change_id: f.status for f in fates(lines, skill).values() if f.status in SET_ASIDE}
        changes = lifecycle.for_skill(
            lines,
            lifecycle.bundle_paths(control.runs_dir, skill),
            control.thresholds,
            live,
            aside,
        )
        return page(
            request,
            "history.html",
            skill=skill,
            entries=entries,
            changes=changes,
            snapshots=snapshots,
            live=live,
            trust=control.autonomy.table(skill)[skill],
            streak_needed=control.autonomy.streak_needed,
            notice=NOTICES.get(done or ""),
        )

    @app.post("/history/{skill}/rollback")
    def rollback(
        skill: str, revision: Annotated[str, Form()], live: Annotated[str, Form()] = ""
    ) -> RedirectResponse:
        check_skill_name(skill)
        if not live:
            raise ApprovalRefused(
                "the rollback does not say which revision you saw live; reload the history page"
            )
        with exclusive():  # `live` pins the revision the page showed: replacing anything else is a conflict
            outcome = control.rollback(skill, revision, actor, "rollback from the UI", expected_live=live)
        refresh(skill)
        done = "removed" if outcome.to_revision is None else "rolled-back"
        return RedirectResponse(f"/history/{skill}?done={done}", status_code=303)

    @app.get("/evidence/{skill}/{bundle}", response_class=HTMLResponse)
    def evidence(request: Request, skill: str, bundle: str) -> HTMLResponse:
        check_skill_name(skill)
        folder = (control.runs_dir / "evidence" / skill / bundle).resolve()
        path = folder / "evidence.json"
        inside = folder.parent == (control.runs_dir / "evidence" / skill).resolve()
        if not inside or path.is_symlink() or not path.is_file():
            raise SkillNotFound(f"no evidence bundle {bundle!r} for {skill!r}")
        readable = folder / "EVIDENCE.md"
        rendered = None
        if readable.is_file() and not readable.is_symlink():
            rendered = markdown.render(readable.read_text(errors="replace"))
        text = path.read_text(errors="replace")
        return page(
            request,
            "evidence.html",
            skill=skill,
            bundle=bundle,
            text=text,
            rendered=rendered,
            decision=_approval_of(control, skill, path),
        )
