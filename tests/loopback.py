"""Plain HTTP servers on loopback for tests: the fakes of outside services (model endpoint,
Langfuse, web search, a Docker Engine on a unix socket) and hostile pages are real servers on
127.0.0.1 or a socket in a temp folder, never patched clients."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that keeps test output free of per-request log lines."""

    def log_message(self, *args: Any) -> None:
        """Deliberately silent: failures surface as assertions, not access logs."""


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[Any, Any]:
        request, _ = super().get_request()
        return request, ("unix", 0)  # http.server expects a (host, port) client address


@contextmanager
def _running(server: socketserver.BaseServer) -> Iterator[socketserver.BaseServer]:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `handler` on a free loopback port (or `host`:`port`, for a container that other
    containers reach) in a thread; yields the base URL (no trailing /)."""
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    with _running(server):
        yield f"http://{host}:{server.server_address[1]}"


@contextmanager
def serving_unix(handler: type[BaseHTTPRequestHandler], path: Path) -> Iterator[str]:
    """Serve `handler` on a unix socket at `path` in a thread; yields its `unix://` URL."""
    with _running(_UnixHTTPServer(str(path), handler)):
        yield f"unix://{path}"
