"""`ingot` commands on the served library: serve, ui, route, skills.

Registered on the group by `main.py`; this module imports only `options`, `serve` and (for a
replica) `replica` from the CLI."""

from __future__ import annotations

import math
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ingot.cli.options import print_json, settings_for, setup_logging, skills_option
from ingot.errors import ConfigError, IngotError
from ingot.settings import Settings

if TYPE_CHECKING:
    from ingot.cli.serve import UIOptions
    from mcp_server.registry import Skill


@click.command()
@skills_option
@click.option("--mcp-port", type=int, default=None, help="MCP port (default 8000).")
@click.option("--ui-port", type=int, default=None, help="UI port (default 8080).")
@click.option("--host", default=None, help="Bind address (default 127.0.0.1).")
@click.option("--no-ui", is_flag=True, help="Serve MCP only.")
@click.option(
    "--replica",
    "replica_remote",
    default=None,
    help="Serve a primary's pushed remote instead, verifying every commit first (REPLICA_REMOTE).",
)
def serve(
    skills: tuple[Path, ...],
    mcp_port: int | None,
    ui_port: int | None,
    host: str | None,
    no_ui: bool,
    replica_remote: str | None,
) -> None:
    """Serve the skills over MCP (streamable HTTP at /mcp) and the UI; with --replica, serve a
    primary's signed history (MCP and /metrics only)."""
    if replica_remote or (not skills and settings_for(mcp_port=mcp_port, bind_host=host).replica_remote):
        from ingot.cli.replica import serve_replica
        from ingot.cli.serve import listen
        from mcp_server.telemetry import setup_telemetry

        given = {"replica_remote": replica_remote} if replica_remote else {}
        settings = settings_for(mcp_port=mcp_port, bind_host=host, **given)
        setup_logging(settings.log_level)
        setup_telemetry(settings)
        sock = listen(settings.bind_host, settings.mcp_port, _named("--mcp-port", mcp_port, "MCP_PORT"))
        try:
            serve_replica(settings, {"mcp": sock})
        finally:
            sock.close()
        return
    settings = settings_for(skills, mcp_port=mcp_port, ui_port=ui_port, bind_host=host)
    ports = {"mcp": _named("--mcp-port", mcp_port, "MCP_PORT")}
    if not no_ui:
        ports["ui"] = _named("--ui-port", ui_port, "UI_PORT")
    _serve(settings, ports)


@click.command()
@skills_option
@click.option("--ui-port", type=int, default=None, help="UI port (default 8080).")
@click.option("--host", default=None, help="Bind address (default 127.0.0.1).")
def ui(skills: tuple[Path, ...], ui_port: int | None, host: str | None) -> None:
    """Serve only the UI (the MCP server runs elsewhere, e.g. its own compose service)."""
    _serve(
        settings_for(skills, ui_port=ui_port, bind_host=host), {"ui": _named("--ui-port", ui_port, "UI_PORT")}
    )


def _named(flag: str, value: int | None, setting: str) -> str:
    """Where a port came from, for the error when it is taken."""
    return flag if value is not None else f"{setting} or {flag}"


def _serve(settings: Settings, ports: dict[str, str]) -> None:
    """Bind the ports, open the library and change control (settling any interrupted change),
    report, serve. `ports` names the servers to run ("mcp", "ui") and where each port came from."""
    from ingot.cli.serve import is_loopback, listen, ui_bind_refusal, ui_options

    wanted = {"mcp": settings.mcp_port, "ui": settings.ui_port}
    if len(ports) == 2 and wanted["mcp"] == wanted["ui"]:  # both would bind it; the second fails late
        raise ConfigError(
            f"MCP and the UI are both given port {wanted['mcp']} ({ports['mcp']}; {ports['ui']}): "
            "give each its own port, e.g. --mcp-port 8000 --ui-port 8080"
        )
    configured = settings.ui_access_token or settings.ui_access_token_file
    if "ui" in ports and not is_loopback(settings.bind_host) and not configured:
        raise ConfigError(ui_bind_refusal(settings.bind_host))  # the home's default is for loopback
    options = ui_options(settings) if "ui" in ports else None  # a bad token setting fails before any work
    sockets: dict[str, socket.socket] = {}
    try:
        for name, named in ports.items():  # a taken port fails now, before the model loads
            sockets[name] = listen(settings.bind_host, wanted[name], named)
        _open_and_serve(settings, options, sockets)
    finally:
        for sock in sockets.values():
            sock.close()


