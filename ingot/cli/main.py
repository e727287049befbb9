"""The `ingot` command line. Errors are caught here, once: `Error: ...` and a non-zero exit."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from ingot.errors import IngotError
from ingot.settings import Settings, load_settings


def _settings(skills: tuple[Path, ...] = (), **overrides: object) -> Settings:
    if skills:
        overrides["skills_dirs"] = tuple(skills)
    return load_settings(**overrides)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    logging.getLogger("bm25s").setLevel(max(logging.WARNING, logging.getLevelName(level)))


def _print_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


skills_option = click.option(
    "--skills",
    "skills",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A skills root (repeatable; the first wins on duplicate names).",
)


@click.group()
@click.version_option(package_name="ingot")
def main() -> None:
    """Ingot: evidence-gated change control and offline routing for agent skills."""


@main.command()
@skills_option
@click.option("--mcp-port", type=int, default=None, help="MCP port (default 8000).")
@click.option("--ui-port", type=int, default=None, help="UI port (default 8080).")
@click.option("--host", default=None, help="Bind address (default 127.0.0.1).")
@click.option("--no-ui", is_flag=True, help="Serve MCP only.")
def serve(
    skills: tuple[Path, ...], mcp_port: int | None, ui_port: int | None, host: str | None, no_ui: bool
) -> None:
    """Serve the skills over MCP (streamable HTTP at /mcp) and the UI."""
    _serve(_settings(skills, mcp_port=mcp_port, ui_port=ui_port, bind_host=host), mcp=True, ui=not no_ui)


@main.command()
@skills_option
@click.option("--ui-port", type=int, default=None, help="UI port (default 8080).")
@click.option("--host", default=None, help="Bind address (default 127.0.0.1).")
def ui(skills: tuple[Path, ...], ui_port: int | None, host: str | None) -> None:
    """Serve only the UI (the MCP server runs elsewhere, e.g. its own compose service)."""
    _serve(_settings(skills, ui_port=ui_port, bind_host=host), mcp=False, ui=True)


def _serve(settings: Settings, mcp: bool, ui: bool) -> None:
    """Open the library and change control (settling any interrupted change), report, serve."""
    from ingot.runtime import change_control, open_library, ui_options
    from ingot.serve import serve as run

    options = ui_options(settings) if ui else None  # a bad token setting fails before any work
    _setup_logging(settings.log_level)
    library = open_library(settings)
    control = change_control(settings, library=library)
    for note in control.recover():
        click.echo(f"ingot: recovered an interrupted change: {note}", err=True)
    status = library.status()
    click.echo(
        f"ingot: {status.skills} skills from {', '.join(map(str, status.roots))}; "
        f"{len(status.invalid)} skipped",
        err=True,
    )
    for problem in status.invalid:
        click.echo(f"  skipped {problem.folder}: {problem.reason}", err=True)
    endpoints = [f"MCP at http://{settings.bind_host}:{settings.mcp_port}/mcp"] if mcp else []
    endpoints += [f"UI at http://{settings.bind_host}:{settings.ui_port}/"] if ui else []
    click.echo(f"ingot: {', '.join(endpoints)}", err=True)
    run(
        library,
        control,
        settings.bind_host,
        settings.mcp_port if mcp else None,
        settings.ui_port if ui else None,
        settings.allowed_hosts,
        watch=settings.watch_skills,
        log_level=settings.log_level.lower(),
        ui=options,
    )


@main.command()
@skills_option
@click.argument("task")
@click.option("--harness", default=None)
@click.option("--platform", "platform_", default=sys.platform, show_default=True)
@click.option("--cwd", default=None)
@click.option("--json", "as_json", is_flag=True, help="Print the full decision as JSON.")
def route(
    skills: tuple[Path, ...],
    task: str,
    harness: str | None,
    platform_: str | None,
    cwd: str | None,
    as_json: bool,
) -> None:
    """Route TASK and print the decision with its score components."""
    from ingot.runtime import open_library
    from mcp_server.policy import CallerContext

    settings = _settings(skills)
    _setup_logging("WARNING")
    library = open_library(settings)
    result = library.route(task, CallerContext(harness=harness, platform=platform_, cwd=cwd))
    decision = {
        "match": result.match,
        "related_match": result.related_match,
        "novel": result.novel,
        "score": round(result.score, 4),
        "revision": result.skill.revision if result.skill else None,
        "alternatives": [
            {"name": c.name, "score": round(c.score, 4), "related": c.related} for c in result.alternatives
        ],
        "components": result.components,
    }
    if as_json:
        _print_json(decision)
        return
    if result.novel:
        click.echo(f"novel: no skill fits (best confidence {result.score:.3f})")
    else:
        kind = "match" if result.match else "related_match"
        assert result.skill is not None
        click.echo(
            f"{kind}: {result.skill.name} @ {result.skill.short_revision} (confidence {result.score:.3f})"
        )
    for key, value in result.components.items():
        shown = f"{value:.4f}" if isinstance(value, float) else value
        click.echo(f"  {key}: {shown}")
    for alt in result.alternatives:
        click.echo(f"  alternative: {alt.name} ({alt.score:.3f}{', related' if alt.related else ''})")


@main.command(name="skills")
@skills_option
def list_skills(skills: tuple[Path, ...]) -> None:
    """List served skills with their revisions, and every skipped folder with its reason."""
    from ingot.runtime import open_library

    settings = _settings(skills)
    _setup_logging("ERROR")
    library = open_library(settings)
    for skill in sorted(library.skills().values(), key=lambda s: s.name):
        click.echo(f"{skill.name}  {skill.short_revision}  {skill.root}")
    status = library.status()
    for problem in status.invalid:
        click.echo(f"SKIPPED {problem.folder}: {problem.reason}")
    for name, reason in status.disabled.items():
        click.echo(f"DISABLED {name}: {reason}")


@main.group()
def bench() -> None:
    """Benchmarks; each prints JSON."""


@bench.command(name="routing")
@skills_option
@click.option("--cases", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--details", is_flag=True, help="Also list every miss.")
def bench_routing(skills: tuple[Path, ...], cases: Path, details: bool) -> None:
    """Routing quality and in-process latency on labelled cases."""
    from ingot.bench_routing import run

    settings = _settings(skills)
    _setup_logging("WARNING")
    _print_json(run(settings, cases, details))


@bench.command(name="latency")
@click.option("--sizes", default="1000,10000", help="Synthetic library sizes, comma-separated.")
@click.option("--queries", default=200, help="Timed queries per measurement.")
def bench_latency(sizes: str, queries: int) -> None:
    """Route and MCP latency, cold start, edit-to-served time and RSS on synthetic libraries."""
    from ingot.bench_latency import run

    settings = _settings()
    _setup_logging("WARNING")
    _print_json(run(settings, [int(s) for s in sizes.split(",")], queries))


@bench.command(name="promote")
@click.option("--rounds", default=30, help="Promotions to time.")
def bench_promote(rounds: int) -> None:
    """Approval latency and approve-to-served time for a typical skill."""
    from ingot.bench_promote import run

    settings = _settings()
    _setup_logging("WARNING")
    _print_json(run(settings, rounds))


@bench.command(name="optimize")
@click.option("--candidates", default=5, help="Candidate rewrites per search.")
def bench_optimize(candidates: int) -> None:
    """Model calls and tokens per verdict (body and description passes) against the scripted server."""
    repo = Path(__file__).resolve().parents[1]
    if not (repo / "tests" / "scripted_llm.py").exists():
        raise IngotError("`ingot bench optimize` needs a source checkout (it uses tests/scripted_llm.py)")
    sys.path.insert(0, str(repo))
    from scripts.bench_optimize import run as run_bench

    _setup_logging("WARNING")
    _print_json(run_bench(candidates))


# The other command groups register themselves on `main` when imported.
from ingot import cli_changes, cli_models  # noqa: E402, F401


def run() -> None:
    """Console-script entry point: show IngotErrors as one line, exit with their code."""
    try:
        main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except IngotError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    # Run the imported module's `run`, not this __main__ copy's: the command groups registered
    # themselves on `ingot.cli.main`.
    from ingot.cli import run as registered_run

    registered_run()
