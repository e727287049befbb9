"""`ingot` change-control commands that write: propose, approve, reject, rollback, migrate.

The read-only reports (pending, history, status, audit verify) are in reports.py.

Registered on the group by `main.py`; this module imports only `options` and `progress` from the CLI."""

from __future__ import annotations

from pathlib import Path

import click

from ingot.cli.options import print_evaluation, settings_for, setup_logging, skills_option


def _control(skills: tuple[Path, ...]):  # noqa: ANN202 - (ChangeControl, actor), imported lazily
    """Change control for a command that writes, and who is acting."""
    from ingot.runtime import actor, change_control

    settings = settings_for(skills)
    setup_logging("WARNING")
    return change_control(settings), actor(settings)


@click.command()
@skills_option
@click.argument("skill")
@click.option(
    "--from",
    "source_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Folder holding the candidate SKILL.md and its files.",
)
@click.option(
    "--new",
    is_flag=True,
    help="SKILL is a new skill (by default SKILL must be live, and the candidate changes it).",
)
@click.option(
    "--remove",
    is_flag=True,
    help="Propose that SKILL stop being served (instead of --from); its revision stays in the snapshots.",
)
@click.option("--note", default=None, help="Why you propose it (shown to the reviewer).")
@click.option(
    "--no-evaluate",
    is_flag=True,
    help="Only queue it; measure later with `ingot evaluate` (by default every cell that can run does).",
)
def propose(
    skills: tuple[Path, ...],
    skill: str,
    source_dir: Path | None,
    new: bool,
    remove: bool,
    note: str | None,
    no_evaluate: bool,
) -> None:
    """Quarantine a hand-made candidate for SKILL (operator source; never served until approved),
    then evaluate it: every evidence cell that applies to what it changes (its kind: create, body,
    description, both, or removal with --remove).

    The folder may be called anything; its SKILL.md must declare SKILL as its name."""
    from ingot.cli.progress import progress
    from ingot.evaluation import evaluate_change, propose_measured
    from ingot.runtime import change_control, open_library
    from optimize.control.proposals import ProposalWithheld
    from optimize.control.quarantine import admit, propose_removal, read_candidate
    from optimize.measure.size import change_size

    settings = settings_for(skills, may_be_empty=True)  # an empty library gets its first skill here
    if remove == (source_dir is not None) or (remove and new):
        raise click.UsageError("give --from DIR (a candidate, with --new for a new skill) or --remove")
    setup_logging("WARNING")
    library = open_library(settings)
    control = change_control(settings, library=library)
    live = control.champion_files(skill) if control.root_of(skill) else None
    evaluated = None
    if remove:
        proposed = propose_removal(control, skill, note)
    else:
        assert source_dir is not None
        files, description = read_candidate(source_dir, skill, control, new=new)
        if no_evaluate:
            proposed = admit(
                control, skill, files, "operator", library.similarity(skill, description), note, new=new
            )
        else:  # measured before it is queued: whether it waits or is withheld rests on all of it
            with progress(f"propose {skill}") as on_step:
                proposed, evaluated = propose_measured(
                    settings, library, control, skill, files, note, new, on_step
                )
    change = proposed.change
    if proposed.withheld:
        raise ProposalWithheld(
            f"withheld: a better change is waiting ({proposed.waiting}); reject or approve it first. "
            f"This candidate was archived as {change.id} ({proposed.withheld})"
        )
    size = change_size(skill, live or {}, change.files).label
    click.echo(
        f"pending {change.id}: {change.kind} change of {skill} {(change.champion_revision or 'new')[:12]} -> "
        f"{change.candidate_revision[:12]}, {size} (not served until approved)"
    )
    if proposed.displaced:
        click.echo(f"displaced the previous candidate to {proposed.displaced}")
    if evaluated is None and not no_evaluate:  # a removal: measured once queued (no model needed)
        with progress(f"evaluate {skill}") as on_step:
            evaluated = evaluate_change(settings, library, control, skill, change.id, on_step=on_step)
    if evaluated is not None:
        print_evaluation(evaluated, skill)


