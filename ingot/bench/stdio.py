"""`ingot bench stdio`: what a host sees when it launches `ingot mcp`, next to its floors.

For each library (the configured one, then synthetic ones of `sizes` skills), vector cache warm:
- cold_start_s: from spawning `ingot mcp` through the official mcp SDK's stdio client (as Claude
  Code or Cursor do) to the first `route_and_load` answer; median of `launches` launches on one
  state home (a first, untimed launch creates it, as a host's first launch does). The floor is
  the same measurement of a one-tool fastmcp server (Python, fastmcp's import and the stdio
  handshake, nothing of Ingot's), taken in the same run: `cold_start_over_floor` is the ratio.
- route_and_load_ms over stdio and over streamable HTTP: one `ingot mcp` and one `ingot serve
  --no-ui` on copies of the same library and the same vector cache, both through the mcp SDK's
  `Client`, calls alternated between the two lanes so that load on this machine falls on both;
  each lane's `get_skill` (a round trip that does no routing work) is its floor.
Tasks come from ingot/bench/workload.py: distinct per measurement, so no timing is a query-cache
hit. Prints JSON; medians and ratios, never one run.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from mcp import StdioServerParameters
from mcp.client import Client
from mcp.client.stdio import stdio_client

from ingot.bench.percentiles import percentiles
from ingot.bench.served import bench_home, served, served_roots
from ingot.bench.workload import queries, write_library
from ingot.errors import ConfigError
from ingot.progress import OnStep, Steps
from ingot.settings import Settings
from mcp_server.embedding import load_embedder
from mcp_server.library import Library

FLOOR_SERVER = """
from fastmcp import FastMCP
server = FastMCP("floor")

@server.tool
def route_and_load(task: str) -> dict:
    \"\"\"Answer at once: the floor does no work.\"\"\"
    return {"match": None}

