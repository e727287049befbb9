"""Shared fixtures: the real embedding model, skill folders on disk, and a real MCP server."""

from __future__ import annotations

import socket
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn

from mcp_server.embedding import CachedEmbedder, load_embedder
from mcp_server.library import Library

REPO = Path(__file__).resolve().parents[1]
BUNDLED_SKILLS = REPO / "skills"


def write_skill(
    root: Path,
    name: str,
    description: str,
    body: str = "# Steps\n\n1. Do the thing.\n",
    extra: str = "",
    files: dict[str, str | bytes] | None = None,
    folder: str | None = None,
) -> Path:
    """Write a SKILL.md (and optional extra files) under root/<folder or name>/."""
    path = root / (folder or name)
    path.mkdir(parents=True, exist_ok=True)
    front = f"---\nname: {name}\ndescription: {description!r}\n{extra}---\n"
    (path / "SKILL.md").write_text(front + textwrap.dedent(body))
    for rel, content in (files or {}).items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return path


@pytest.fixture(scope="session")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> CachedEmbedder:
    cache = tmp_path_factory.mktemp("vectors") / "vectors.sqlite"
    return load_embedder(None, None, cache, threads=2)


@pytest.fixture
def make_skill() -> Callable[..., Path]:
    return write_skill


@pytest.fixture
def library_factory(embedder: CachedEmbedder) -> Iterator[Callable[..., Library]]:
    made: list[Library] = []

    def make(*roots: Path, **kwargs) -> Library:
        library = Library(tuple(roots), embedder, **kwargs)
        library.reload()
        made.append(library)
        return library

    yield make
    for library in made:
        library.stop_watching()


def wait_for(condition: Callable[[], object], timeout: float = 10.0, interval: float = 0.02):
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def small_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's syntax: 512k, 4m) mounted at `folder`, for tests that fill a disk
    for real; unmounted afterwards. Mounting needs root: elsewhere the test is skipped, saying so
    (CI runs as root and mounts it)."""
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip()}); CI runs as root and can")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


@contextmanager
def running_asgi(app, lifespan: str = "on", log_level: str = "warning") -> Iterator[str]:
    """A real uvicorn server for `app` on a free loopback port; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level, lifespan=lifespan)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def running_mcp(
    library: Library, allowed_hosts: tuple[str, ...] = (), control=None, limits=None, queued=None
) -> Iterator[str]:
    """The real MCP app on a free loopback port; yields the /mcp URL."""
    from ingot.cli.serve import mcp_app

    with running_asgi(mcp_app(library, "127.0.0.1", allowed_hosts, control, limits, queued)) as base:
        yield f"{base}/mcp"


@pytest.fixture
def served_copy(tmp_path, library_factory):
    """The bundled skills copied to tmp, served over real MCP with change control: (url, library,
    control, root)."""
    import shutil

    from optimize.control.changes import ChangeControl

    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    library = library_factory(root)
    control = ChangeControl(tmp_path / "runs", (root,), neighbours=library.current)
    with running_mcp(library, control=control) as url:
        yield url, library, control, root
