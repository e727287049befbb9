"""The library, skill pages and background runs: what is served, how a task routes, and the
optimize and evaluate runs started from the UI.

Read-only over the served library, except starting and stopping runs (ui/runs.py). A skill name
that nothing serves is a 404 naming the nearest served skills; "Try routing" asks as `ingot
route` does by default, as a caller on this machine's platform.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Annotated, Any

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from ingot.errors import IngotError, SkillNotFound, did_you_mean
from mcp_server.library import Library
from mcp_server.policy import CallerContext
from optimize.control.promote import check_skill_name
from optimize.control.status import Status
from ui import skills as skill_views
from ui.site import Site


def add_library_routes(app: FastAPI, site: Site) -> None:
    library, control, runs, admin, page = site.library, site.control, site.runs, site.admin, site.page
    tasks_dir = site.tasks_dir

    def skill_rows(status: Status) -> list[skill_views.Row]:
        managed = {s.name: s for s in status.skills}
        stored, _ = admin.store.all()
        goldens = Counter(g.golden.skill for g in stored if g.review.state == "active")
        return [
            skill_views.row(skill, managed.get(skill.name), control.runs_dir, tasks_dir, goldens)
            for skill in sorted(library.skills().values(), key=lambda s: s.name)
        ]

    def library_values(status: Status) -> dict[str, Any]:
        return {
            "rows": skill_rows(status),
            "blocked": runs.blocked,
            **_library_values(library, status),
        }

    @app.get("/skills")
    def skills_index() -> RedirectResponse:
        return RedirectResponse("/library", status_code=303)  # every skill is listed there

    @app.get("/library", response_class=HTMLResponse)
    def library_page(request: Request) -> HTMLResponse:
        status = control.status()
        return page(request, "library.html", state=status, **library_values(status))

    @app.post("/library/route", response_class=HTMLResponse)
    def try_routing(request: Request, task: Annotated[str, Form()]) -> HTMLResponse:
        task = task.strip()
        if not task or len(task) > 4000:
            raise IngotError("type a task of 1 to 4000 characters to see how it routes")
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
        return page(
            request,
            "skill.html",
            state=status,
            info=info,
            blocked=runs.blocked,
            busy=busy[0] if busy else None,
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


def _library_values(library: Library, status: Status) -> dict[str, Any]:
    managed = {s.name: s for s in status.skills}
    served = library.skills()
    skills = sorted(served.values(), key=lambda s: s.name)
    # Skills Ingot put live that are no longer served (deleted or broken on disk): drifted. One
    # Ingot removed itself (rolled back to absent) is not missing; its history lists it.
    missing = [s for name, s in sorted(managed.items()) if name not in served and not s.removed]
    return {"skills": skills, "managed": managed, "missing": missing, "problems": library.status().invalid}
