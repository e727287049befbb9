"""The Traces page and goldens: bless a recorded run as a golden, approve its criteria and world
facts, retire it.

Ids from the URL are checked against their exact shapes before anything is looked up; who did
what is recorded by change control (optimize/control/goldens_admin.py), not here. Without a
trace store the page says tracing is off; without a teacher a blessed golden has no draft.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from ingot.errors import SkillNotFound
from optimize.control.promote import check_skill_name
from optimize.models.traces import find_trace
from ui import replay as replay_views
from ui.site import NOTICES, Site

TRACE_ID = re.compile(r"^tr-[0-9a-f]{16}$")
GOLDEN_ID = re.compile(r"^g-[0-9a-f]{12}$")


def add_trace_routes(app: FastAPI, site: Site) -> None:
    traces, drafter, admin, actor, page = site.traces, site.drafter, site.admin, site.actor, site.page

    @app.get("/traces", response_class=HTMLResponse)
    def traces_page(request: Request, skill: str | None = None, done: str | None = None) -> HTMLResponse:
        if skill:
            check_skill_name(skill)
        records = traces.read().records if traces is not None else ()
        goldens, problems = admin.store.all()
        shown = [r for r in records if not skill or r.skill == skill]
        return page(
            request,
            "traces.html",
            skill=skill,
            skills=sorted({r.skill for r in records if r.skill} | {g.golden.skill for g in goldens}),
            rows=replay_views.trace_rows(shown, goldens),
            goldens=replay_views.golden_rows([g for g in goldens if not skill or g.golden.skill == skill]),
            problems=problems,
            tracing=traces is not None,
            drafting=drafter is not None,
            notice=NOTICES.get(done or ""),
        )

    @app.post("/traces/{trace_id}/bless")
    def bless(trace_id: str) -> RedirectResponse:
        record = find_trace(traces, trace_id) if traces is not None and TRACE_ID.match(trace_id) else None
        if record is None:
            raise SkillNotFound(f"no recorded run {trace_id!r}")
        stored, _ = admin.bless(record, actor, drafter)
        return RedirectResponse(
            f"/traces?skill={stored.golden.skill}&done=blessed#{stored.id}", status_code=303
        )

    @app.post("/goldens/{golden_id}/approve")
    def approve_golden(
        golden_id: str, criteria: Annotated[str, Form()] = "", facts: Annotated[str, Form()] = ""
    ) -> RedirectResponse:
        if not GOLDEN_ID.match(golden_id):
            raise SkillNotFound(f"no golden {golden_id!r}")
        lines = [line for line in criteria.splitlines() if line.strip()]
        stored = admin.approve(golden_id, actor, lines, replay_views.parse_facts(facts))
        return RedirectResponse(
            f"/traces?skill={stored.golden.skill}&done=criteria#{stored.id}", status_code=303
        )

    @app.post("/goldens/{golden_id}/retire")
    def retire_golden(golden_id: str, reason: Annotated[str, Form()] = "") -> RedirectResponse:
        if not GOLDEN_ID.match(golden_id):
            raise SkillNotFound(f"no golden {golden_id!r}")
        stored = admin.retire(golden_id, actor, reason[:2000])
        return RedirectResponse(
            f"/traces?skill={stored.golden.skill}&done=retired#{stored.id}", status_code=303
        )
