"""Run the MCP server and the UI together in one process (two uvicorn servers, one event loop).

Bind rules: loopback by default. A non-loopback MCP bind needs ALLOWED_HOSTS (the Host names
clients use); a non-loopback UI bind needs an access token set by the operator. The UI always has
one (by default a random one kept in the state home, 0600), and every UI request needs the session
a sign-in with it sets: `ingot serve` prints a one-time sign-in link (`sign_in_link`).
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.middleware.body_limit import RequestBodyLimitMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import Route

from ingot import metrics_sources
from ingot.errors import ConfigError
from ingot.runtime import actor
from ingot.settings import Settings
from mcp_server.library import Library
from mcp_server.metrics import GaugeSource, Metrics
from mcp_server.server import ToolLimits, build_server
from mcp_server.sessions import SessionRoutes
from mcp_server.telemetry import instrument
from optimize.control.changes import ChangeControl
from ui.security import LoginLinks

log = logging.getLogger(__name__)
JSON_RESPONSES = True
# The largest MCP request body read: create_skill's 64 KB body and 1,024-character description,
# even fully JSON-escaped, fit several times over; a route_and_load task is at most 8,000 characters.
MCP_MAX_BODY_BYTES = 1 << 20


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def mcp_app(
    library: Library,
    host: str,
    allowed_hosts: tuple[str, ...],
    control: ChangeControl | None = None,
    limits: ToolLimits | None = None,
    queued: Callable[[str, str], None] | None = None,
    gauges: Sequence[GaugeSource] = (),
):
    """The MCP ASGI app with strict Host/Origin checking (DNS-rebinding protection), its tool calls
    traced (mcp_server/telemetry.py) and counted, and `/metrics` in Prometheus' text format
    (mcp_server/metrics.py: change control's gauges when it is given, and `gauges`)."""
    hosts = ["127.0.0.1", "localhost", "[::1]", *allowed_hosts]
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):  # noqa: S104 - a check, not a bind
        hosts.append(host)
    patterns = [p for h in hosts for p in (h, f"{h}:*")]
    sessions = SessionRoutes(control.runs_dir) if control is not None else None
    server = build_server(library, control, sessions, limits, queued)
    metrics = Metrics(library)
    if control is not None:
        metrics.add(metrics_sources.change_control(control))
    for source in gauges:
        metrics.add(source)
    server.middleware.insert(0, metrics.middleware())  # counts refused calls too
    instrument(server, "http")  # a no-op unless setup_telemetry installed an exporter
    app = server.http_app(
        path="/mcp",
        host_origin_protection=True,
        allowed_hosts=patterns,
        json_response=JSON_RESPONSES,
    )
    names = [h if h.startswith("[") else h.rsplit(":", 1)[0] for h in hosts]
    app.router.routes.append(Route("/metrics", TrustedHostMiddleware(metrics.app(), allowed_hosts=names)))
    # Refused before it is read into memory and parsed: no tool takes anything near this much.
    app.add_middleware(RequestBodyLimitMiddleware, max_body_size=MCP_MAX_BODY_BYTES)
    return app


async def _serve_all(servers: list[tuple[uvicorn.Server, socket.socket]]) -> None:
    await asyncio.gather(*(server.serve(sockets=[sock]) for server, sock in servers))


