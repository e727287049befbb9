"""`ingot` commands for regression replay: traces, bless, goldens (list, show, approve, retire)
and replay.

Registered on the group by `main.py`; this module imports only `options` and `progress` from the CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import yaml

from ingot.cli.options import print_json, settings_for, setup_logging, skills_option
from ingot.errors import ConfigError, IngotError, NotFound, did_you_mean


def _admin(skills: tuple[Path, ...]):
    from ingot.runtime import actor, change_control
    from optimize.control.goldens_admin import GoldenAdmin

    settings = settings_for(skills)
    setup_logging("WARNING")
    return GoldenAdmin(change_control(settings)), actor(settings), settings


def _store(skills: tuple[Path, ...]):  # noqa: ANN202 - a GoldenStore
    """The goldens of the state home as it is, for reading (nothing is created)."""
    from ingot.runtime import reading_home
    from optimize.measure.golden_store import GoldenStore

    settings = settings_for(skills)
    setup_logging("WARNING")
    return GoldenStore(reading_home(settings).path / "goldens")


@click.command()
@skills_option
@click.argument("skill", required=False)
@click.option("--limit", default=20, show_default=True, help="How many of the most recent runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the same runs as JSON.")
def traces(skills: tuple[Path, ...], skill: str | None, limit: int, as_json: bool) -> None:
    """Recorded runs (newest first), with the id `ingot bless` takes."""
    from ingot.model_runtime import trace_store

    settings = settings_for(skills)
    read = trace_store(settings, read_only=True).read()
    records = [r for r in read.records if skill is None or r.skill == skill]
    shown = list(reversed(records))[:limit]
    if as_json:
        print_json(
            {
                "schema_version": 1,
                "skill": skill,
                "limit": limit,
                "total": len(records),
                "unreadable_lines": read.skipped,
                "traces": [
                    {
                        "id": r.id,
                        "time": r.time,
                        "route": r.route,
                        "skill": r.skill,
                        "revision": r.revision,
                        "harness": r.harness,
                        "final": _final(r),
                        "task": r.task,
                    }
                    for r in shown
                ],
            }
        )
        return
    if not records:
        click.echo(
            f"no recorded runs{f' of {skill}' if skill else ''}; "
            "run a task through `ingot agent` or `ingot proxy`"
        )
    for record in shown:
        served = f"{record.skill}@{(record.revision or '')[:12]}" if record.skill else record.route
        click.echo(
            f"{record.id}  {record.time}  {served}  {record.harness or '-'}  {_final(record)}  "
            f"{record.task[:60]!r}"
        )


def _final(record) -> str:  # noqa: ANN001 - a TraceRecord
    """What the run's last model call did: answered, or asked for a tool."""
    return "answer" if record.answer and not record.tool_calls else "tool call"


@click.command()
@skills_option
@click.argument("trace_id")
@click.option("--no-draft", is_flag=True, help="Do not ask the teacher for criteria; write them yourself.")
def bless(skills: tuple[Path, ...], trace_id: str, no_draft: bool) -> None:
    """Make the recorded run TRACE_ID a golden of the skill revision that served it."""
    from ingot.model_runtime import llm_client, run_id, trace_store
    from optimize.measure.golden_criteria import draft_review
    from optimize.models.traces import find_trace

    admin, who, settings = _admin(skills)
    store = trace_store(settings)
    record = find_trace(store, trace_id)
    if record is None:  # exit 2, an unknown id (EXIT_CODES), naming the nearest recorded ones
        known = [r.id for r in store.read().records]
        raise NotFound(
            f"no recorded run {trace_id!r} (within TRACE_RETENTION_DAYS){did_you_mean(trace_id, known)}; "
            "`ingot traces` lists them"
        )
    drafter = None
    if not no_draft and settings.teacher_model:
        llm = llm_client(settings, run_id("bless"))
        drafter = lambda golden: draft_review(llm, golden)[0]  # noqa: E731
    undrafted = (
        f"--no-draft (the teacher {settings.teacher_model} was not asked)"
        if settings.teacher_model
        else "no teacher model is configured (TEACHER_MODEL)"
    )
    stored, created = admin.bless(record, who, drafter, undrafted)
    click.echo(
        f"{'blessed' if created else 'already blessed'}: {stored.id} for "
        f"{stored.golden.skill}@{stored.golden.revision[:12]}"
    )
    _echo_review(stored)
    click.echo(
        f"review it: `ingot goldens show {stored.id}`; approve or edit the criteria: "
        f"`ingot goldens approve {stored.id} [--from FILE]`"
    )