@click.command()
@skills_option
@click.argument("skill")
@click.option(
    "--change",
    "change_id",
    required=True,
    help="The change id you reviewed (from `ingot pending`); a newer candidate is a conflict.",
)
@click.option(
    "--accept-missing",
    "accept_missing",
    default=None,
    metavar="REASON",
    help="Approve a change whose passport needs acknowledgement: why its missing cells are acceptable "
    "(audited with the cells).",
)
@click.option(
    "--accepting",
    default=None,
    metavar="CELLS",
    help='The missing cells you accept, comma-separated as `ingot pending` names them (e.g. "replay,cost"): '
    "if another is missing by the time you approve, nothing is approved (exit 3).",
)
@click.option(
    "--override-reason",
    default=None,
    help="Override an overridable failure (a replay BLOCK; an A/B or routing impact that measured no "
    "gain, with no harm): why it is acceptable (audited).",
)
def approve(
    skills: tuple[Path, ...],
    skill: str,
    change_id: str,
    accept_missing: str | None,
    accepting: str | None,
    override_reason: str | None,
) -> None:
    """Re-verify SKILL's pending change against its evidence and promote it.

    A ready change needs nothing more. One that needs acknowledgement (cells missing) needs
    --accept-missing "REASON" and --accepting "CELLS", naming why and which; an overridable failure
    (a replay BLOCK, a measurement that showed no gain and no harm) needs --override-reason. Both
    are audited with the cells they accept; any other failed cell cannot be approved."""
    control, who = _control(skills)
    cells = None if accepting is None else [c.strip() for c in accepting.split(",") if c.strip()]
    if accept_missing and accept_missing.strip() and cells is None:  # the cells accepted, as seen
        from optimize.control.verify import ApprovalRefused

        verdict = control.passport(control.pending_change(skill, change_id))
        missing = ",".join(c.name for c in verdict.missing) if verdict else ""
        raise ApprovalRefused(
            f'--accept-missing needs the cells it accepts, as you saw them: --accepting "{missing}" '
            "(nothing missing is accepted unnamed; if another goes missing by then, nothing is approved)"
        )
    outcome = control.approve(
        skill, who, change_id, accept_missing=accept_missing, override_reason=override_reason, accepting=cells
    )
    if outcome.to_revision is None:
        was = (outcome.from_revision or "")[:12]
        click.echo(f"removed {skill} (was {was}); `ingot rollback {skill} {was} --live absent` restores it")
        return
    click.echo(f"promoted {skill}: {(outcome.from_revision or 'new')[:12]} -> {outcome.to_revision[:12]}")


@click.command()
@skills_option
@click.argument("skill")
@click.option(
    "--change",
    "change_id",
    required=True,
    help="The change id you reviewed (from `ingot pending`); a newer candidate is a conflict.",
)
@click.option("--reason", required=True, help="Why (kept in the archive and the audit log).")
def reject(skills: tuple[Path, ...], skill: str, change_id: str, reason: str) -> None:
    """Reject SKILL's pending change; it stays in the archive with the reason."""
    control, who = _control(skills)
    click.echo(f"rejected {change_id}; archived at {control.reject(skill, reason, who, change_id)}")


@click.command()
@skills_option
@click.argument("skill")
@click.argument("revision")
@click.option(
    "--live",
    "live",
    required=True,
    help="The live revision you saw in `ingot history` (8+ characters, or `absent` if SKILL is not "
    "live); if another is live now, nothing changes (exit 3).",
)
@click.option("--reason", default=None, help="Why (kept in the audit log).")
def rollback(skills: tuple[Path, ...], skill: str, revision: str, live: str, reason: str | None) -> None:
    """Restore SKILL to the snapshot REVISION (a prefix from `ingot history`), or remove a skill
    Ingot created with REVISION `absent`. The replaced revision is snapshotted first, so this can
    be undone the same way."""
    control, who = _control(skills)
    outcome = control.rollback(skill, revision, who, reason, expected_live=live)
    was = (outcome.from_revision or "absent")[:12]
    if outcome.to_revision is None:
        click.echo(f"removed {skill} (was {was}); `ingot rollback {skill} {was} --live absent` restores it")
        return
    click.echo(f"rolled back {skill}: {was} -> {outcome.to_revision[:12]}")


@click.command()
@skills_option
@click.option(
    "--from",
    "legacy",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="An older Ingot's state folder (its RUNS_DIR, usually ./runs) to move into the state home.",
)
def migrate(skills: tuple[Path, ...], legacy: Path | None) -> None:
    """Move an older Ingot's state into this library's state home and key its audit chain."""
    from ingot.home import establish
    from ingot.runtime import actor
    from optimize.control.migrate import adopt_chain, move_state

    settings = settings_for(skills)
    setup_logging("WARNING")
    home = establish(settings.skills_dirs, settings.ingot_home, check_legacy=False)
    if legacy is not None:
        moved, adopted = move_state(legacy, home.path, actor(settings))
        click.echo(f"moved {len(moved)} entries from {legacy} to {home.path}: {', '.join(moved) or 'none'}")
    else:
        adopted = adopt_chain(home.path, actor(settings))
    if adopted is not None:
        click.echo(
            f"audit chain keyed: line {adopted.seq} adopts the unkeyed head {adopted.get('legacy_head')[:16]}"
        )
    else:
        click.echo(f"the audit chain in {home.path} is already keyed (or empty); nothing to adopt")


COMMANDS = (propose, approve, reject, rollback, migrate)
