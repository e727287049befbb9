"""`ingot mcp`: the MCP server on stdin/stdout, for hosts that launch a server as a command.

Claude Code, Claude Desktop, Cursor, VS Code, Codex and Zed start a local server as a child
process and speak MCP over its stdio. This serves the same tools and `skill://` resources as
`ingot serve`, from the same state home, with the same quarantine: approved revisions only. On a
replica machine (REPLICA_REMOTE set, no --skills) it serves the replica's last verified library
instead, read-only.
stdout carries the protocol and nothing else: it is pointed at stderr from the first moment
until the transport takes it, so a stray print from any library cannot corrupt the wire.

Several hosts may each launch one on the same skills root. Reading never takes the change lock;
the vector cache is one SQLite file in the state home that every process shares; `create_skill`
takes the lock for at most a second (two processes' calls land as two waiting changes, or one
answers "busy, retry"). The background duties (candidate inbox, live-root guard, autopilot) run
in one process per library, `ingot serve`, unless `--background` asks for them here.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ingot.cli.options import settings_for, setup_logging, skills_option
from ingot.errors import IngotError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ingot.settings import Settings
    from mcp_server.library import Library
    from optimize.control.changes import ChangeControl

SETUP_LOCK_WAIT_S = 5.0  # how long start-up waits for another process's recovery or baseline


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point fd 1 at stderr for the block (start-up), then give it back for the transport."""
    wire = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(wire, 1)
        os.close(wire)


@click.command(name="mcp")
@skills_option
@click.option(
    "--background",
    is_flag=True,
    help="Also run the candidate inbox, the live-root guard and the autopilot here (one process per "
    "library should; by default `ingot serve` does).",
)
def mcp(skills: tuple[Path, ...], background: bool) -> None:
    """Serve the skills over MCP on stdin/stdout (the command a host launches)."""
    from mcp_server.telemetry import setup_telemetry

    with stdout_to_stderr():
        settings = settings_for()
        replica = bool(settings.replica_remote) and not skills  # no skills root to check then
        if not replica:
            settings = settings_for(skills)
        setup_logging(settings.log_level)
        setup_telemetry(settings)  # with an OTLP endpoint set, spans leave at exit, EOF or SIGTERM
        server, library, stop = _open_replica(settings) if replica else _open(settings, background)
    try:
        server.run(transport="stdio", show_banner=False)
    finally:
        stop.set()
        library.stop_watching()


def _open(settings: Settings, background: bool):
    """The library, change control and the MCP server, settled and announced on stderr."""
    from ingot import background as duties_module
    from ingot.cli.serve import tool_limits
    from ingot.model_runtime import models_missing
    from ingot.runtime import change_control, inbox, one_blas_thread, open_library
    from mcp_server.server import build_server
    from mcp_server.sessions import SessionRoutes
    from mcp_server.telemetry import instrument

    library = open_library(settings)
    one_blas_thread()
    control = change_control(settings, library=library)
    _settle(control)
    if settings.live_edits == "quarantine":
        _start_protection(settings, library, control)
    status = library.status()
    click.echo(
        f"ingot: {status.skills} skills from {', '.join(map(str, status.roots))}; "
        f"{len(status.invalid)} skipped; MCP on stdio"
        + ("" if background else " (background duties: off, `ingot serve` runs them)"),
        err=True,
    )
    for problem in status.invalid:
        click.echo(f"  skipped {problem.folder}: {problem.reason}", err=True)
    evaluator = None
    if models_missing(settings) is None:  # the agent stack costs ~2 s to import: only with models
        from ingot.evaluation import BackgroundEvaluator

        evaluator = BackgroundEvaluator(settings, library, control)
    stop = threading.Event()
    if background:
        duties: list = []
        candidates = inbox(settings, library, control, evaluator.submit if evaluator else None)
        if candidates is not None:
            duties.append(("inbox", candidates.scan))
        if settings.live_edits == "quarantine":
            from optimize.control.guard import Guard

            duties.append(
                ("guard", Guard(control, library.similarity, settle_s=settings.inbox_settle_s).check)
            )
        from optimize.control.autopilot import Autopilot

        duties.append(("autonomy", Autopilot(control, disk_state=library.on_disk).tick))
        duties_module.start(duties, stop, settings.autopilot_tick_s)
    if settings.watch_skills:
        library.start_watching()
    server = build_server(
        library,
        control,
        SessionRoutes(control.runs_dir),
        tool_limits(settings),
        evaluator.submit if evaluator else None,
    )
    instrument(server, "stdio")
    return server, library, stop


def _open_replica(settings: Settings):  # noqa: ANN202 - (FastMCP, Library, Event)
    """On a replica machine (REPLICA_REMOTE set): what its last verified sync named, read-only (no
    create_skill), following each switch `ingot serve --replica` or `ingot replica sync` makes."""
    from ingot.cli.replica import replica_library
    from ingot.cli.serve import tool_limits
    from mcp_server.server import build_server
    from mcp_server.telemetry import instrument

    node, library, stop = replica_library(settings, sync=False)
    click.echo(
        f"ingot: {library.status().skills} skills verified from {node.config.remote}; MCP on stdio "
        "(a replica: `ingot serve --replica` or `ingot replica sync` fetches and verifies)",
        err=True,
    )
    server = build_server(library, None, None, tool_limits(settings), None)
    instrument(server, "stdio")
    return server, library, stop


def _settle(control: ChangeControl) -> None:
    """Finish what a killed promotion left, unless another process holds the lock (it will)."""
    from optimize.control.lock import PromotionConflict

    try:
        for note in replace(control, lock_wait_s=SETUP_LOCK_WAIT_S).recover():
            click.echo(f"ingot: recovered an interrupted change: {note}", err=True)
    except PromotionConflict:
        click.echo("ingot: another Ingot process is changing skills; serving what is approved", err=True)
    except IngotError as exc:  # serving is read-only: it goes on, and changes stay blocked
        click.echo(f"ingot: change control is blocked: {exc}", err=True)


def _start_protection(settings: Settings, library: Library, control: ChangeControl) -> None:
    """LIVE_EDITS=quarantine serves approved revisions only once protection has started (the
    guard's baseline). `ingot serve` starts it; a library only ever served over stdio gets it
    from its first `ingot mcp`, once."""
    from optimize.control.approved import MARKER
    from optimize.control.guard import Guard
    from optimize.control.lock import PromotionConflict

    if control.approvals.protected() and (control.runs_dir / MARKER).exists():
        return
    quick = replace(control, lock_wait_s=SETUP_LOCK_WAIT_S)
    try:
        for event in Guard(quick, library.similarity, settle_s=settings.inbox_settle_s).adopt():
            click.echo(f"ingot: {event}", err=True)
    except PromotionConflict:
        click.echo("ingot: another Ingot process is starting protection; serving what it approves", err=True)
    library.reload()


COMMANDS = (mcp,)
