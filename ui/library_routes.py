"""The library, skill pages and background runs: what is served, how a task routes, and the
optimize and evaluate runs started from the UI.

Read-only over the served library, except starting and stopping runs (ui/runs.py). The Library
filters by GET query parameters (library_view.py), so every filtered view has a URL and needs no
script; each skill links to its revision list (revisions.py). A skill name that nothing serves is
a 404 naming the nearest served skills; "Try routing" asks as `ingot
route` does by default, as a caller on this machine's platform.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Annotated, Any

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from ingot.errors import SkillNotFound, did_you_mean
from mcp_server.library import Library
from mcp_server.policy import CallerContext
from mcp_server.router import check_task
from optimize.control.audit import AuditError
from optimize.control.autopilot import change_passport
from optimize.control.changes import ChangeControl
from optimize.control.promote import check_skill_name
from optimize.control.status import SkillStatus, Status
from ui import library_view
from ui import revisions as revision_views
from ui import skills as skill_views
from ui.library_view import Filters
from ui.site import Site


def add_library_routes(app: FastAPI, site: Site) -> None:
    library, control, runs, admin, page = site.library, site.control, site.runs, site.admin, site.page
    tasks_dir = site.tasks_dir

    def skill_rows(status: Status, names: list[str]) -> dict[str, skill_views.Row]:
        managed = {s.name: s for s in status.skills}
        stored, _ = admin.store.all()
        goldens = Counter(g.golden.skill for g in stored if g.review.state == "active")
        served = library.skills()
        return {
            name: skill_views.row(served[name], managed.get(name), control.runs_dir, tasks_dir, goldens)
            for name in names
            if name in served
        }

    # Each waiting change's passport state, kept by what it is computed from (its evidence file as
    # it is now, and the live revision it is judged against): ~4 ms a change, on every view.
    verdicts: dict[tuple[object, ...], str] = {}

    def change_states(status: Status) -> dict[str, str]:
        live = {s.name: s.live_revision for s in status.skills}
        states = {}
        for change in control.queue.scan()[0]:  # a damaged record is left out: listed as blocked
            try:
                info = (control.runs_dir / (change.evidence_path or "")).stat()
                stamp: tuple[int, int] | None = (info.st_size, info.st_mtime_ns)
            except OSError:
                stamp = None
            key = (change.id, change.evidence_digest, live.get(change.skill), stamp)
            if key not in verdicts:
                verdicts[key] = change_passport(control, change).state  # the review card's verdict
            states[change.skill] = verdicts[key]
        return states

    def library_values(status: Status, filters: Filters | None = None) -> dict[str, Any]:
        filters = filters or Filters()
        values = _library_values(library, status)
        listed = library_view.entries(
            library.skills(),
            values["missing"],
            values["managed"],
            change_states(status),
            {
                name: {cls: trust.level for cls, trust in classes.items()}
                for name, classes in control.autonomy.table().items()
            },
            _revision_counts(control, library, values["missing"]),
        )
        shown = [e for e in listed if filters.matches(e)]
        return {
            "entries": shown,
            "rows": skill_rows(status, [e.name for e in shown]),  # only what is shown is counted
            "total": len(listed),
            "filters": filters,
            "choices": {
                "state": library_view.STATE_CHOICES,
                "pending": library_view.PENDING_CHOICES,
                "autonomy": library_view.LEVELS,
            },
            "meanings": library_view.STATE_MEANING,
            "blocked": runs.blocked,
            **values,
        }

    @app.get("/skills")
    def skills_index() -> RedirectResponse:
        return RedirectResponse("/library", status_code=303)  # every skill is listed there

    @app.get("/library", response_class=HTMLResponse)
    def library_page(
        request: Request,
        name: str | None = None,
        state: str | None = None,
        pending: str | None = None,
        autonomy: str | None = None,
    ) -> HTMLResponse:
        filters = Filters.parse(name, state, pending, autonomy)  # a bad value: one line naming the choices
        status = control.status()
        return page(request, "library.html", state=status, **library_values(status, filters))

    @app.post("/library/route", response_class=HTMLResponse)
    def try_routing(request: Request, task: Annotated[str, Form()]) -> HTMLResponse:
        task = check_task(task.strip())  # MCP's and `ingot route`'s limit, and their refusal
        status = control.status()
        # As `ingot route` asks by default: a caller on this machine's platform.
        context = CallerContext(platform=sys.platform)
        return page(
            request,
            "library.html",
            state=status,
            task=task,
            platform=sys.platform,
            result=library.route(task, context),
            **library_values(status),
        )

    @app.get("/skills/{skill}", response_class=HTMLResponse)
    def skill_page(request: Request, skill: str) -> HTMLResponse:
        check_skill_name(skill)
        if skill not in library.skills():  # 404, naming the nearest served skills
            raise SkillNotFound(
                f"no skill named {skill!r} is served{did_you_mean(skill, library.skills())}; "
                "the Library lists them"
            )
        served = library.get(skill)
        status = control.status()
        managed = {s.name: s for s in status.skills}
        stored, _ = admin.store.all()
        goldens = Counter(g.golden.skill for g in stored if g.review.state == "active")
        info = skill_views.page(
            skill_views.row(served, managed.get(skill), control.runs_dir, tasks_dir, goldens)
        )
        busy = [r for r in runs.list() if r.skill == skill and r.status in ("running", "stopping")]
        try:
            revisions: int | None = len(revision_views.revisions(control.history(skill), served.revision))
        except AuditError:  # an unreadable chain must not take the skill page down
            revisions = None
        return page(
            request,
            "skill.html",
            state=status,
            info=info,
            revisions=revisions,
            blocked=runs.blocked,
            busy=busy[0] if busy else None,
        )

    @app.get("/skills/{skill}/revisions", response_class=HTMLResponse)
    def revisions_page(request: Request, skill: str) -> HTMLResponse:
        check_skill_name(skill)
        entries = control.history(skill)  # SkillNotFound (404, the nearest names) for a name nothing knows
        live = control.live_revision(skill)
        listed = revision_views.revisions(entries, live, set(control.snapshots(skill)))
        waiting = control.queue.get(skill)
        return page(
            request,
            "revisions.html",
            skill=skill,
            revisions=listed,
            live=live,
            served=skill in library.skills(),
            waiting=waiting,
        )

    @app.get("/runs", response_class=HTMLResponse)
    def runs_page(request: Request) -> HTMLResponse:
        return page(
            request, "runs.html", runs=runs.list(), skills=sorted(library.skills()), blocked=runs.blocked
        )

    @app.post("/runs")
    def start_run(skill: Annotated[str, Form()], mode: Annotated[str, Form()] = "body") -> RedirectResponse:
        library.get(skill)  # SkillNotFound for anything not served
        run = runs.start(skill, mode)
        return RedirectResponse(f"/runs/{run.id}", status_code=303)

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(request: Request, run_id: str) -> HTMLResponse:
        run = runs.get(run_id)
        output, progress = runs.output(run_id)
        return page(request, "run.html", run=run, output=output, progress=progress)

    @app.get("/api/runs/{run_id}")
    def run_api(run_id: str) -> dict[str, Any]:
        run = runs.get(run_id)
        output, progress = runs.output(run_id)
        return {
            "status": run.status,
            "exit_code": run.exit_code,
            "progress": None if progress is None else progress.__dict__ | {"percent": progress.percent},
            "log": output,
        }

    @app.post("/runs/{run_id}/stop")
    def stop_run(run_id: str) -> RedirectResponse:
        runs.stop(run_id)
        return RedirectResponse(f"/runs/{run_id}", status_code=303)


def _revision_counts(
    control: ChangeControl, library: Library, missing: list[SkillStatus]
) -> dict[str, int] | None:
    """Each listed skill's revision count, from one pass over the chain (None: it cannot be read)."""
    live: dict[str, str | None] = {name: s.revision for name, s in library.skills().items()}
    live |= {s.name: s.live_revision for s in missing}
    try:
        return revision_views.counts(control.audit.entries(), live)
    except AuditError:
        return None


def _library_values(library: Library, status: Status) -> dict[str, Any]:
    managed = {s.name: s for s in status.skills}
    served = library.skills()
    skills = sorted(served.values(), key=lambda s: s.name)
    # Skills Ingot put live that are no longer served (deleted or broken on disk): drifted. One
    # Ingot removed itself (rolled back to absent) is not missing; its history lists it.
    missing = [s for name, s in sorted(managed.items()) if name not in served and not s.removed]
    return {"skills": skills, "managed": managed, "missing": missing, "problems": library.status().invalid}
