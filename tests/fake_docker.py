"""A fake Docker Engine API on a unix socket: enough of the real protocol for the `docker` SDK.

It answers version negotiation, ping, image inspect, container create / inspect / archive upload /
start / wait / logs (multiplexed stdout+stderr frames) / kill / delete and list with a label
filter, and records every request. It runs nothing: each test scripts what the "container"
does (exit code, output, OOM, hang until killed) and which calls the engine refuses. Real code
talks to it through the real SDK over a real socket; nothing is patched.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.loopback import QuietHandler, serving_unix

API = "1.45"


@dataclass
class Behaviour:
    """What the next containers do once started."""

    exit_code: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    oom_killed: bool = False
    hang: bool = False  # wait blocks until the container is killed
    refuse: dict[str, tuple[int, str]] = field(default_factory=dict)  # call -> (status, message)


@dataclass
class FakeContainer:
    id: str
    body: dict[str, Any]
    labels: dict[str, str]
    archives: dict[str, dict[str, tuple[bytes, int]]] = field(default_factory=dict)  # path -> files
    running: bool = False
    exited: threading.Event = field(default_factory=threading.Event)
    killed: bool = False
    exit_code: int = 0


class FakeEngine:
    def __init__(self, images: tuple[str, ...] = ("python:3.11-slim",)) -> None:
        self.images = set(images)
        self.containers: dict[str, FakeContainer] = {}
        self.behaviour = Behaviour()
        self.calls: list[tuple[str, str]] = []  # (method, path without the version prefix)
        self.removed: list[str] = []
        self.made: list[FakeContainer] = []  # every container created through the API, removed or not
        self.url = ""
        self._next = 0
        self._lock = threading.Lock()

    def add_container(self, labels: dict[str, str], running: bool = True) -> str:
        """A container someone else left behind (for the orphan tests)."""
        with self._lock:
            self._next += 1
            cid = f"{self._next:064x}"
        self.containers[cid] = FakeContainer(cid, {"Labels": labels}, labels, running=running)
        return cid

    def create(self, body: dict[str, Any]) -> FakeContainer:
        with self._lock:
            self._next += 1
            cid = f"{self._next:064x}"
        container = FakeContainer(cid, body, dict(body.get("Labels") or {}))
        self.containers[cid] = container
        self.made.append(container)
        return container

    def created(self) -> list[FakeContainer]:
        """Every container created through the API, including removed ones."""
        return list(self.made)

    def count(self, method: str, suffix: str) -> int:
        return sum(m == method and p.endswith(suffix) for m, p in self.calls)


def _files(tar_bytes: bytes) -> dict[str, tuple[bytes, int]]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        return {
            m.name: (tar.extractfile(m).read(), m.mode)  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def _frames(stream: int, data: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data if data else b""


def _handler(engine: FakeEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, payload: Any = None, raw: bytes | None = None, ctype: str = "") -> None:
            data = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
            self.send_response(status)
            if data or raw is not None:
                self.send_header("content-type", ctype or "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method: str) -> None:
            url = urlsplit(self.path)
            path = unquote(url.path).removeprefix(f"/v{API}")
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            engine.calls.append((method, path))
            refused = engine.behaviour.refuse.get(_call_name(method, path))
            if refused:
                self._send(refused[0], {"message": refused[1]})
                return
            if path == "/version":
                self._send(200, {"ApiVersion": API, "Version": "fake", "MinAPIVersion": "1.24"})
            elif path == "/_ping":
                self._send(200, raw=b"OK", ctype="text/plain")
            elif path.startswith("/images/") and path.endswith("/json"):
                name = path.removeprefix("/images/").removesuffix("/json")
                if name in engine.images:
                    self._send(200, {"Id": "sha256:" + "1" * 64, "RepoTags": [name]})
                else:
                    self._send(404, {"message": f"No such image: {name}"})
            elif path == "/containers/create":
                self._send(201, {"Id": engine.create(json.loads(body)).id, "Warnings": []})
            elif path == "/containers/json":
                wanted = json.loads(query.get("filters", "{}")).get("label", [])
                found = [c for c in engine.containers.values() if all(w in c.labels for w in wanted)]
                self._send(200, [{"Id": c.id, "Labels": c.labels, "State": "running"} for c in found])
            else:
                self._container(method, path, query, body)

        def _container(self, method: str, path: str, query: dict[str, str], body: bytes) -> None:
            parts = path.split("/")  # ['', 'containers', id, action?]
            container = engine.containers.get(parts[2]) if len(parts) > 2 else None
            if container is None:
                self._send(404, {"message": f"No such container: {path}"})
                return
            action = parts[3] if len(parts) > 3 else ""
            if method == "GET" and action == "json":
                self._send(200, _inspect(container, engine.behaviour))
            elif method == "PUT" and action == "archive":
                container.archives[query["path"]] = _files(body)
                self._send(200)
            elif action == "start":
                container.running = True
                if not engine.behaviour.hang:
                    container.exit_code = engine.behaviour.exit_code
                    container.running = False
                    container.exited.set()
                self._send(204)
            elif action == "wait":
                container.exited.wait(timeout=60)
                self._send(200, {"StatusCode": container.exit_code, "Error": None})
            elif action == "logs":
                out = _frames(1, engine.behaviour.stdout) if query.get("stdout") in ("1", "True") else b""
                err = _frames(2, engine.behaviour.stderr) if query.get("stderr") in ("1", "True") else b""
                self._send(200, raw=out + err, ctype="application/vnd.docker.multiplexed-stream")
            elif action == "kill":
                container.killed, container.running, container.exit_code = True, False, 137
                container.exited.set()
                self._send(204)
            elif method == "DELETE" and action == "":
                if container.running and query.get("force") not in ("1", "True", "true"):
                    self._send(409, {"message": "container is running: stop it or force-remove"})
                    return
                del engine.containers[container.id]
                engine.removed.append(container.id)
                container.exited.set()
                self._send(204)
            else:
                self._send(404, {"message": f"fake engine has no {method} {path}"})

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._route("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._route("POST")

        def do_PUT(self) -> None:  # noqa: N802
            self._route("PUT")

        def do_DELETE(self) -> None:  # noqa: N802
            self._route("DELETE")

        def do_HEAD(self) -> None:  # noqa: N802
            self._route("HEAD")

    return Handler


def _call_name(method: str, path: str) -> str:
    """ "create", "start", "archive", "wait", "kill", "delete", "ping", "image", "list"."""
    if path == "/_ping":
        return "ping"
    if path.startswith("/images/"):
        return "image"
    if path == "/containers/create":
        return "create"
    if path == "/containers/json":
        return "list"
    if method == "DELETE":
        return "delete"
    return path.rsplit("/", 1)[-1]


def _inspect(container: FakeContainer, behaviour: Behaviour) -> dict[str, Any]:
    return {
        "Id": container.id,
        "Name": f"/fake-{container.id[:6]}",
        "Config": {"Tty": False, "Labels": container.labels, "Image": container.body.get("Image")},
        "State": {
            "Running": container.running,
            "ExitCode": container.exit_code,
            "OOMKilled": behaviour.oom_killed,
        },
    }


@contextmanager
def fake_engine(**kwargs: Any) -> Iterator[FakeEngine]:
    """A FakeEngine on a socket in a fresh short temp folder (socket paths are capped at 107
    bytes, which pytest's tmp_path can exceed); `engine.url` is its unix:// URL."""
    engine = FakeEngine(**kwargs)
    with (
        tempfile.TemporaryDirectory(prefix="ingot-dk-") as tmp,
        serving_unix(_handler(engine), Path(tmp) / "docker.sock") as url,
    ):
        engine.url = url
        yield engine
