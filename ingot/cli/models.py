"""`ingot` commands that call models: optimize, mine, loop, agent and the capture proxy.

Each command that calls models installs the OTLP exporter when the settings name an endpoint
(mcp_server/telemetry.py), so its model calls leave as GenAI spans; the proxy forwards calls and
makes none of its own.

Registered on the group by `main.py`; this module imports only `options`, `progress` and `serve`
from the CLI."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from ingot.cli.options import (
    print_evaluation,
    served_skill,
    settings_for,
    setup_logging,
    skills_option,
    usage_line,
)
from ingot.errors import ConfigError


@click.command()
@skills_option
@click.argument("skill")
@click.option(
    "--candidates",
    type=int,
    default=None,
    help="Candidate bodies (or descriptions) to author (default OPTIMIZE_CANDIDATES).",
)
@click.option(
    "--description",
    "description_pass",
    is_flag=True,
    help="Optimise the description for routing instead of the body.",
)
def optimize(skills: tuple[Path, ...], skill: str, candidates: int | None, description_pass: bool) -> None:
    """Search for a better body (or description) for SKILL and queue it, with evidence, for review.

    Every paid call is journaled until the run succeeds: rerunning after a failure resumes."""
    from ingot.cli.progress import progress
    from ingot.model_runtime import judge as make_judge
    from ingot.model_runtime import model_run, provenance, recent_traffic, replay_context, researcher
    from ingot.model_runtime import sandbox as make_sandbox
    from ingot.runtime import change_control, open_library
    from mcp_server.telemetry import setup_telemetry
    from optimize.measure.taskset import draft_task_set, load_task_set
    from optimize.search.describe import propose_description
    from optimize.search.pipeline import optimize_body

    settings = settings_for(skills)
    setup_logging("WARNING")
    setup_telemetry(settings)  # OTEL_EXPORTER_OTLP_ENDPOINT: model calls as GenAI spans
    library = open_library(settings)
    control = change_control(settings, library=library)
    champion = served_skill(library, skill)
    kind = "description" if description_pass else "body"
    with (
        model_run(
            settings, f"optimize-{kind}-{skill}", journal=f"optimize-{kind}-{skill}-{champion.short_revision}"
        ) as llm,
        progress(f"optimize {skill}") as on_step,
    ):
        if description_pass:
            change_id, reason = propose_description(
                skill,
                library,
                control,
                llm,
                load_task_set(settings.tasks_dir, skill).routing,
                candidates or settings.optimize_candidates,
                researcher(settings),
                settings.tasks_dir,
                recent_traffic(settings),
                on_step,
            )
            click.echo(reason)
            queued = control.queue.get(skill) if change_id else None
            verdict = control.passport(queued) if queued is not None and queued.id == change_id else None
            if change_id:
                state = verdict.summary if verdict else "passport not readable"
                click.echo(
                    f"queued {change_id} for review ({state}): description change; see `ingot pending`"
                )
            return
        if not (settings.tasks_dir / f"{skill}.yaml").exists():
            path = draft_task_set(llm, champion, settings.tasks_dir)
            click.echo(
                f"no task set for {skill}: the teacher drafted {path}. Review it (its holdout will be "
                "sealed into the evidence), then run `ingot optimize` again"
            )
            return
        outcome = optimize_body(
            skill,
            control,
            library,
            llm,
            make_judge(settings, llm),
            settings.tasks_dir,
            candidates or settings.optimize_candidates,
            sandbox=make_sandbox(settings),
            research=researcher(settings),
            provenance=provenance(settings, llm),
            replay=replay_context(settings),
            traffic=recent_traffic(settings),
            on_step=on_step,
        )
        click.echo(outcome.reason)
        if outcome.proposed:
            from optimize.measure.size import change_size

            queued = control.queue.get(skill)
            size = (
                change_size(skill, control.champion_files(skill) or {}, queued.files).label if queued else ""
            )
            click.echo(
                f"queued {outcome.proposed} for review ({outcome.verdict}): body change, {size}; "
                "see `ingot pending`"
            )
        click.echo(usage_line(llm.ledger.totals()["total"] if llm.ledger else None))


@click.command()
@skills_option
@click.argument("skill")
@click.option("--change", "change_id", required=True, help="The pending change to measure (`ingot pending`).")
def evaluate(skills: tuple[Path, ...], skill: str, change_id: str) -> None:
    """Measure SKILL's pending change, whoever proposed it: every evidence cell that applies (checks,
    routing impact, held-out A/B, sandbox checks), attached as a new bundle; a rerun after a failure
    resumes from the calls already paid for."""
    from ingot.cli.progress import progress
    from ingot.evaluation import evaluate_change
    from ingot.runtime import change_control, open_library
    from mcp_server.telemetry import setup_telemetry

    settings = settings_for(skills)
    setup_logging("WARNING")
    setup_telemetry(settings)  # OTEL_EXPORTER_OTLP_ENDPOINT: model calls as GenAI spans
    library = open_library(settings)
    control = change_control(settings, library=library)
    with progress(f"evaluate {skill}") as on_step:
        evaluated = evaluate_change(settings, library, control, skill, change_id, on_step=on_step)
    print_evaluation(evaluated, skill)


@click.command()
@skills_option
@click.argument("skill")
def mine(skills: tuple[Path, ...], skill: str) -> None:
    """How SKILL does on recorded traffic: mean score, failing dimensions, weakest tasks."""
    from ingot.model_runtime import judge as make_judge
    from ingot.model_runtime import model_run, trace_store
    from ingot.runtime import change_control, open_library, state_home
    from mcp_server.telemetry import setup_telemetry
    from optimize.control.autopilot import report_incident
    from optimize.measure.mining import mine as run_mining
    from optimize.measure.mining import record as record_score

    settings = settings_for(skills)
    setup_logging("WARNING")
    setup_telemetry(settings)  # OTEL_EXPORTER_OTLP_ENDPOINT: model calls as GenAI spans
    library = open_library(settings)
    served_skill(library, skill)
    with model_run(settings, f"mine-{skill}") as llm:
        report = run_mining(
            skill,
            trace_store(settings, prune_expired=True),
            library,
            make_judge(settings, llm),
            state_home(settings) / "cache" / "verdicts.jsonl",
        )
    click.echo(
        f"{skill}: {report.traces} traces ({report.by_tag} tagged, {report.by_routing} by routing), "
        f"{report.clusters} clusters, {report.judged} newly judged"
    )
    click.echo(f"mean score: {report.mean_score if report.mean_score is not None else 'no traffic'}")
    control = change_control(settings, library=library)
    record_score(control.runs_dir / "mining", report, dt.datetime.now(dt.UTC))
    if report.mean_score is not None and control.autonomy.mined(
        skill, report.mean_score, settings.loop_health_threshold
    ):
        why = f"mined live score {report.mean_score:.2f} dropped below {settings.loop_health_threshold:.2f}"
        for note in report_incident(control, skill, why, "ingot-mine"):
            click.echo(f"incident: {note}", err=True)
    for dimension, count in sorted(report.failing_dimensions.items(), key=lambda x: -x[1]):
        click.echo(f"  failing {dimension}: {count}")
    for score, task in report.weakest:
        click.echo(f"  eval candidate ({score:.2f}): {task}")
    if report.skipped_lines:
        click.echo(f"  ({report.skipped_lines} unreadable trace lines skipped)")


@click.command(name="loop")
@skills_option
@click.argument("targets", nargs=-1)
def loop_command(skills: tuple[Path, ...], targets: tuple[str, ...]) -> None:
    """Mine every skill with a task set (or TARGETS) and optimize the unhealthy ones (quarantined)."""
    from ingot.model_runtime import judge as make_judge
    from ingot.model_runtime import model_run, replay_context, researcher, sandbox, trace_store
    from ingot.runtime import change_control, open_library
    from mcp_server.telemetry import setup_telemetry
    from optimize.search.loop import run_loop

    settings = settings_for(skills)
    setup_logging("WARNING")
    setup_telemetry(settings)  # OTEL_EXPORTER_OTLP_ENDPOINT: model calls as GenAI spans
    library = open_library(settings)
    for target in targets:
        served_skill(library, target)
    control = change_control(settings, library=library)
    with model_run(settings, "loop") as llm:
        entries = run_loop(
            targets,
            library,
            control,
            llm,
            make_judge(settings, llm),
            trace_store(settings, prune_expired=True),
            settings.tasks_dir,
            settings.loop_health_threshold,
            settings.loop_passes,
            settings.optimize_candidates,
            progress=lambda message: click.echo(f"... {message}", err=True),
            sandbox=sandbox(settings),
            research=researcher(settings),
            replay=replay_context(settings),
        )
    for entry in entries:
        score = "-" if entry.mean_score is None else f"{entry.mean_score:.2f}"
        click.echo(f"{entry.skill}  {score}  {entry.action}: {entry.detail}")


@click.command(name="agent")
@click.argument("task")
@click.option("--cwd", default=None, help="Working directory to report to the router (default: here).")
@click.option("--no-create", is_flag=True, help="Evaluation mode: never call create_skill.")
def agent_command(task: str, cwd: str | None, no_create: bool) -> None:
    """Run the reference agent on TASK: route once, serve with the right model, record the run."""
    from agent.run import ReferenceAgent
    from ingot.model_runtime import agent_limits, llm_client, run_id, sandbox, trace_store
    from mcp_server.telemetry import setup_telemetry

    settings = settings_for()
    setup_logging("WARNING")
    setup_telemetry(settings)  # OTEL_EXPORTER_OTLP_ENDPOINT: model calls as GenAI spans
    mcp_url = settings.mcp_url or f"http://{settings.bind_host}:{settings.mcp_port}/mcp"
    try:
        llm, problem = llm_client(settings, run_id("agent")), None
    except ConfigError as exc:
        llm, problem = None, str(exc)
    agent = ReferenceAgent(
        mcp_url,
        llm,
        trace_store(settings),
        allow_mutation=not no_create,
        runner=sandbox(settings),
        limits=agent_limits(settings),
    )
    result = agent.run(task, cwd)
    revision = f" @ {result.revision[:12]}" if result.revision else ""
    click.echo(f"route: {result.route} {result.skill or 'none'}{revision} (score {result.score:.3f})")
    if result.answer is None:
        click.echo(f"no model call: {problem or result.note}")
        click.echo(
            "set BASE_URL, AGENT_MODEL and STRONG_MODEL or TEACHER_MODEL (and API_KEY for a remote "
            "endpoint) to let the agent answer; the route above is what it would serve"
        )
        return
    click.echo(
        f"model: {result.model}; model calls: {result.model_calls}; "
        f"tokens in/out: {result.tokens_in}/{result.tokens_out}; "
        f"tools: {', '.join(result.tools) or 'none'}"
    )
    if result.note:
        click.echo(f"note: {result.note}")
    for change_id in result.created:
        click.echo(f"queued a new skill for review: {change_id} (see `ingot pending`)")
    click.echo("")
    click.echo(result.answer)


@click.command()
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
    from ingot.cli.serve import is_loopback, listen
    from ingot.model_runtime import trace_store
    from ingot.runtime import state_home
    from mcp_server.sessions import SessionRoutes
    from optimize.models.cassette import Cassette

    settings = settings_for(proxy_port=port)
    setup_logging(settings.log_level)
    if not is_loopback(settings.bind_host):
        raise ConfigError(f"the capture proxy binds loopback only; BIND_HOST is {settings.bind_host}")
    cassette = None
    if settings.cassette_mode in ("record", "record-missing"):
        cassette = Cassette(state_home(settings) / "cassettes" / "proxy.jsonl", "record")
    store, routes = trace_store(settings), SessionRoutes(state_home(settings))  # a bad root fails first
    # Bound before it is announced: a taken port is one line and exit 2 (EXIT_CODES), not a
    # started server that then fails to bind.
    named = "--port" if port is not None else "PROXY_PORT or --port"
    sock = listen(settings.bind_host, settings.proxy_port, named)
    try:
        app = build_proxy(upstream, store, routes, cassette, harness)
        click.echo(
            f"ingot: capture proxy at http://{settings.bind_host}:{settings.proxy_port}/v1 -> {upstream}",
            err=True,
        )
        config = uvicorn.Config(app, log_level=settings.log_level.lower())
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


COMMANDS = (optimize, evaluate, mine, loop_command, agent_command, proxy)
