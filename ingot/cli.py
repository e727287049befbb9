"""The `ingot` command line. Errors are caught here, once: `Error: ...` and a non-zero exit."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from ingot.errors import ConfigError, IngotError
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
    from ingot.runtime import change_control, open_library
    from ingot.serve import serve as run

    settings = _settings(skills, mcp_port=mcp_port, ui_port=ui_port, bind_host=host)
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
    click.echo(
        f"ingot: MCP at http://{settings.bind_host}:{settings.mcp_port}/mcp"
        + ("" if no_ui else f", UI at http://{settings.bind_host}:{settings.ui_port}/"),
        err=True,
    )
    run(
        library,
        control,
        settings.bind_host,
        settings.mcp_port,
        None if no_ui else settings.ui_port,
        settings.allowed_hosts,
        watch=settings.watch_skills,
        log_level=settings.log_level.lower(),
    )


@main.command()
@skills_option
@click.option("--ui-port", type=int, default=None, help="UI port (default 8080).")
@click.option("--host", default=None, help="Bind address (default 127.0.0.1).")
def ui(skills: tuple[Path, ...], ui_port: int | None, host: str | None) -> None:
    """Serve only the UI (the MCP server runs elsewhere, e.g. its own compose service)."""
    from ingot.runtime import open_library
    from ingot.serve import serve as run

    settings = _settings(skills, ui_port=ui_port, bind_host=host)
    _setup_logging(settings.log_level)
    library = open_library(settings)
    click.echo(f"ingot: UI at http://{settings.bind_host}:{settings.ui_port}/", err=True)
    run(
        library,
        None,
        settings.bind_host,
        None,
        settings.ui_port,
        settings.allowed_hosts,
        watch=settings.watch_skills,
        log_level=settings.log_level.lower(),
    )


@main.command()
@skills_option
@click.argument("skill")
@click.option(
    "--candidates", type=int, default=None, help="Rewrites to author (default OPTIMIZE_CANDIDATES)."
)
@click.option(
    "--description",
    "description_pass",
    is_flag=True,
    help="Optimise the description for routing instead of the body.",
)
def optimize(skills: tuple[Path, ...], skill: str, candidates: int | None, description_pass: bool) -> None:
    """Search for a better body (or description) for SKILL and queue it, with evidence, for review."""
    import secrets as _secrets

    from ingot.runtime import change_control, llm_client, open_library
    from optimize.judge import Judge
    from optimize.pipeline import optimize_body

    settings = _settings(skills)
    _setup_logging("WARNING")
    library = open_library(settings)
    control = change_control(settings, library=library)
    llm = llm_client(settings, f"optimize-{skill}-{_secrets.token_hex(3)}", cassette_name=f"optimize-{skill}")
    if description_pass:
        from optimize.describe import propose_description
        from optimize.taskset import load_task_set

        cases = load_task_set(settings.tasks_dir, skill).routing
        change_id, reason = propose_description(
            skill, library, control, llm, cases, candidates or settings.optimize_candidates
        )
        click.echo(reason)
        if change_id:
            click.echo(f"queued {change_id} for review; see `ingot pending`")
        return
    if not (settings.tasks_dir / f"{skill}.yaml").exists():
        from optimize.taskset import draft_task_set

        path = draft_task_set(llm, library.get(skill), settings.tasks_dir)
        click.echo(
            f"no task set for {skill}: the teacher drafted {path}. Review it (its holdout will be "
            "sealed into the evidence), then run `ingot optimize` again"
        )
        return
    judges = settings.judge_models or ((settings.judge_model,) if settings.judge_model else ())
    judge = Judge(llm, judges, settings.teacher_model)

    from optimize.execcheck import make_sandbox

    outcome = optimize_body(
        skill,
        control,
        library,
        llm,
        judge,
        settings.tasks_dir,
        candidates or settings.optimize_candidates,
        sandbox=make_sandbox(settings.exec_sandbox),
    )
    click.echo(outcome.reason)
    if outcome.proposed:
        click.echo(f"queued {outcome.proposed} for review (gate: {outcome.verdict}); see `ingot pending`")
    click.echo(f"usage: {llm.ledger.totals()['total'] if llm.ledger else 'unknown'}")


@main.command()
@skills_option
@click.argument("skill")
def mine(skills: tuple[Path, ...], skill: str) -> None:
    """How SKILL does on recorded traffic: mean score, failing dimensions, weakest tasks."""
    import secrets as _secrets

    from ingot.runtime import llm_client, open_library, trace_store
    from optimize.judge import Judge
    from optimize.mining import mine as run_mining

    settings = _settings(skills)
    _setup_logging("WARNING")
    library = open_library(settings)
    llm = llm_client(settings, f"mine-{skill}-{_secrets.token_hex(3)}")
    judges = settings.judge_models or ((settings.judge_model,) if settings.judge_model else ())
    report = run_mining(
        skill,
        trace_store(settings),
        library,
        Judge(llm, judges, settings.teacher_model),
        settings.runs_dir / "cache" / "verdicts.jsonl",
    )
    click.echo(
        f"{skill}: {report.traces} traces ({report.by_tag} tagged, {report.by_routing} by routing), "
        f"{report.clusters} clusters, {report.judged} newly judged"
    )
    click.echo(f"mean score: {report.mean_score if report.mean_score is not None else 'no traffic'}")
    for dimension, count in sorted(report.failing_dimensions.items(), key=lambda x: -x[1]):
        click.echo(f"  failing {dimension}: {count}")
    for score, task in report.weakest:
        click.echo(f"  eval candidate ({score:.2f}): {task}")
    if report.skipped_lines:
        click.echo(f"  ({report.skipped_lines} unreadable trace lines skipped)")


@main.command(name="loop")
@skills_option
@click.argument("targets", nargs=-1)
def loop_command(skills: tuple[Path, ...], targets: tuple[str, ...]) -> None:
    """Mine every skill with a task set (or TARGETS) and optimize the unhealthy ones (quarantined)."""
    import secrets as _secrets

    from ingot.runtime import change_control, llm_client, open_library, trace_store
    from optimize.judge import Judge
    from optimize.loop import run_loop

    settings = _settings(skills)
    _setup_logging("WARNING")
    library = open_library(settings)
    control = change_control(settings, library=library)
    llm = llm_client(settings, f"loop-{_secrets.token_hex(3)}")
    judges = settings.judge_models or ((settings.judge_model,) if settings.judge_model else ())
    entries = run_loop(
        targets,
        library,
        control,
        llm,
        Judge(llm, judges, settings.teacher_model),
        trace_store(settings),
        settings.tasks_dir,
        settings.loop_health_threshold,
        settings.loop_passes,
        settings.optimize_candidates,
        progress=lambda message: click.echo(f"... {message}", err=True),
    )
    for entry in entries:
        score = "-" if entry.mean_score is None else f"{entry.mean_score:.2f}"
        click.echo(f"{entry.skill}  {score}  {entry.action}: {entry.detail}")


@main.command(name="agent")
@click.argument("task")
@click.option("--cwd", default=None, help="Working directory to report to the router (default: here).")
@click.option("--no-create", is_flag=True, help="Evaluation mode: never call create_skill.")
def agent_command(task: str, cwd: str | None, no_create: bool) -> None:
    """Run the reference agent on TASK: route once, serve with the right model, record the run."""
    import secrets as _secrets

    from agent.run import ReferenceAgent
    from ingot.runtime import llm_client, trace_store

    settings = _settings()
    _setup_logging("WARNING")
    mcp_url = settings.mcp_url or f"http://{settings.bind_host}:{settings.mcp_port}/mcp"
    try:
        llm, problem = llm_client(settings, f"agent-{_secrets.token_hex(4)}"), None
    except ConfigError as exc:
        llm, problem = None, str(exc)
    result = ReferenceAgent(mcp_url, llm, trace_store(settings), allow_mutation=not no_create).run(task, cwd)
    revision = f" @ {result.revision[:12]}" if result.revision else ""
    click.echo(f"route: {result.route} {result.skill or 'none'}{revision} (score {result.score:.3f})")
    if result.answer is None:
        click.echo(f"no model call: {problem or result.note}")
        click.echo(
            "set BASE_URL, AGENT_MODEL and STRONG_MODEL or TEACHER_MODEL (and API_KEY for a remote "
            "endpoint) to let the agent answer; the route above is what it would serve"
        )
        return
    click.echo(f"model: {result.model}; tokens in/out: {result.tokens_in}/{result.tokens_out}")
    for change_id in result.created:
        click.echo(f"queued a new skill for review: {change_id} (see `ingot pending`)")
    click.echo("")
    click.echo(result.answer)


@main.command()
@click.option(
    "--upstream",
    required=True,
    help="The real OpenAI-compatible base URL, e.g. https://openrouter.ai/api/v1.",
)
@click.option("--port", type=int, default=None, help="Proxy port (default PROXY_PORT, 8090).")
@click.option("--harness", default=None, help="Harness name recorded with each trace.")
def proxy(upstream: str, port: int | None, harness: str | None) -> None:
    """Record any harness's model calls: point its base URL at this OpenAI-compatible proxy."""
    import uvicorn

    from agent.proxy import build_proxy
    from ingot.runtime import trace_store
    from ingot.serve import is_loopback
    from mcp_server.sessions import SessionRoutes
    from optimize.cassette import Cassette

    settings = _settings(proxy_port=port)
    _setup_logging(settings.log_level)
    if not is_loopback(settings.bind_host):
        raise ConfigError(f"the capture proxy binds loopback only; BIND_HOST is {settings.bind_host}")
    cassette = None
    if settings.cassette_mode in ("record", "record-missing"):
        cassette = Cassette(settings.runs_dir / "cassettes" / "proxy.jsonl", "record")
    app = build_proxy(upstream, trace_store(settings), SessionRoutes(settings.runs_dir), cassette, harness)
    click.echo(
        f"ingot: capture proxy at http://{settings.bind_host}:{settings.proxy_port}/v1 -> {upstream}",
        err=True,
    )
    uvicorn.run(app, host=settings.bind_host, port=settings.proxy_port, log_level=settings.log_level.lower())


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