class _Goldens(click.Group):
    """`ingot goldens [SKILL]` lists; `ingot goldens show|approve|retire ID` act on one."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            return "list", self.commands["list"], args
        return super().resolve_command(ctx, args)


@click.group(cls=_Goldens, invoke_without_command=True)
@click.pass_context
def goldens(ctx: click.Context) -> None:
    """Goldens: blessed runs every change of their skill is replayed against."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_goldens)


@goldens.command(name="list")
@skills_option
@click.argument("skill", required=False)
@click.option("--all", "everything", is_flag=True, help="Include retired goldens.")
@click.option("--json", "as_json", is_flag=True, help="Print the same list as JSON.")
def list_goldens(
    skills: tuple[Path, ...] = (), skill: str | None = None, everything: bool = False, as_json: bool = False
) -> None:
    """List goldens (of SKILL): id, revision, state, criteria status, task."""
    found, problems = _store(skills).all(skill)
    shown = [s for s in found if everything or s.review.state == "active"]
    if as_json:
        print_json(
            {
                "schema_version": 1,
                "skill": skill,
                "retired_included": everything,
                "goldens": [
                    {
                        "id": s.id,
                        "skill": s.golden.skill,
                        "revision": s.golden.revision,
                        "state": s.review.state,
                        "criteria_status": s.review.status,
                        "criteria": len(s.review.criteria),
                        "facts": len(s.review.facts),
                        "task": s.golden.task,
                    }
                    for s in shown
                ],
                "unreadable": problems,
            }
        )
        return
    if not shown:
        click.echo(
            f"no goldens{f' for {skill}' if skill else ''}; bless a good run with `ingot bless TRACE_ID`"
        )
    for stored in shown:
        golden, review = stored.golden, stored.review
        click.echo(
            f"{stored.id}  {golden.skill}@{golden.revision[:12]}  {review.state}  criteria {review.status} "
            f"({len(review.criteria)}, {len(review.facts)} facts)  {golden.task[:60]!r}"
        )
    for problem in problems:
        click.echo(f"UNREADABLE {problem}")


@goldens.command()
@skills_option
@click.argument("golden_id")
@click.option(
    "--yaml", "as_yaml", is_flag=True, help="Only the criteria and world facts, to edit and `approve --from`."
)
def show(skills: tuple[Path, ...], golden_id: str, as_yaml: bool) -> None:
    """Show a golden: the run, its steps, its criteria and world facts."""
    stored = _find(_store(skills), golden_id)
    if as_yaml:
        click.echo(yaml.safe_dump(_editable(stored), sort_keys=False, allow_unicode=True))
        return
    golden = stored.golden
    click.echo(f"{stored.id}  {golden.skill}@{golden.revision}  ({stored.review.state})")
    click.echo(
        f"from trace {golden.source.get('trace')} at {golden.source.get('time')}; "
        f"harness {golden.harness}; model {golden.model}"
    )
    click.echo(f"task: {golden.task}")
    for step in golden.steps:
        click.echo(
            f"  step {step.index}: {step.name}({json.dumps(step.arguments)[:120]}) -> {step.result[:160]!r}"
        )
    click.echo("answer:")
    click.echo("  " + golden.answer.replace("\n", "\n  "))
    _echo_review(stored)