server.run(transport="stdio", show_banner=False)
"""


def _stdio(command: list[str], env: dict[str, str]) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=command[1:], env=env)


def _ingot_mcp(home: Path, roots: list[Path]) -> StdioServerParameters:
    env = {
        "INGOT_HOME": str(home),
        "SKILLS_DIRS": os.pathsep.join(map(str, roots)),
        "HF_HUB_OFFLINE": "1",
        "GIT_HISTORY": "false",
        "LOG_LEVEL": "WARNING",
    }
    return _stdio([sys.executable, "-m", "ingot.cli", "mcp"], env)


async def _first_answer(server: StdioServerParameters, task: str, errlog: TextIO) -> float:
    """Seconds from spawning `server` to its first route_and_load answer."""
    start = time.perf_counter()
    async with Client(stdio_client(server, errlog=errlog)) as client:
        result = await client.call_tool("route_and_load", {"task": task})
        took = time.perf_counter() - start
    if result.is_error:
        raise ConfigError(f"the stdio server answered route_and_load with an error: {result.content}")
    return took


def _cold_starts(server: StdioServerParameters, launches: int, seed: int, errlog: TextIO) -> list[float]:
    tasks = queries(launches + 1, seed)
    asyncio.run(_first_answer(server, tasks[0], errlog))  # creates the state home; not timed
    return [asyncio.run(_first_answer(server, task, errlog)) for task in tasks[1:]]


async def _lanes(
    stdio: StdioServerParameters, url: str, skill: str, calls: int, errlog: TextIO
) -> dict[str, object]:
    """route_and_load and get_skill latency on both lanes, calls alternated between them."""
    timed: dict[str, list[float]] = {"stdio": [], "http": [], "stdio_get": [], "http_get": []}
    async with Client(stdio_client(stdio, errlog=errlog)) as over_stdio, Client(url) as over_http:
        lanes = {"stdio": over_stdio, "http": over_http}
        floor_args = {"name": skill}
        for lane, seed in (("stdio", 102), ("http", 103)):  # warm-up, on tasks never timed
            for task in queries(5, seed):
                await lanes[lane].call_tool("route_and_load", {"task": task})
        for stdio_task, http_task in zip(queries(calls, 2), queries(calls, 3), strict=True):
            for lane, task in (("stdio", stdio_task), ("http", http_task)):
                client = lanes[lane]
                start = time.perf_counter()
                if (await client.call_tool("get_skill", floor_args)).is_error:
                    raise ConfigError(f"get_skill {skill} failed over {lane}: the floor measures nothing")
                timed[f"{lane}_get"].append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                await client.call_tool("route_and_load", {"task": task})
                timed[lane].append((time.perf_counter() - start) * 1000)
    stdio_p50, http_p50 = statistics.median(timed["stdio"]), statistics.median(timed["http"])
    return {
        "calls_per_lane": calls,
        "stdio": percentiles(timed["stdio"]),
        "http": percentiles(timed["http"]),
        "floors": {
            "stdio_get_skill": percentiles(timed["stdio_get"]),
            "http_get_skill": percentiles(timed["http_get"]),
        },
        "stdio_over_http_p50": round(stdio_p50 / http_p50, 2),
    }


def _measure(label: str, root: Path, vectors: Path, launches: int, calls: int, floor: dict) -> dict:
    embedder = load_embedder(None, None, vectors, threads=2)
    library = Library((root,), embedder)
    library.reload()  # warms the vector cache both lanes read
    skills = library.status().skills
    first = sorted(library.skills())[0]
    del library, embedder
    home = bench_home(vectors)
    try:
        roots = served_roots(home, (root,))
        with (home / "mcp.log").open("w") as errlog:
            starts = _cold_starts(_ingot_mcp(home, roots), launches, 4, errlog)
            with served((root,), vectors) as http:
                lanes = asyncio.run(_lanes(_ingot_mcp(home, roots), http.url, first, calls, errlog))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    median = statistics.median(starts)
    return {
        "library": label,
        "skills": skills,
        "cold_start_s": {
            "median": round(median, 2),
            "min": round(min(starts), 2),
            "max": round(max(starts), 2),
            "launches": len(starts),
        },
        "cold_start_over_floor": round(median / floor["median"], 1),
        "route_and_load_ms": lanes,
    }


def run(
    settings: Settings, sizes: list[int], launches: int, calls: int, on_step: OnStep | None = None
) -> dict:
    """Cold start and per-call latency of `ingot mcp` on the configured library and on each size;
    each library reported to `on_step` as it starts."""
    if launches < 1 or calls < 5:
        raise ConfigError("--launches must be at least 1 and --calls at least 5")
    roots = settings.skills_dirs[:1]
    names = [f"the library at {r}" for r in roots] + [f"library of {n} skills" for n in sizes]
    steps = Steps(["a bare server", *names], on_step)
    steps.begin("a bare server")
    vectors = Path(tempfile.gettempdir()) / "ingot-bench" / "cache" / "vectors.sqlite"  # kept between runs
    vectors.parent.mkdir(parents=True, exist_ok=True)
    with open(os.devnull, "w") as quiet:
        floor_starts = _cold_starts(_stdio([sys.executable, "-c", FLOOR_SERVER], {}), launches, 0, quiet)
    floor = {"median": statistics.median(floor_starts), "launches": len(floor_starts)}
    results = []
    for root in roots:
        steps.begin(f"the library at {root}")
        results.append(_measure(str(root), root, vectors, launches, calls, floor))
    for size in sizes:
        steps.begin(f"library of {size} skills")
        folder = Path(tempfile.mkdtemp(prefix=f"ingot-bench-stdio-{size}-"))
        try:
            write_library(folder / "skills", size)
            results.append(
                _measure(f"synthetic, {size} skills", folder / "skills", vectors, launches, calls, floor)
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "floor_cold_start_s": {"median": round(floor["median"], 2), "launches": floor["launches"]},
        "results": results,
    }