# -- change control -------------------------------------------------------------------------


def _control(skills: tuple[Path, ...]):
    from ingot.runtime import actor, change_control

    settings = _settings(skills)
    _setup_logging("WARNING")
    return change_control(settings), actor(settings)


@main.command()
@skills_option
@click.argument("skill")
@click.option(
    "--from",
    "source_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="Folder holding the candidate SKILL.md and its files.",
)
@click.option("--note", default=None, help="Why you propose it (shown to the reviewer).")
def propose(skills: tuple[Path, ...], skill: str, source_dir: Path, note: str | None) -> None:
    """Quarantine a hand-made candidate for SKILL (operator source; never served until approved)."""
    from ingot.runtime import open_library
    from optimize.quarantine import admit, read_candidate

    control, _ = _control(skills)
    files, description = read_candidate(source_dir, skill, control)
    library = open_library(_settings(skills), control.roots)
    similar = library.similar_descriptions(skill, description)
    change, displaced = admit(control, skill, files, "operator", similar, note)
    click.echo(f"pending {change.id}: {change.kind} of {skill} -> {change.candidate_revision[:12]}")
    if displaced:
        click.echo(f"displaced the previous candidate to {displaced}")


@main.command(name="pending")
@skills_option
def list_pending(skills: tuple[Path, ...]) -> None:
    """List the changes waiting for a decision, with their gate verdicts."""
    from optimize import evidence as evidence_mod

    control, _ = _control(skills)
    changes = control.pending()
    if not changes:
        click.echo("nothing pending")
    for change in changes:
        verdict = "no evidence"
        if change.evidence_path:
            try:
                verdict = evidence_mod.load(control.runs_dir / change.evidence_path).data["gate"]["verdict"]
            except (evidence_mod.EvidenceError, KeyError):
                verdict = "evidence unreadable"
        click.echo(
            f"{change.skill}  {change.id}  {change.kind}  from {change.source}  "
            f"{(change.champion_revision or 'new')[:12]} -> {change.candidate_revision[:12]}  "
            f"gate: {verdict}"
        )


