"""The localhost review UI: evidence first, then approve or reject; history, rollback, library,
runs, and traces (bless a run as a golden, review its criteria, retire it).

Server-rendered pages (Jinja2, autoescaped) with one small static script and stylesheet, so it
works offline with no build step. Every decision goes through the same `ChangeControl` methods as
the CLI; this module only parses form fields and maps errors to HTTP: a refused approval is 422,
a second approval or rollback while one is in flight (or a change already decided) is 409.
Same-origin checks, the access token and security headers live in ui/security.py. Nothing here
logs skill text, task text or reasons; uvicorn's access log sees only paths and status codes.
"""

from __future__ import annotations

import hmac
import logging
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from ingot import __version__
from ingot.errors import IngotError, NotFound, SkillNotFound, did_you_mean
from mcp_server.library import Library
from mcp_server.policy import CallerContext
from optimize.control.changes import ApprovalRefused, ChangeControl
from optimize.control.goldens_admin import GoldenAdmin
from optimize.control.lock import PromotionConflict
from optimize.control.promote import check_skill_name
from optimize.control.status import Status
from optimize.measure.goldens import Golden, GoldenError, Review
from optimize.models.traces import TraceStore, find_trace
from ui import lifecycle, markdown, review_card
from ui import replay as replay_views
from ui import skills as skill_views
from ui.header import header
from ui.history import set_aside, timeline
from ui.queue import ordered
from ui.runs import RunManager, RunNotFound, RunRefused
from ui.security import COOKIE, Guard, session_value

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
# How a refusal reads over HTTP; anything else an IngotError says is a 400.
HTTP_STATUS: tuple[tuple[type[IngotError], int], ...] = (
    (PromotionConflict, 409),  # in flight elsewhere, already decided, or displaced since viewed
    (ApprovalRefused, 422),  # re-verification failed: blocked, stale, tampered
    (GoldenError, 422),  # a run that cannot be a golden, criteria that do not hold
    (RunRefused, 422),  # no model configured for that pass
    (NotFound, 404),
    (RunNotFound, 404),
)
NOTICES = {
    "approved": "Approved and promoted; the new revision is being served.",
    "rejected": "Rejected; the change is archived with your reason.",
    "rolled-back": "Rolled back; the selected revision is being served.",
    "removed": "Removed; the skill is no longer served. Its last revision is kept in the snapshots.",
    "blessed": "Blessed: the run is a golden. Review its criteria below; every change to the skill "
    "is replayed against it.",
    "criteria": "Criteria and world facts approved (recorded as yours in the audit chain).",
    "retired": "Retired: the golden is no longer replayed (kept on disk and in the audit chain).",
}
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")  # a skill name in a notice's link, nothing else
TRACE_ID = re.compile(r"^tr-[0-9a-f]{16}$")
GOLDEN_ID = re.compile(r"^g-[0-9a-f]{12}$")


def build_app(
    library: Library,
    control: ChangeControl,
    runs: RunManager,
    mcp_url: str,
    actor: str,
    token: str | None = None,
    traces: TraceStore | None = None,
    drafter: Callable[[Golden], Review] | None = None,
    tasks_dir: Path | None = None,
) -> FastAPI:
    """The UI as an ASGI app; with `token`, every request must carry it (see ui/security.py).
    `traces` feeds the Traces page; `drafter` (the teacher) drafts a blessed golden's criteria;
    `tasks_dir` holds the task sets the skill pages count."""
    app = FastAPI(title="Ingot", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.filters["component"] = skill_views.component_text
    templates.env.filters["until"] = review_card.until
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.add_middleware(Guard, token=token)
    in_flight = threading.Lock()  # one approve / reject / rollback at a time in this process
    admin = GoldenAdmin(control)

    @contextmanager
    def exclusive() -> Iterator[None]:
        if not in_flight.acquire(blocking=False):
            raise PromotionConflict("another approval or rollback is in progress; retry when it finishes")
        try:
            yield
        finally:
            in_flight.release()

    def page(
        request: Request, name: str, status_code: int = 200, state: Status | None = None, **values: Any
    ) -> HTMLResponse:
        if "header" not in values:
            try:
                values["header"] = header(state or control.status())
            except (IngotError, OSError) as exc:  # never let the header take a page (or an error) down
                log.warning("cannot build the status header: %s", type(exc).__name__)
                values["header"] = None
        return templates.TemplateResponse(
            request,
            name,
            {"version": __version__, "mcp_url": mcp_url, **values},
            status_code=status_code,
        )

    def refresh(skill: str) -> None:
        # Serve the new revision (or stop serving a removed skill) now, not at the watcher's next event.
        library.reload([root / skill for root in control.roots])

    @app.exception_handler(IngotError)
    def ingot_error(request: Request, exc: IngotError) -> Response:
        status = next((code for kind, code in HTTP_STATUS if isinstance(exc, kind)), 400)
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"error": str(exc)}, status_code=status)
        return page(request, "error.html", status_code=status, message=str(exc), status=status)

    @app.get("/")
    def index() -> RedirectResponse:
        return RedirectResponse("/review", status_code=303)

    @app.api_route("/healthz", methods=["GET", "HEAD"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

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
        reason: Annotated[str, Form()] = "",
        override_reason: Annotated[str, Form()] = "",
    ) -> RedirectResponse:
        check_skill_name(skill)
        with exclusive():  # a replay WARN needs `reason`, a BLOCK `override_reason` (approve checks)
            control.approve(
                skill,
                actor,
                change_id,
                reason=reason[:2000] or None,
                override_reason=override_reason[:2000] or None,
            )
        refresh(skill)
        return RedirectResponse(f"/review?done=approved&skill={skill}", status_code=303)

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
        changes = lifecycle.for_skill(
            control.history(skill), lifecycle.bundle_paths(control.runs_dir, skill), control.thresholds, live
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
        return page(request, "evidence.html", skill=skill, bundle=bundle, text=text, rendered=rendered)

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

    @app.get("/api/status")
    def api_status() -> dict[str, Any]:
        head = header(control.status())
        return {
            "skills": {n: s.revision for n, s in library.skills().items()},
            "pending": head.pending,
            "drifted": list(head.drifted),
            "audit": {"ok": head.audit_ok, "head": head.audit_head, "bad_line": head.audit_bad_line},
        }

    @app.get("/login", response_class=HTMLResponse)
    def login_form(request: Request) -> HTMLResponse:
        return page(request, "login.html", header=None, failed=False)

    @app.post("/login", response_model=None)
    def login(request: Request, access_token: Annotated[str, Form()]) -> Response:
        if token is None:
            return RedirectResponse("/review", status_code=303)
        if not hmac.compare_digest(access_token.strip().encode(), token.encode()):
            return page(request, "login.html", header=None, failed=True, status_code=401)
        response = RedirectResponse("/review", status_code=303)
        response.set_cookie(COOKIE, session_value(token), httponly=True, samesite="strict", path="/")
        return response

    return app


def _library_values(library: Library, status: Status) -> dict[str, Any]:
    managed = {s.name: s for s in status.skills}
    served = library.skills()
    skills = sorted(served.values(), key=lambda s: s.name)
    # Skills Ingot put live that are no longer served (deleted or broken on disk): drifted. One
    # Ingot removed itself (rolled back to absent) is not missing; its history lists it.
    missing = [s for name, s in sorted(managed.items()) if name not in served and not s.removed]
    return {"skills": skills, "managed": managed, "missing": missing, "problems": library.status().invalid}
