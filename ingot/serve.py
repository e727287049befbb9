"""Run the MCP server and the UI together in one process (two uvicorn servers, one event loop)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging

import uvicorn

from ingot.errors import ConfigError
from mcp_server.library import Library
from mcp_server.server import build_server
from mcp_server.sessions import SessionRoutes
from optimize.changes import ChangeControl

log = logging.getLogger(__name__)
JSON_RESPONSES = True


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def mcp_app(
    library: Library, host: str, allowed_hosts: tuple[str, ...], control: ChangeControl | None = None
):
    """The MCP ASGI app with strict Host/Origin checking (DNS-rebinding protection)."""
    hosts = ["127.0.0.1", "localhost", "[::1]", *allowed_hosts]
    if not is_loopback(host) and host not in ("0.0.0.0", "::"):  # noqa: S104 - a check, not a bind
        hosts.append(host)
    patterns = [p for h in hosts for p in (h, f"{h}:*")]
    sessions = SessionRoutes(control.runs_dir) if control is not None else None
    return build_server(library, control, sessions).http_app(
        path="/mcp",
        host_origin_protection=True,
        allowed_hosts=patterns,
        json_response=JSON_RESPONSES,
    )


async def _serve_all(servers: list[uvicorn.Server]) -> None:
    await asyncio.gather(*(s.serve() for s in servers))


def ui_app(library: Library, mcp_url: str, allowed_hosts: tuple[str, ...]):
    """The UI ASGI app, answering only to loopback and configured Host names."""
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    from ui.app import build_app

    app = build_app(library, mcp_url=mcp_url)
    app.add_middleware(
        TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost", "[::1]", *allowed_hosts]
    )
    return app


def serve(
    library: Library,
    control: ChangeControl | None,
    host: str,
    mcp_port: int | None,
    ui_port: int | None,
    allowed_hosts: tuple[str, ...] = (),
    watch: bool = True,
    log_level: str = "info",
) -> None:
    """Block serving MCP and/or the UI (a None port is not served) until interrupted."""
    if not is_loopback(host):
        if not allowed_hosts:
            raise ConfigError(
                f"refusing to bind {host}: Ingot has no authentication yet. Bind 127.0.0.1, or "
                "set ALLOWED_HOSTS to the host names clients use (e.g. in Docker, where the "
                "ports are published on 127.0.0.1 only)"
            )
        log.warning("bound to %s; make sure these ports are not reachable from other machines", host)
    servers = []
    if mcp_port is not None:
        servers.append(
            uvicorn.Server(
                uvicorn.Config(
                    mcp_app(library, host, allowed_hosts, control),
                    host=host,
                    port=mcp_port,
                    log_level=log_level,
                    lifespan="on",
                )
            )
        )
    if ui_port is not None:
        app = ui_app(library, f"http://{host}:{mcp_port or 8000}/mcp", allowed_hosts)
        servers.append(uvicorn.Server(uvicorn.Config(app, host=host, port=ui_port, log_level=log_level)))
    if watch:
        library.start_watching()
    try:
        asyncio.run(_serve_all(servers))
    finally:
        library.stop_watching()