@main.command()
@skills_option
@click.argument("skill")
@click.option(
    "--change",
    "change_id",
    required=True,
    help="The change id you reviewed (from `ingot pending`); a newer candidate is a conflict.",
)
def approve(skills: tuple[Path, ...], skill: str, change_id: str) -> None:
    """Re-verify SKILL's pending change against its evidence and promote it."""
    control, who = _control(skills)
    outcome = control.approve(skill, who, change_id)
    click.echo(f"promoted {skill}: {(outcome.from_revision or 'new')[:12]} -> {outcome.to_revision[:12]}")


@main.command()
@skills_option
@click.argument("skill")
@click.option("--reason", required=True, help="Why (kept in the archive and the audit log).")
def reject(skills: tuple[Path, ...], skill: str, reason: str) -> None:
    """Reject SKILL's pending change; it stays in the archive with the reason."""
    control, who = _control(skills)
    click.echo(f"rejected; archived at {control.reject(skill, reason, who)}")


@main.command()
@skills_option
@click.argument("skill")
@click.argument("revision")
@click.option("--reason", default=None)
def rollback(skills: tuple[Path, ...], skill: str, revision: str, reason: str | None) -> None:
    """Restore a snapshot of SKILL (a revision prefix from `ingot history`)."""
    control, who = _control(skills)
    outcome = control.rollback(skill, revision, who, reason)
    click.echo(f"rolled back {skill}: {(outcome.from_revision or '')[:12]} -> {outcome.to_revision[:12]}")