def _open_and_serve(settings: Settings, options: UIOptions | None, sockets: dict[str, socket.socket]) -> None:
    from ingot import background
    from ingot.cli.serve import serve as run
    from ingot.cli.serve import sign_in_link, tool_limits
    from ingot.evaluation import BackgroundEvaluator
    from ingot.model_runtime import models_missing
    from ingot.runtime import change_control, inbox, one_blas_thread, open_library
    from mcp_server.telemetry import setup_telemetry
    from optimize.control.autopilot import Autopilot

    mcp, ui = "mcp" in sockets, "ui" in sockets
    setup_logging(settings.log_level)
    setup_telemetry(settings)  # with OTEL_EXPORTER_OTLP_ENDPOINT set, this process's spans are exported
    library = open_library(settings)
    one_blas_thread()  # after start-up calibration, whose matrix products do use two
    control = change_control(settings, library=library)
    try:
        for note in control.recover():
            click.echo(f"ingot: recovered an interrupted change: {note}", err=True)
    except IngotError as exc:  # serving is read-only: it goes on, and changes stay blocked
        click.echo(f"ingot: change control is blocked: {exc}", err=True)
    status = library.status()
    click.echo(
        f"ingot: {status.skills} skills from {', '.join(map(str, status.roots))}; "
        f"{len(status.invalid)} skipped",
        err=True,
    )
    for problem in status.invalid:
        click.echo(f"  skipped {problem.folder}: {problem.reason}", err=True)
    # Agents' new skills are measured in the background when models are configured (else by hand);
    # the inbox, the live-root guard and the autopilot run in this process (ingot/background.py).
    evaluator = (
        BackgroundEvaluator(settings, library, control) if mcp and models_missing(settings) is None else None
    )
    queued = evaluator.submit if evaluator else None
    stop = threading.Event()
    if mcp:  # one set of background duties per deployment: the MCP-serving process
        duties: list[background.Duty] = []
        candidates = inbox(settings, library, control, queued)
        if candidates is not None:
            duties.append(("inbox", candidates.scan))
        if settings.live_edits == "quarantine":
            from optimize.control.guard import Guard

            guard = Guard(control, library.similarity, settle_s=settings.inbox_settle_s)
            for event in guard.adopt():  # the baseline, before the first request
                click.echo(f"ingot: {event}", err=True)
            library.reload()
            duties.append(("guard", guard.check))
        duties.append(("autonomy", Autopilot(control, disk_state=library.on_disk).tick))
        if settings.git_push_remote:  # commits another process made but could not push
            duties.append(("push", lambda: control.promoter.commits.retry_unpushed(control.roots)))
        background.start(duties, stop, settings.autopilot_tick_s)
    endpoints = [f"MCP at http://{settings.bind_host}:{settings.mcp_port}/mcp"] if mcp else []
    endpoints += [f"UI at http://{settings.bind_host}:{settings.ui_port}/"] if ui else []
    click.echo(f"ingot: {', '.join(endpoints)}", err=True)
    if ui and options is not None:  # the one way in for a person: a browser that opens this link
        link = sign_in_link(settings.bind_host, settings.ui_port, options)
        where = f"the token in {options.token_file}" if options.token_file else "UI_ACCESS_TOKEN"
        click.echo(
            f"ingot: sign in to the UI: {link} (works once; after that, /login takes {where})",
            err=True,
        )
    try:
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
            limits=tool_limits(settings),
            queued=queued,
            sockets=sockets,
        )
    finally:
        stop.set()
        if evaluator is not None:
            evaluator.close()


def _a_number(value: float | None) -> float | None:
    if value is not None and math.isnan(value):  # FloatRange lets NaN through: it compares false
        raise click.BadParameter("must be a number from -1 to 2, not nan")
    return value


