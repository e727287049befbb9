"""`ingot bench latency`: serving speed on synthetic libraries of 1k and 10k skills, next to its floors.

For each size it writes a deterministic synthetic library to a temporary folder, then measures:
- index_build_s: building the router index and its calibration in this process (vectors cached).
- route_ms: in-process `route` p50/p95 over generated tasks of realistic length (~25 tokens).
- mcp_route_and_load_ms: `route_and_load` round trip p50/p95 to an `ingot serve` child process on
  loopback, from fastmcp's client and from the official mcp SDK's client (one session each).
- floors, measured in the same run: `query_embedding_ms` (embedding one new task, nothing else,
  in this process; `query_embedding_in_server_ms` is the server's own timing of it) and
  `mcp_get_skill_ms` (a round trip that does no routing work). `overhead_ms` is route_and_load
  p50 minus the two floors' p50s: what routing and calibration add (goal: <= 2 ms at 1k, <= 5 ms
  at 10k). `overhead_paired_ms` estimates the same per call (route_and_load minus the get_skill
  timed just before it minus that call's embedding), so load that comes and goes between the
  separately timed series cancels out.
- cold_start_s: from spawning `ingot serve` to its first answered MCP call, vector cache warm.
- edit_to_served_ms: from rewriting one SKILL.md to `get_skill` returning the new revision,
  median of several edits (the server's file watcher does the work; polled every 5 ms).
- server_rss_mb / server_peak_rss_mb: the serving process's resident memory after the run.
With `--skills DIR --cases FILE` the same measurements run on a copy of that library instead,
timed with the distinct tasks of its cases, each measurement its own block of them
(`queries_per_measurement` tells how many that leaves).
`embedding_backends` compares one query's embedding through onnxruntime directly (the default)
and through fastembed (when installed) on the same tasks. Vectors are cached under
<tmp>/ingot-bench/cache/vectors.sqlite, so only the first run per size pays for embedding.
Prints JSON; medians, not single runs.
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

import psutil
from fastmcp import Client

from ingot.bench.percentiles import percentiles
from ingot.bench.served import peak_rss_mb, served
from ingot.bench.workload import TaskSource, case_tasks, queries, write_library
from ingot.errors import ConfigError, IngotError
from ingot.progress import OnStep, Steps
from ingot.runtime import one_blas_thread
from ingot.settings import Settings
from mcp_server.embedding import CachedEmbedder, load_embedder
from mcp_server.library import Library


async def _round_trips(url: str, count: int, tasks: TaskSource) -> dict[str, object]:
    """route_and_load latency from both client libraries, one session each, distinct tasks.

    The fastmcp session interleaves each route_and_load with a `get_skill` call (the protocol
    floor: a round trip that does no routing work) and reads the server's own timing of that
    call's query embedding, so `paired` gets one overhead sample per call, taken under the same
    load as its floors: on a shared machine the load moves between separately timed series."""
    from mcp.client import Client as SDKClient

    results: dict[str, object] = {}
    async with Client(url) as client:
        name = (await client.call_tool("suggest_skills", {"task": tasks(1, 4)[0], "k": 1})).data
        floor_args = {"name": name[0]["name"] if name else "x"}
        for task in tasks(5, 102):
            await client.call_tool("route_and_load", {"task": task})
        routes, gets, embeds = [], [], []
        for task in tasks(count, 2):
            start = time.perf_counter()
            await client.call_tool("get_skill", floor_args, raise_on_error=False)
            gets.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            data = (await client.call_tool("route_and_load", {"task": task})).structured_content
            routes.append((time.perf_counter() - start) * 1000)
            embeds.append(float(data["components"]["embed_ms"]))
    results["fastmcp_client"] = percentiles(routes)
    results["fastmcp_client_get_skill"] = percentiles(gets)
    results["server_query_embedding_ms"] = percentiles(embeds)
    results["paired_overhead_ms"] = paired_overhead(routes, gets, embeds)
    async with SDKClient(url) as client:
        for task in tasks(5, 103):
            await client.call_tool("route_and_load", {"task": task})
        timings = []
        for task in tasks(count, 3):
            start = time.perf_counter()
            await client.call_tool("route_and_load", {"task": task})
            timings.append((time.perf_counter() - start) * 1000)
    results["mcp_sdk_client"] = percentiles(timings)
    return results


def paired_overhead(routes: list[float], gets: list[float], embeds: list[float]) -> dict[str, float]:
    """Per call: route_and_load minus the get_skill timed just before it minus that call's query
    embedding (as the server timed it); p50 and p95 of those differences."""
    return percentiles([r - g - e for r, g, e in zip(routes, gets, embeds, strict=True)])


async def _edits(url: str, folder: Path, edit_name: str, edits: int) -> list[float]:
    """ms from rewriting SKILL.md to get_skill returning the new revision, per edit."""
    async with Client(url) as client:
        to_served = []
        skill_md = folder / edit_name / "SKILL.md"
        original = skill_md.read_text()
        for n in range(edits):
            result = await client.call_tool("get_skill", {"name": edit_name})
            before = result.structured_content["revision"]
            start = time.perf_counter()
            skill_md.write_text(original + f"\nEdit number {n}.\n")
            while True:
                now = (await client.call_tool("get_skill", {"name": edit_name})).structured_content
                if now["revision"] != before:
                    break
                if time.perf_counter() - start > 30:
                    raise RuntimeError("edited skill not served within 30 s")
                await asyncio.sleep(0.005)
            to_served.append((time.perf_counter() - start) * 1000)
            await asyncio.sleep(0.5)  # let the watcher's debounce window close between edits
        return to_served


def _embedding_floor(embedder: CachedEmbedder, count: int, tasks: TaskSource) -> list[float]:
    """ms to embed one task never seen before (the first thing every route_and_load does)."""
    timings = []
    for task in tasks(count, 6):
        start = time.perf_counter()
        embedder.embed_query(task)
        timings.append((time.perf_counter() - start) * 1000)
    return timings


def embedding_backends(settings: Settings, count: int, tasks: TaskSource = queries) -> dict:
    """One query's embedding p50 through onnxruntime directly and through fastembed, same tasks."""
    results: dict[str, object] = {}
    for backend in ("onnx", "fastembed"):
        try:
            embedder = load_embedder(
                settings.embed_model_dir, settings.embed_model_sha256, None, settings.embed_threads, backend
            )
        except IngotError as exc:  # fastembed not installed
            results[backend] = f"not measured: {exc}"
            continue
        for task in tasks(5, 7):
            embedder.embed_query(task)
        results[backend] = percentiles(_embedding_floor(embedder, count, tasks))
    onnx, fast = results.get("onnx"), results.get("fastembed")
    if isinstance(onnx, dict) and isinstance(fast, dict):
        results["fastembed_over_onnx_p50"] = round(fast["p50"] / onnx["p50"], 2)
    return results