@main.command()
@skills_option
@click.argument("skill")
def history(skills: tuple[Path, ...], skill: str) -> None:
    """SKILL's audited changes and the snapshots that can be restored."""
    control, _ = _control(skills)
    for entry in control.history(skill):
        click.echo(
            f"{entry.seq:>5}  {entry.time}  {entry.get('action'):<16} "
            f"{(entry.get('from_revision') or '-')[:12]:>12} -> {(entry.get('to_revision') or '-')[:12]:<12}"
            f"  {entry.get('actor', '')}  {entry.get('outcome') or entry.get('reason') or ''}"
        )
    for revision in control.snapshots(skill):
        click.echo(f"snapshot {revision}")


@main.command()
@skills_option
def status(skills: tuple[Path, ...]) -> None:
    """Live revisions, drift from the audited revision, pending changes and the audit chain.

    Exits 1 when a skill has drifted or the audit chain is broken."""
    control, _ = _control(skills)
    report = control.status()
    for skill in report.skills:
        flag = "DRIFTED" if skill.drifted else ("unaudited" if skill.audited_revision is None else "ok")
        click.echo(
            f"{skill.name}  {(skill.live_revision or 'MISSING/INVALID')[:15]}  {flag}"
            + (f"  (audited {skill.audited_revision[:12]})" if skill.drifted else "")
            + (f"  pending {skill.pending}" if skill.pending else "")
        )
    for problem in report.invalid:
        click.echo(f"INVALID {problem}")
    audit = report.audit
    click.echo(
        f"audit: {'ok' if audit.ok else f'BROKEN at line {audit.bad_line}: {audit.problem}'}"
        f" ({audit.lines} lines, head {audit.head_hash[:16]})"
    )
    if report.drifted or not audit.ok:
        sys.exit(1)


@main.group()
def audit() -> None:
    """The tamper-evident audit chain."""


@audit.command(name="verify")
def audit_verify() -> None:
    """Check every line of runs/audit.jsonl; print the head hash or the first bad line."""
    from optimize.audit import AuditLog

    settings = _settings()
    result = AuditLog(settings.runs_dir).verify()
    if result.ok:
        click.echo(
            f"ok: {result.lines} lines, head {result.head_hash}"
            + (f" ({result.note})" if result.note else "")
        )
        return
    click.echo(f"BROKEN at line {result.bad_line}: {result.problem}", err=True)
    sys.exit(1)


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
    run()