def listen(host: str, port: int, named: str) -> socket.socket:
    """A socket bound to host:port for one server, or one `ConfigError` line naming the flag or
    setting the port came from (`named`) when it cannot be had (in use, not allowed, no such
    address). Bound before anything is announced or loaded, so a taken port fails at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY only on connections whose socket
    # says it is TCP, and without it every MCP reply waited ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        what = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc.strerror})"
        raise ConfigError(
            f"port {port} on {host} {what} ({named}): stop what listens there, or choose another port"
        ) from exc
    return sock


TOKEN_FILE = "ui-token"  # noqa: S105 - the file's name: the UI's token in the state home
NO_MODELS = "this UI was started without model settings: set BASE_URL and the *_MODEL settings (.env.example)"


@dataclass(frozen=True)
class UIOptions:
    """What the review UI needs beyond the library and change control."""

    actor: str  # recorded in the audit log for decisions taken in the UI
    token: str | None = None  # what a sign-in needs; serving refuses a UI without one
    # One-time sign-in codes (ui/security.py); `ingot serve` prints a link with one.
    links: LoginLinks = field(default_factory=LoginLinks)
    token_file: Path | None = None  # where the token is kept, if in a file (said beside the link)
    runs_env: dict[str, str] | None = None  # environment for optimize runs (default: ours)
    traces: Any = None  # the trace store the Traces page lists (None: no page content)
    drafter: Callable[[Any], Any] | None = None  # the teacher drafting a blessed golden's criteria
    # Why each optimize pass cannot run (runtime.optimize_missing); by default none can.
    optimize: Mapping[str, str | None] = field(
        default_factory=lambda: dict.fromkeys(("body", "description"), NO_MODELS)
    )
    tasks_dir: Path | None = None  # eval task sets, for the skills page's counts


def tool_limits(settings: Settings) -> ToolLimits:
    """The MCP tools' limits from ALLOWED_CALLER_ROOTS and the CREATE_SKILL_* settings."""
    return ToolLimits(
        allowed_caller_roots=tuple(
            Path(os.path.realpath(r.expanduser())) for r in settings.allowed_caller_roots
        ),
        create_max_pending=settings.create_skill_max_pending,
        create_max_pending_total=settings.create_skill_max_pending_total,
        create_per_minute=settings.create_skill_per_minute,
        create_total_per_minute=settings.create_skill_per_minute_total,
    )


def ui_options(settings: Settings) -> UIOptions:
    """The review UI's actor name and access token: UI_ACCESS_TOKEN, else UI_ACCESS_TOKEN_FILE,
    else `ui-token` in the state home (created random and 0600 on first use)."""
    from ingot.runtime import state_home
    from ui.security import token_from_file

    token = settings.ui_access_token.get_secret_value() if settings.ui_access_token else None
    path = None
    if token is None:
        path = settings.ui_access_token_file or state_home(settings) / TOKEN_FILE
        new = not path.exists()
        try:
            token = token_from_file(path)
        except (OSError, ValueError) as exc:
            named = "UI_ACCESS_TOKEN_FILE" if settings.ui_access_token_file else "the UI's access token"
            raise ConfigError(f"{named}: {exc}") from exc
        if new and settings.ui_access_token_file is not None:
            # The one time it is shown: a container's first start has no other way to tell you.
            print(
                f"ingot: created the UI's access token in {path} (shown this once; the file keeps it): "
                f"{token}",
                file=sys.stderr,
                flush=True,
            )
    if len(token) < 16:
        raise ConfigError("UI_ACCESS_TOKEN must be at least 16 characters; use a long random string")
    from ingot.model_runtime import llm_client, optimize_missing, run_id, trace_store

    drafter = None
    if settings.teacher_model:
        from optimize.measure.golden_criteria import draft_review

        try:
            llm = llm_client(settings, run_id("ui-bless"))
        except ConfigError as exc:  # the UI still serves; blessing just drafts nothing
            log.warning("the teacher cannot draft criteria for blessed runs: %s", exc)
        else:
            drafter = lambda golden: draft_review(llm, golden)[0]  # noqa: E731
    return UIOptions(
        actor(settings),
        token,
        token_file=path,
        traces=trace_store(settings),
        drafter=drafter,
        optimize=optimize_missing(settings),
        tasks_dir=settings.tasks_dir,
    )


def ui_app(
    library: Library,
    control: ChangeControl,
    mcp_url: str,
    allowed_hosts: tuple[str, ...],
    options: UIOptions,
    bind_host: str = "127.0.0.1",
):
    """The UI ASGI app, answering only to loopback and configured Host names; every request
    needs the session a sign-in with `options.token` sets (`ConfigError` without a token)."""
    if not options.token:
        raise ConfigError(ui_bind_refusal(bind_host))
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    from ui.app import build_app
    from ui.runs import RunManager

    runs = RunManager(control.runs_dir, control.roots, options.runs_env, blocked=options.optimize)
    app = build_app(
        library,
        control,
        runs,
        mcp_url,
        f"{options.actor} (ui)",
        options.token,
        options.links,
        options.traces,
        options.drafter,
        options.tasks_dir,
    )
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=ui_hosts(bind_host, allowed_hosts))
    metrics = Metrics(library)  # `ingot ui` alone is a server too; behind the UI's own guard
    metrics.add(metrics_sources.change_control(control))
    app.router.routes.append(Route("/metrics", metrics.app()))
    return app