def _measure_size(settings: Settings, size: int, query_count: int, cache: Path) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"ingot-bench-{size}-"))
    try:
        names = write_library(folder / "skills", size)
        return _measure(settings, folder / "skills", names[size // 2], query_count, cache, queries)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _measure(
    settings: Settings, root: Path, edit_name: str, query_count: int, cache: Path, tasks: TaskSource
) -> dict:
    """Every measurement on one library folder (edited in place: pass a copy)."""
    embedder = load_embedder(
        settings.embed_model_dir,
        settings.embed_model_sha256,
        cache / "cache" / "vectors.sqlite",
        threads=settings.embed_threads,
        backend=settings.embed_backend,
        model=settings.embed_model,
    )
    library = Library((root,), embedder)
    start = time.perf_counter()
    library.reload()
    build_s = time.perf_counter() - start
    skills = library.status().skills
    in_process = []
    with one_blas_thread():  # as `ingot serve` routes
        for task in tasks(5, 0):
            library.route(task)
        for task in tasks(query_count, 1):
            t0 = time.perf_counter()
            library.route(task)
            in_process.append((time.perf_counter() - t0) * 1000)
    embed_floor = percentiles(_embedding_floor(embedder, query_count, tasks))
    del library
    # The child gets its own state home that reads the vector cache this process just warmed.
    with served((root,), cache / "cache" / "vectors.sqlite", 900, copy=False) as server:  # it edits root
        round_trips = asyncio.run(_round_trips(server.url, query_count, tasks))
        to_served = asyncio.run(_edits(server.url, root, edit_name, 7))
        rss = psutil.Process(server.pid).memory_info().rss / 2**20
        peak = peak_rss_mb(server.pid) or rss
    route_p50 = round_trips["fastmcp_client"]["p50"]
    get_p50 = round_trips["fastmcp_client_get_skill"]["p50"]
    paired = round_trips.pop("paired_overhead_ms")
    server_embed = round_trips.pop("server_query_embedding_ms")
    return {
        "skills": skills,
        "index_build_s": round(build_s, 2),
        "texts_embedded_this_run": embedder.computed,
        "route_ms": percentiles(in_process),
        "mcp_route_and_load_ms": round_trips,
        "floors": {
            "query_embedding_ms": embed_floor,
            "query_embedding_in_server_ms": server_embed,
            "mcp_get_skill_ms": round_trips["fastmcp_client_get_skill"],
        },
        "overhead_ms": round(route_p50 - embed_floor["p50"] - get_p50, 2),
        "overhead_paired_ms": paired,
        "cold_start_s": round(server.cold_start_s, 2),
        "edit_to_served_ms": {
            "median": round(statistics.median(to_served), 1),
            "max": round(max(to_served), 1),
            "edits": len(to_served),
        },
        "server_rss_mb": round(rss, 1),
        "server_peak_rss_mb": round(peak, 1),
    }


def run_library(
    settings: Settings, skills: Path, cases: Path, query_count: int, on_step: OnStep | None = None
) -> dict:
    """The same measurements on a copy of a real library, timed with its own cases' tasks."""
    steps = Steps(["embedding backends", "the library"], on_step)
    tasks, per_seed = case_tasks(cases, query_count)
    cache = Path(tempfile.gettempdir()) / "ingot-bench"
    (cache / "cache").mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="ingot-bench-library-"))
    try:
        root = folder / "skills"
        shutil.copytree(skills, root, symlinks=True)
        names = sorted(p.name for p in root.iterdir() if (p / "SKILL.md").is_file())
        if not names:
            raise ConfigError(f"{skills} holds no skill folder")
        steps.begin("embedding backends")
        backends = embedding_backends(settings, per_seed, tasks)
        steps.begin("the library")
        measured = _measure(settings, root, names[len(names) // 2], per_seed, cache, tasks)
        return {
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
            "library": str(skills),
            "cases": str(cases),
            "queries_per_measurement": per_seed,
            "embedding_backends": backends,
            "results": [measured],
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(settings: Settings, sizes: list[int], query_count: int, on_step: OnStep | None = None) -> dict:
    """Every measurement on a synthetic library of each size; each reported to `on_step`."""
    cache = Path(tempfile.gettempdir()) / "ingot-bench"  # synthetic libraries: no state home needed
    (cache / "cache").mkdir(parents=True, exist_ok=True)
    steps = Steps(["embedding backends", *(f"library of {size} skills" for size in sizes)], on_step)
    steps.begin("embedding backends")
    backends = embedding_backends(settings, query_count)
    results = []
    for size in sizes:
        steps.begin(f"library of {size} skills")
        results.append(_measure_size(settings, size, query_count, cache))
    return {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "queries_per_size": query_count,
        "embedding_backends": backends,
        "results": results,
    }