def _find(store, golden_id: str):  # noqa: ANN001, ANN202 - a GoldenStore, a Stored
    """The golden `golden_id` names (an id or a prefix of at least six hex digits), or `NotFound`
    (exit 2, EXIT_CODES) naming the nearest ids when it names none or several."""
    found, _ = store.all()
    ids = [s.id for s in found]
    prefix = golden_id.strip().lower().removeprefix("g-")
    matches = [s for s in found if len(prefix) >= 6 and s.golden.digest.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        listed = ", ".join(s.id for s in matches[:4])
        raise NotFound(f"{golden_id!r} names {len(matches)} goldens ({listed}); give more of the id")
    nearest = did_you_mean(golden_id, ids)
    raise NotFound(f"no golden {golden_id!r}{nearest}; `ingot goldens list --all` lists them")


def _one_line(exc: Exception) -> str:
    """A YAML or OS error as one line: the problem and where it is."""
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{getattr(exc, 'problem', None) or exc}{where}".replace("\n", " ")


def _editable(stored) -> dict[str, Any]:
    return {
        "criteria": [c.text for c in stored.review.criteria],
        "world_facts": [
            {"step": f.step, "label": f.label, "value": f.value, "quotes": list(f.quotes)}
            for f in stored.review.facts
        ],
    }


def _echo_review(stored) -> None:
    review = stored.review
    who = f" by {review.approved_by} at {review.approved_at}" if review.status == "human-approved" else ""
    drafted = f" (drafted by {review.drafted_by})" if review.drafted_by else ""
    click.echo(f"criteria: {review.status}{who}{drafted}")
    for criterion in review.criteria:
        click.echo(f"  {criterion.id}: {criterion.text}")
    for fact in review.facts:
        click.echo(f"  {fact.id}: {fact.label} = {fact.value} (step {fact.step}, {fact.tool})")
        for quote in fact.quotes:
            click.echo(f"    quoted in the answer: {quote!r}")
    for note in review.notes:
        click.echo(f"  note: {note}")
    if review.state == "retired":
        click.echo(f"retired by {review.retired_by} at {review.retired_at}: {review.retired_reason}")


@goldens.command()
@skills_option
@click.argument("golden_id")
@click.option(
    "--from",
    "source",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="YAML with `criteria` and `world_facts` (see `show --yaml`); default: approve them as they are.",
)
def approve(skills: tuple[Path, ...], golden_id: str, source: Path | None) -> None:
    """Approve a golden's criteria and world facts as yours (edited from FILE, or as drafted)."""
    admin, who, _ = _admin(skills)
    stored = _find(admin.store, golden_id)
    data = _editable(stored)
    if source is not None:
        try:
            data = yaml.safe_load(source.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{source} is not readable YAML: {_one_line(exc)}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("criteria", []), list):
            raise ConfigError(f"{source} needs a `criteria` list (and optionally `world_facts`)")
    stored = admin.approve(
        stored.id, who, [str(c) for c in data.get("criteria") or []], data.get("world_facts") or []
    )
    click.echo(f"approved {stored.id}")
    _echo_review(stored)


@goldens.command()
@skills_option
@click.argument("golden_id")
@click.option("--reason", required=True, help="Why it no longer applies (kept in the audit chain).")
def retire(skills: tuple[Path, ...], golden_id: str, reason: str) -> None:
    """Stop replaying a golden; it stays on disk and in the audit chain."""
    admin, who, _ = _admin(skills)
    stored = admin.retire(_find(admin.store, golden_id).id, who, reason)
    click.echo(f"retired {stored.id} ({stored.golden.skill}): {reason}")


@click.command()
@skills_option
@click.argument("skill")
@click.option("--json", "as_json", is_flag=True, help="Print the whole replay cell as JSON.")
def replay(skills: tuple[Path, ...], skill: str, as_json: bool) -> None:
    """Replay SKILL's goldens with its live revision alone (catches a serving-model change).

    A regression with the world unchanged (every world tool answered as recorded) is an incident:
    a model or harness change, and the output says which serving model it was recorded and
    replayed with; every change class of SKILL drops to manual autonomy, and a revision autonomy
    promoted is rolled back. A golden one of whose tool calls answers differently now is stale
    instead (the world moved): named with the values that moved and how to re-bless it, never an
    incident, unless replaying it with every call answered as recorded regresses too (then the
    move does not explain it, and it is an incident). Exits 0 when the cell passes (a stale golden that held
    against today's values included), 1 when it fails, is missing (the replays could not decide,
    or a stale golden did not hold) or has nothing to replay."""
    from ingot.cli.progress import progress
    from ingot.model_runtime import llm_client, replay_context, run_id, sandbox
    from ingot.progress import Steps
    from ingot.runtime import change_control
    from optimize.control.autopilot import report_incident

    settings = settings_for(skills)
    setup_logging("WARNING")
    control = change_control(settings)
    root = control.root_of(control.require_skill(skill))  # an unknown name: the nearest known ones
    if root is None:
        raise IngotError(f"skill {skill!r} is not live (`ingot history {skill}` shows what happened)")
    files = control.promoter.read_tree(root / skill, skill)
    llm = llm_client(settings, run_id(f"replay-{skill}"), cassette_name=f"replay-{skill}")
    with progress(f"replay {skill}") as on_step:  # stderr: --json stays clean
        count = Steps(["replay"], on_step).begin("replay")
        cell = replay_context(settings).cell(skill, None, files, llm, sandbox(settings), count)
    if as_json:
        print_json(cell)
    else:
        _echo_cell(skill, cell)
    if cell.get("verdict") == "BLOCK":  # a world move is stale (WARN), never a BLOCK here
        live = control.live_revision(skill) or "none"
        reasons = "; ".join(cell.get("reasons") or [])
        why = f"a blessed run regressed on the live revision {live[:12]}: {reasons}"
        for note in report_incident(control, skill, why, "ingot-replay", key=f"replay:{live}"):
            click.echo(f"incident: {note}", err=True)
    sys.exit(0 if cell.get("verdict") == "PASS" else 1)


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def _echo_cell(skill: str, cell: dict[str, Any]) -> None:
    from optimize.control.replay_rule import FINDING_OF, STATE_OF
    from optimize.measure.replay_verdict import cause, said_rulings

    if cell["status"] != "measured":
        click.echo(f"replay not measured: {cell['why']}")
        return
    tiers = ", ".join(f"{tier}={model or 'skipped'}" for tier, model in cell["tiers"].items())
    click.echo(
        f"replay {skill} @ {cell['candidate_revision'][:12]} (live revision alone; serving model "
        f"{cell['serving_model']}; tiers {tiers})"
    )
    for entry in cell["goldens"]:
        click.echo(
            f"  {entry['id']}  {FINDING_OF.get(entry['verdict'], '?'):<9} {entry['tier']}  {entry['why']}"
        )
        for card in entry["drift"]:
            call = f"step {card['step']} " if card.get("step") else ""
            click.echo(
                f"      drift: {card['label']} {card['old']} -> {card['new']} ({call}{card['tool']}"
                f"({json.dumps(card['arguments'], sort_keys=True)[:80]}); {card['source']}; "
                f"{card['corroboration']}): {card['ruling']}"
            )
        if entry.get("ruling") == "stale":
            held = (
                "it held against the values now" if entry["verdict"] == "PASS" else "not blamed on the skill"
            )
            click.echo(
                f"      stale: the world moved, {held}: no incident (autonomy and the live revision stay)"
            )
            click.echo(f"      re-bless: {entry['rebless']}")
        elif entry["verdict"] == "BLOCK":
            click.echo(f"      incident: regressed; {cause(entry)}")
    click.echo(f"replay: {STATE_OF.get(cell['verdict'], 'fail')} (the passport's replay cell)")
    for ruling in said_rulings(cell):
        click.echo(f"  ruled by a model: {ruling}")
    click.echo(cell["rationale"])
    cost = cell["cost"]
    tiers = ", ".join(f"{t} {_usd(b['usd'])} ({b['calls']} calls)" for t, b in cost["judging"].items())
    click.echo(
        f"cost: {_usd(cost['usd'])} (serving {_usd(cost['serving']['usd'])}{', ' + tiers if tiers else ''})"
    )
    counter = cell["counterfactual"]
    if counter.get("all_strongest_usd") is not None:
        click.echo(
            f"judging everything with {counter['strongest_model']} would cost "
            f"${counter['all_strongest_usd']:.4f}"
        )
    for problem in cell["skipped_goldens"]:
        click.echo(f"  skipped: {problem}")


COMMANDS = (traces, bless, goldens, replay)