def ui_bind_refusal(host: str) -> str:
    """Why the UI is not served on `host`: no access token (on another address than loopback,
    one the operator set, not the state home's default)."""
    return (
        f"refusing to bind the UI on {host} without an access token: set UI_ACCESS_TOKEN, or "
        "UI_ACCESS_TOKEN_FILE (a token is generated there if the file does not exist)"
    )


def sign_in_link(host: str, port: int, options: UIOptions) -> str:
    """A one-time link that signs a browser in to the UI (what `ingot serve` prints): opened
    once, it sets the session cookie and redirects to the review queue; then it is dead."""
    if host in ("0.0.0.0", "::"):  # noqa: S104 - a check, not a bind
        host = "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/login/{options.links.issue()}"


def ui_hosts(bind_host: str, allowed_hosts: tuple[str, ...]) -> list[str]:
    """Host names the UI answers to: loopback, ALLOWED_HOSTS and a specific bind address.

    TrustedHostMiddleware matches names without their port, so ports in ALLOWED_HOSTS are dropped."""
    names = ["127.0.0.1", "localhost", "[::1]"]
    names += [h if h.startswith("[") else h.rsplit(":", 1)[0] for h in allowed_hosts]
    if bind_host not in ("0.0.0.0", "::"):  # noqa: S104 - a check, not a bind
        names.append(f"[{bind_host}]" if ":" in bind_host else bind_host)
    return list(dict.fromkeys(names))


def serve(
    library: Library,
    control: ChangeControl | None,
    host: str,
    mcp_port: int | None,
    ui_port: int | None,
    allowed_hosts: tuple[str, ...] = (),
    watch: bool = True,
    log_level: str = "info",
    ui: UIOptions | None = None,
    limits: ToolLimits | None = None,
    queued: Callable[[str, str], None] | None = None,
    sockets: Mapping[str, socket.socket] | None = None,
    gauges: Sequence[GaugeSource] = (),
) -> None:
    """Block serving MCP and/or the UI (a None port is not served) until interrupted.

    `sockets` ("mcp", "ui") are the ones `listen` bound for the CLI; any missing is bound here."""
    if ui_port is not None and (control is None or ui is None):
        raise ConfigError("the UI needs change control and its options")
    if ui_port is not None and not (ui and ui.token):
        raise ConfigError(ui_bind_refusal(host))
    if ui_port is not None and host in ("0.0.0.0", "::") and not allowed_hosts:  # noqa: S104
        log.warning("the UI answers only to loopback Host names; add the names clients use to ALLOWED_HOSTS")
    if mcp_port is not None and not is_loopback(host):
        if not allowed_hosts:
            raise ConfigError(
                f"refusing to bind MCP on {host}: the MCP server has no authentication. Bind 127.0.0.1, or "
                "set ALLOWED_HOSTS to the host names clients use (e.g. in Docker, where the "
                "ports are published on 127.0.0.1 only)"
            )
        log.warning("bound to %s; make sure these ports are not reachable from other machines", host)
    bound = dict(sockets or {})
    servers = []
    if mcp_port is not None:
        sock = bound.get("mcp") or listen(host, mcp_port, "MCP_PORT")
        app = mcp_app(library, host, allowed_hosts, control, limits, queued, gauges)
        config = uvicorn.Config(app, host=host, port=mcp_port, log_level=log_level, lifespan="on")
        servers.append((uvicorn.Server(config), sock))
    if ui_port is not None:
        assert control is not None and ui is not None
        sock = bound.get("ui") or listen(host, ui_port, "UI_PORT")
        app = ui_app(library, control, f"http://{host}:{mcp_port or 8000}/mcp", allowed_hosts, ui, host)
        servers.append(
            (uvicorn.Server(uvicorn.Config(app, host=host, port=ui_port, log_level=log_level)), sock)
        )
    if watch:
        library.start_watching()
    try:
        asyncio.run(_serve_all(servers))
    finally:
        library.stop_watching()
        for _, sock in servers:
            sock.close()
