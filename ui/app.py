"""The localhost review UI as one ASGI app: evidence first, then approve or reject; history,
rollback, library, runs, and traces (bless a run as a golden, review its criteria, retire it).

Server-rendered pages (Jinja2, autoescaped) with one small static script and stylesheet, so it
works offline with no build step. This module assembles the app and maps errors to HTTP: a refused
approval is 422, a second approval or rollback while one is in flight (or a change already
decided) is 409; an unknown page is a 404 page in the site's layout (API paths keep JSON
errors). The routes (review_routes.py, library_routes.py, trace_routes.py) decide through
the same `ChangeControl` methods as the CLI. The session every request needs (set by the one-time
sign-in link or the token at /login), same-origin checks and security headers live in
ui/security.py. Nothing here logs skill text, task text or reasons; uvicorn's
access log sees only paths and status codes.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException

from ingot import __version__
from ingot.errors import IngotError, NotFound
from mcp_server.library import Library
from optimize.control.changes import ApprovalRefused, ChangeControl
from optimize.control.goldens_admin import GoldenAdmin
from optimize.control.lock import PromotionConflict
from optimize.measure.goldens import Golden, GoldenError, Review
from optimize.models.traces import TraceStore
from ui import markdown, review_card
from ui import skills as skill_views
from ui.audit_page import add_audit_routes
from ui.header import header
from ui.library_routes import add_library_routes
from ui.review_routes import add_review_routes
from ui.runs import RunManager, RunNotFound, RunRefused
from ui.security import COOKIE, Guard, LoginLinks, session_value
from ui.site import Site
from ui.trace_routes import add_trace_routes

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
# Paths a program reads: their errors stay JSON (`{"detail": "Not Found"}`), never an HTML page.
MACHINE_PATHS = ("/api/", "/static/", "/metrics", "/healthz")


def wants_json(request: Request) -> bool:
    """A program's request (an API path, or JSON asked for and HTML not): errors answer in JSON."""
    accept = request.headers.get("accept", "")
    if request.url.path.startswith(MACHINE_PATHS):
        return True
    return "application/json" in accept and "text/html" not in accept


def build_app(
    library: Library,
    control: ChangeControl,
    runs: RunManager,
    mcp_url: str,
    actor: str,
    token: str,
    links: LoginLinks,
    traces: TraceStore | None = None,
    drafter: Callable[[Golden], Review] | None = None,
    tasks_dir: Path | None = None,
) -> FastAPI:
    """The UI as an ASGI app; every request needs the session a sign-in with `token`, or one of
    `links`' one-time codes, sets (see ui/security.py). `traces` feeds the Traces page; `drafter`
    (the teacher) drafts a blessed golden's criteria; `tasks_dir` holds the task sets the skill
    pages count."""
    app = FastAPI(title="Ingot", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.filters["component"] = skill_views.component_text
    templates.env.filters["until"] = review_card.until
    templates.env.filters["md"] = markdown.inline  # Ingot's own prose: `commands` render as code
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.add_middleware(Guard, token=token)
    site = Site(
        library,
        control,
        runs,
        GoldenAdmin(control),
        templates,
        mcp_url,
        actor,
        traces=traces,
        drafter=drafter,
        tasks_dir=tasks_dir,
    )
    page = site.page

    @app.exception_handler(IngotError)
    def ingot_error(request: Request, exc: IngotError) -> Response:
        status = next((code for kind, code in HTTP_STATUS if isinstance(exc, kind)), 400)
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"error": str(exc)}, status_code=status)
        return page(request, "error.html", status_code=status, message=str(exc), status=status)

    @app.exception_handler(HTTPException)
    def http_error(request: Request, exc: HTTPException) -> Response:
        # Unknown UI pages are a page in the site's layout with a way on; API paths stay JSON.
        if wants_json(request) or exc.status_code not in (404, 405):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
        path = request.url.path
        message = (
            f"No page at {path}."
            if exc.status_code == 404
            else f"{path} cannot be opened as a page: it only takes a form's submission."
        )
        status = exc.status_code
        response = page(request, "error.html", status_code=status, message=message, status=status)
        response.headers.update(exc.headers or {})  # a 405 keeps its Allow header
        return response

    @app.get("/")
    def index() -> RedirectResponse:
        return RedirectResponse("/review", status_code=303)

    @app.api_route("/healthz", methods=["GET", "HEAD"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    add_review_routes(app, site)
    add_library_routes(app, site)
    add_trace_routes(app, site)
    add_audit_routes(app, site)

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
        return page(request, "login.html", header=None, failed=None)

    @app.get("/login/{code}", response_model=None)
    def login_link(request: Request, code: str) -> Response:
        # A GET that signs in: the link is opened from a terminal, and works once.
        if not links.redeem(code):
            why = "That sign-in link was used already, or an earlier `ingot serve` printed it."
            return page(request, "login.html", header=None, failed=why, status_code=401)
        return signed_in()

    @app.post("/login", response_model=None)
    def login(request: Request, access_token: Annotated[str, Form()]) -> Response:
        if not hmac.compare_digest(access_token.strip().encode(), token.encode()):
            why = "That token is not right."
            return page(request, "login.html", header=None, failed=why, status_code=401)
        return signed_in()

    def signed_in() -> Response:
        response = RedirectResponse("/review", status_code=303)
        response.set_cookie(COOKIE, session_value(token), httponly=True, samesite="strict", path="/")
        return response

    return app
