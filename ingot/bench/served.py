"""An `ingot serve --no-ui` child process on a free loopback port, for benchmarks over real MCP.

The child is the same binary and settings a user runs (the environment is passed through, with
a fresh state home whose vector cache is the benchmark's warmed one), so a number measured
through it is what an agent would see. Ready means: it answered one MCP call. Stopped with
SIGTERM, then waited for. The child serves the roots through links inside its throw-away home,
so the claim a state home leaves beside its roots is left there too, never beside the benchmarked
library (a claim naming a deleted home would refuse the next run).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fastmcp import Client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, deadline_s: float, process: subprocess.Popen | None = None) -> float:
    """Seconds until the server at `url` answers a route_and_load call."""
    start = time.perf_counter()

    async def ping() -> None:
        async with Client(url) as client:
            await client.call_tool("route_and_load", {"task": "ping"})

    while time.perf_counter() - start < deadline_s:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"`ingot serve` exited with code {process.returncode} before answering")
        try:
            asyncio.run(ping())
            return time.perf_counter() - start
        except Exception:  # not listening yet
            time.sleep(0.05)
    raise RuntimeError(f"server not ready within {deadline_s:.0f} s")


def bench_home(vectors: Path) -> Path:
    """A throw-away state home whose vector cache is the file at `vectors` (linked, so a child
    reads the cache the benchmark warmed and nothing is embedded twice)."""
    home = Path(tempfile.mkdtemp(prefix="ingot-bench-home-"))
    (home / "cache").mkdir()
    vectors.parent.mkdir(parents=True, exist_ok=True)
    (home / "cache" / "vectors.sqlite").symlink_to(vectors.absolute())
    return home


def served_roots(home: Path, skills: tuple[Path, ...], copy: bool = True) -> list[Path]:
    """The roots a child serves: copies inside `home` (default), or `skills` themselves. A copy,
    not a link: homes resolve real paths, so a link would put the child's claim beside the
    benchmarked root. The vector cache keys on content, so a copy re-embeds nothing."""
    if not copy:
        return list(skills)
    roots = []
    for n, root in enumerate(skills):
        roots.append(home / "roots" / str(n) / root.name)
        shutil.copytree(root, roots[-1], symlinks=True)
    return roots


@dataclass(frozen=True)
class Served:
    """A running child server."""

    url: str
    cold_start_s: float  # from spawning the process to its first answered MCP call
    pid: int


@contextmanager
def served(
    skills: tuple[Path, ...], vectors: Path, deadline_s: float = 900, copy: bool = True
) -> Iterator[Served]:
    """A child `ingot serve --no-ui` for `skills`, ready to answer, reading the vector cache at
    `vectors` through its own throw-away state home. `copy` (default) serves copies, so no claim
    is left beside a benchmarked library; without it the roots themselves are served (a caller's
    own temporary copy that it edits while the child serves it)."""
    port = free_port()
    home = bench_home(vectors)
    env = {**os.environ, "INGOT_HOME": str(home), "HF_HUB_OFFLINE": "1", "LOG_LEVEL": "WARNING"}
    command = [sys.executable, "-m", "ingot.cli", "serve", "--no-ui", "--mcp-port", str(port)]
    for root in served_roots(home, skills, copy):
        command += ["--skills", str(root)]
    log = home / "serve.log"
    with log.open("wb") as errors:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            ready = wait_ready(url, deadline_s, process)
        except RuntimeError as exc:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(f"{exc}: {' | '.join(tail) or 'it printed nothing'}") from None
        yield Served(url, ready, process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(home, ignore_errors=True)


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
