"""`ingot bench ...`: each benchmark prints JSON (the benchmarks themselves live in ingot/bench/).

Long benchmarks (routing, latency, stdio, replica, promote) report their steps on stderr
(ingot/cli/progress.py), so stdout carries the JSON alone.

Registered on the group by `main.py`; this module imports only `options` and `progress` from the CLI."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click

from ingot.cli.options import print_json, settings_for, setup_logging, skills_option
from ingot.cli.progress import progress
from ingot.errors import IngotError


@click.group()
def bench() -> None:
    """Benchmarks; each prints JSON."""


@bench.command(name="routing")
@skills_option
@click.option(
    "--cases",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help='Labelled routing cases, JSON lines: {"task": ..., "expected": a skill name or null}.',
)
@click.option("--details", is_flag=True, help="Also list every miss.")
@click.option(
    "--strip-bodies", is_flag=True, help="Serve a copy whose bodies are cut to a title (a body-less library)."
)
def bench_routing(skills: tuple[Path, ...], cases: Path, details: bool, strip_bodies: bool) -> None:
    """Routing quality over MCP (an `ingot serve` child) on labelled cases."""
    from ingot.bench.routing import run

    settings = settings_for(skills)
    setup_logging("WARNING")
    vectors = Path(tempfile.gettempdir()) / "ingot-bench" / "cache" / "vectors.sqlite"  # kept between runs
    with progress("bench routing") as on_step:  # stderr: the JSON on stdout stays clean
        report = run(settings.skills_dirs, vectors, cases, details, strip_bodies, on_step)
    print_json(report)


@bench.command(name="latency")
@click.option("--sizes", default="1000,10000", help="Synthetic library sizes, comma-separated.")
@click.option("--queries", default=200, help="Timed queries per measurement.")
@skills_option
@click.option(
    "--cases",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="With --skills: measure a copy of that library, timed with these routing cases' tasks.",
)
def bench_latency(sizes: str, queries: int, skills: tuple[Path, ...], cases: Path | None) -> None:
    """Route and MCP latency, cold start, edit-to-served time and RSS on synthetic libraries, or
    on a real library timed with its own cases' tasks (--skills DIR --cases FILE)."""
    from ingot.bench.latency import run, run_library

    settings = settings_for(skills) if skills else settings_for()  # a given root is checked first
    if bool(skills) != (cases is not None):
        raise click.UsageError("--skills and --cases go together: a library and the tasks to time it with")
    if len(skills) > 1:
        raise click.UsageError("give --skills once: the latency bench measures a copy of one library")
    setup_logging("WARNING")
    with progress("bench latency") as on_step:  # stderr: the JSON on stdout stays clean
        if cases is not None:
            report = run_library(settings, settings.skills_dirs[0], cases, queries, on_step)
        else:
            report = run(settings, [int(s) for s in sizes.split(",")], queries, on_step)
    print_json(report)


@bench.command(name="stdio")
@skills_option
@click.option(
    "--sizes", default="1000", help="Synthetic library sizes after the configured one, comma-separated."
)
@click.option("--launches", default=5, help="Timed launches per library (median reported).")
@click.option("--calls", default=100, help="Timed route_and_load calls per lane.")
def bench_stdio(skills: tuple[Path, ...], sizes: str, launches: int, calls: int) -> None:
    """`ingot mcp` as a host launches it: cold start to the first route_and_load answer (vector
    cache warm) against a bare fastmcp server, and route_and_load over stdio vs streamable HTTP."""
    from ingot.bench.stdio import run

    settings = settings_for(skills)
    setup_logging("WARNING")
    with progress("bench stdio") as on_step:
        report = run(settings, [int(s) for s in sizes.split(",") if s.strip()], launches, calls, on_step)
    print_json(report)