@click.command()
@skills_option
@click.argument("task")
@click.option("--harness", default=None, help="The calling harness, for skills limited to some harnesses.")
@click.option(
    "--platform",
    "platform_",
    default=sys.platform,
    show_default=True,
    help="The caller's OS (linux, darwin, windows).",
)
@click.option(
    "--cwd",
    default=None,
    help="The caller's working folder: `project` constraints; `paths` ones only under ALLOWED_CALLER_ROOTS.",
)
@click.option(
    "--min-score",
    type=click.FloatRange(-1.0, 2.0),  # router.MIN_SCORE_RANGE
    callback=lambda _ctx, _param, value: _a_number(value),
    default=None,
    help="Load only at this calibrated score or above (-1 to 2).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the full decision as JSON.")
def route(
    skills: tuple[Path, ...],
    task: str,
    harness: str | None,
    platform_: str | None,
    cwd: str | None,
    min_score: float | None,
    as_json: bool,
) -> None:
    """Route TASK and print the decision with its score components."""
    from ingot.cli.serve import tool_limits
    from ingot.runtime import open_library
    from mcp_server.policy import CallerContext, may_read
    from mcp_server.router import check_task

    check_task(task)  # the limit MCP and the Library's routing box share: refused before any loading
    settings = settings_for(skills)
    setup_logging("WARNING")
    library = open_library(settings, read_only=True)
    readable = may_read(cwd, tool_limits(settings).allowed_caller_roots)
    context = CallerContext(harness=harness, platform=platform_, cwd=cwd, may_read_cwd=readable)
    result = library.route(task, context, min_score=min_score)
    decision = {
        "schema_version": 1,
        "match": result.match,
        "related_match": result.related_match,
        "novel": result.novel,
        "score": round(result.score, 4),
        "revision": result.skill.revision if result.skill else None,
        "alternatives": [{"name": c.name, "score": round(c.score, 4), "fit": c.fit} for c in result.nearest],
        "components": result.components,
    }
    if as_json:
        print_json(decision)
        return
    if result.novel:
        click.echo(f"novel: no skill fits (best score {result.score:.3f})")
    else:
        kind = "match" if result.match else "related_match"
        assert result.skill is not None
        click.echo(f"{kind}: {result.skill.name} @ {result.skill.short_revision} (score {result.score:.3f})")
    from ui.skills import component_text  # the Library page's try-routing box shows the same

    for key, value in result.components.items():
        click.echo(f"  {key}: {component_text(value)}")
    for alt in result.nearest:
        click.echo(f"  alternative: {alt.name} ({alt.score:.3f}, {alt.fit}; not loaded)")


@click.command(name="skills")
@skills_option
@click.option("--json", "as_json", is_flag=True, help="Print the same lists as JSON.")
def list_skills(skills: tuple[Path, ...], as_json: bool) -> None:
    """List served skills with their revisions, and every skipped folder with its reason."""
    from ingot.runtime import open_library

    settings = settings_for(skills)
    setup_logging("ERROR")
    library = open_library(settings, read_only=True)
    status = library.status()
    served, held = [], []
    for skill in sorted(library.skills().values(), key=lambda s: s.name):
        if skill.name in status.disabled:
            continue  # listed with its reason below
        try:
            library.get(skill.name)  # refuses what is never served (e.g. `trust: blocked`)
        except IngotError as exc:
            held.append((skill, str(exc)))
            continue
        served.append(skill)
    if as_json:
        print_json(
            {
                "schema_version": 1,
                "roots": [str(r) for r in status.roots],
                "served": [_skill_json(s) for s in served],
                "not_served": [_skill_json(s) | {"reason": why} for s, why in held],
                "disabled": [{"name": n, "reason": why} for n, why in status.disabled.items()],
                "skipped": [{"folder": str(p.folder), "reason": p.reason} for p in status.invalid],
            }
        )
        return
    for skill in served:
        click.echo(f"{skill.name}  {skill.short_revision}  {skill.root}")
    for skill, why in held:
        click.echo(f"NOT SERVED {skill.name}  {skill.short_revision}: {why}")
    if not library.skills():
        click.echo(f"no skills are served from {', '.join(map(str, status.roots))}", err=True)
    for problem in status.invalid:
        click.echo(f"SKIPPED {problem.folder}: {problem.reason}")
    for name, reason in status.disabled.items():
        click.echo(f"DISABLED {name}: {reason}")


def _skill_json(skill: Skill) -> dict[str, str]:
    return {
        "name": skill.name,
        "revision": skill.revision,
        "root": str(skill.root),
        "description": skill.description,
    }


COMMANDS = (serve, ui, route, list_skills)