@bench.command(name="replica")
@skills_option
@click.option("--replicas", default=3, help="Replica processes.")
@click.option("--rounds", default=10, help="Approvals (and syncs per size) to time.")
@click.option("--interval", default=1.0, help="REPLICA_INTERVAL_S of the replicas, seconds.")
@click.option(
    "--sizes", default="100,1000", help="Synthetic library sizes for the sync cost, comma-separated."
)
def bench_replica(skills: tuple[Path, ...], replicas: int, rounds: int, interval: float, sizes: str) -> None:
    """Approve on a primary to served on every replica (signed, pushed, verified), and what a
    replica's sync costs at each library size."""
    from ingot.bench.replica import run

    settings = settings_for(skills)
    setup_logging("WARNING")
    with progress("bench replica") as on_step:
        sized = [int(s) for s in sizes.split(",") if s.strip()]
        report = run(settings, replicas, rounds, interval, sized, on_step)
    print_json(report)


@bench.command(name="promote")
@click.option("--rounds", default=30, help="Promotions to time.")
def bench_promote(rounds: int) -> None:
    """Approval latency and approve-to-served time for a typical skill."""
    from ingot.bench.promote import run

    settings = settings_for()
    setup_logging("WARNING")
    with progress("bench promote") as on_step:
        report = run(settings, rounds, on_step)
    print_json(report)


@bench.command(name="optimize")
@click.option("--candidates", default=5, help="Candidate bodies per search.")
def bench_optimize(candidates: int) -> None:
    """Model calls and tokens per verdict (body and description passes) against the scripted server."""
    repo = Path(__file__).resolve().parents[2]
    if not (repo / "tests" / "scripted_llm.py").exists():
        raise IngotError("`ingot bench optimize` needs a source checkout (it uses tests/scripted_llm.py)")
    sys.path.insert(0, str(repo))
    from scripts.bench_optimize import run as run_bench

    setup_logging("WARNING")
    print_json(run_bench(candidates))


@bench.command(name="agent")
def bench_agent() -> None:
    """Prompt tokens per model call (stock deepagents tools vs only what a skill needs) and model
    requests per trivial routed task, against the scripted model server."""
    repo = Path(__file__).resolve().parents[2]
    if not (repo / "tests" / "scripted_llm.py").exists():
        raise IngotError("`ingot bench agent` needs a source checkout (it uses tests/scripted_llm.py)")
    sys.path.insert(0, str(repo))
    from scripts.bench_agent import run as run_bench

    setup_logging("WARNING")
    print_json(run_bench())


@bench.command(name="regress")
@click.option(
    "--endpoint",
    default=None,
    help="A real OpenAI-compatible base URL (models from AGENT_MODEL and JUDGE_L1/L2/L3_MODEL); "
    "default: the scripted models, as in CI.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for the run: goldens, caches, cassettes and report.json (default: a temp folder).",
)
def bench_regress(endpoint: str | None, out: Path | None) -> None:
    """The labelled edit benchmark for regression replay, built blind: per class the share of edits
    BLOCKed, WARNed and PASSed with 95% intervals, drift recognised, cost per verdict. On the
    scripted models (default) it measures the mechanics; --endpoint measures a real model."""
    setup_logging("WARNING")
    if endpoint is None:
        repo = Path(__file__).resolve().parents[2]
        if not (repo / "tests" / "regress_sim.py").exists():
            raise IngotError(
                "the scripted run needs a source checkout (tests/); pass --endpoint URL for a real one"
            )
        sys.path.insert(0, str(repo))
        from scripts.bench_regress import run as run_bench

        print_json(run_bench(out))
        return
    import tempfile

    from ingot.bench.regress import run_endpoint

    settings = settings_for(base_url=endpoint, model_base_url=endpoint)
    print_json(run_endpoint(settings, out or Path(tempfile.mkdtemp(prefix="ingot-bench-regress-"))))


@bench.command(name="sandbox")
@click.option("--rounds", default=30, help="Sandboxed runs to time.")
def bench_sandbox(rounds: int) -> None:
    """Start-up cost of the bubblewrap sandbox for the current user, against a direct start."""
    from ingot.bench.sandbox import run

    setup_logging("WARNING")
    print_json(run(rounds))
