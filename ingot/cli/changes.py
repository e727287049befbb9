"""`ingot` change-control commands: propose, pending, approve, reject, rollback, history, status, audit.

Registered on the group by `main.py`; this module imports only `options` from the CLI."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ingot.cli.options import print_evaluation, print_json, settings_for, setup_logging, skills_option


def _control(skills: tuple[Path, ...], read_only: bool = False):
    """Change control for a command; `read_only` for one that only reads (it writes nothing, not
    even the state home: ingot/runtime.py)."""
    from ingot.runtime import actor, change_control

    settings = settings_for(skills)
    setup_logging("WARNING")
    return change_control(settings, read_only=read_only), actor(settings)


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
            proposed, evaluated = propose_measured(settings, library, control, skill, files, note, new)
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
        evaluated = evaluate_change(settings, library, control, skill, change.id)
    if evaluated is not None:
        print_evaluation(evaluated, skill)


@click.command(name="pending")
@skills_option
@click.option("--json", "as_json", is_flag=True, help="Print each change with its passport as JSON.")
def list_pending(skills: tuple[Path, ...], as_json: bool) -> None:
    """List the changes waiting for a decision: kind, size and passport state (ready,
    needs-acknowledgement or blocked) with the cells that make it so."""
    from optimize.measure.size import change_size

    control, _ = _control(skills, read_only=True)
    changes = control.pending()
    rows = []
    for change in changes:
        verdict = control.passport(change)
        root = control.root_of(change.skill)
        live = control.champion_files(change.skill) if root is not None and change.champion_revision else {}
        size = change_size(change.skill, live or {}, change.files)
        rows.append((change, verdict, size))
    if as_json:
        print_json(
            [
                {
                    "skill": c.skill,
                    "change": c.id,
                    "kind": c.kind,
                    "source": c.source,
                    "from": c.champion_revision,
                    "to": c.candidate_revision,
                    "size": {"added": z.added, "removed": z.removed, "label": z.label},
                    "passport": v.as_json()
                    if v
                    else {
                        "kind": c.kind,
                        "state": "blocked",
                        "cells": [],
                        "why": "no readable evidence bundle",
                    },
                }
                for c, v, z in rows
            ]
        )
        return
    if not changes:
        click.echo("nothing pending")
    for change, verdict, size in rows:
        state = verdict.summary if verdict else "blocked: the evidence bundle is missing or unreadable"
        click.echo(
            f"{change.skill}  {change.id}  {change.kind} change from {change.source}  "
            f"{(change.champion_revision or 'new')[:12]} -> {change.candidate_revision[:12]}  "
            f"{size.label}  {state}"
        )


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
    if accept_missing and cells is None:  # a person names the cells they accept, as they saw them
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
@click.argument("skill")
@click.option("--json", "as_json", is_flag=True, help="Print the events and snapshots as JSON.")
def history(skills: tuple[Path, ...], skill: str, as_json: bool) -> None:
    """SKILL's audited changes and the snapshots that can be restored (`absent`, for a skill
    Ingot created, removes it), with the rollback command that pins what is live now."""
    from optimize.control.promote import ABSENT

    control, _ = _control(skills, read_only=True)
    entries = control.history(skill)
    live = control.live_revision(skill)
    root = control.root_of(skill)
    snapshots = control.snapshots(skill)
    if as_json:
        now = live or ABSENT  # the snapshot that is live: `absent` when the skill is not
        print_json(
            {
                "schema_version": 1,
                "skill": skill,
                "live_revision": live,
                "root": str(root) if root else None,
                "events": [_event_json(e) for e in entries],
                "snapshots": [{"revision": r, "live": r == now} for r in snapshots],
            }
        )
        return
    click.echo(f"{skill}: " + (f"live {live[:12]} in {root}" if live else "not live (absent)"))
    if not entries:
        click.echo("  no change-control events yet (Ingot has not changed it)")
    for entry in entries:
        click.echo(
            f"{entry.seq:>5}  {entry.time[:19].replace('T', ' ')}  {entry.get('action'):<16} "
            f"{(entry.get('from_revision') or '-')[:12]:>12} -> {(entry.get('to_revision') or '-')[:12]:<12}"
            f"  {entry.get('actor', '')}  {entry.get('outcome') or entry.get('reason') or ''}".rstrip()
        )
    for revision in snapshots:
        note = "  (live)" if revision == live else ""
        if revision == ABSENT:
            note = (
                "  (live: not served now)"
                if live is None
                else "  removes the skill (it did not exist before)"
            )
        click.echo(f"snapshot {revision}{note}")
    if snapshots:
        click.echo(f"roll back with: ingot rollback {skill} REVISION --live {(live or ABSENT)[:12]}")
    else:
        click.echo("no snapshots: Ingot has not replaced a revision of it yet")


def _event_json(entry) -> dict:  # noqa: ANN001 - an AuditEntry
    """One audit line as `history --json` shows it: the fields the text shows, null where absent."""
    return {
        "seq": entry.seq,
        "time": entry.time,
        "action": entry.get("action"),
        "from_revision": entry.get("from_revision"),
        "to_revision": entry.get("to_revision"),
        "actor": entry.get("actor"),
        "outcome": entry.get("outcome"),
        "reason": entry.get("reason"),
        "change_id": entry.get("change_id"),
    }


@click.command()
@skills_option
@click.option("--json", "as_json", is_flag=True, help="Print the same report as JSON (same exit code).")
def status(skills: tuple[Path, ...], as_json: bool) -> None:
    """Live revisions, drift from the audited revision, pending changes and the audit chain.

    Exits 1 when a skill has drifted, the audit chain is broken, or a pending record is not in it."""
    control, _ = _control(skills, read_only=True)
    report = control.status()
    sandbox = _sandbox_state(skills)
    audit = report.audit
    if as_json:
        print_json(_status_json(report, sandbox))
    else:
        for skill in report.skills:
            shown = skill.live_revision or ("absent" if skill.removed else "MISSING/INVALID")
            click.echo(
                f"{skill.name}  {shown[:15]}  {_FLAGS[_skill_state(skill)]}"
                + (f"  (audited {(skill.audited_revision or 'absent')[:12]})" if skill.drifted else "")
                + (f"  pending {skill.pending}" if skill.pending else "")
            )
        for problem in report.invalid:
            click.echo(f"INVALID {problem}")
        for problem in report.unaudited:
            click.echo(f"UNAUDITED pending {problem}")
        click.echo(
            f"audit: {'ok' if audit.ok else f'BROKEN at line {audit.bad_line}: {audit.problem}'}"
            f" ({audit.lines} lines, head {audit.head_hash[:16]})"
        )
        for root in report.roots:
            click.echo(f"root {root.root}: live edits {root.live_edits}{_git_line(root.git)}")
        interrupted = [s.name for s in report.skills if s.recovery_pending]
        if interrupted:
            click.echo(
                f"recovery pending: an interrupted change to {', '.join(interrupted)}; the next "
                "change-control command (or `ingot serve`) settles it from what is live"
            )
        _echo_sandbox(sandbox)
    if report.drifted or not audit.ok or report.unaudited:
        sys.exit(1)


# Each skill's state in `ingot status`, and how the text shows it.
_FLAGS = {
    "recovery-pending": "RECOVERY PENDING",
    "drifted": "DRIFTED",
    "removed": "removed by Ingot",
    "unaudited": "unaudited",
    "ok": "ok",
}


def _skill_state(skill) -> str:  # noqa: ANN001 - a SkillStatus
    if skill.recovery_pending:
        return "recovery-pending"
    if skill.drifted:
        return "drifted"
    if skill.removed:
        return "removed"
    return "unaudited" if skill.audited_revision is None else "ok"


def _status_json(report, sandbox) -> dict:  # noqa: ANN001 - a Status and a SandboxStatus
    """`status --json`: the facts the text shows, null where unknown (a git root not compared)."""
    audit = report.audit
    return {
        "schema_version": 1,
        "ok": not (report.drifted or not audit.ok or report.unaudited),
        "skills": [
            {
                "name": s.name,
                "root": str(s.root),
                "state": _skill_state(s),
                "live_revision": s.live_revision,
                "audited_revision": s.audited_revision,
                "pending": s.pending,
            }
            for s in report.skills
        ],
        "invalid": list(report.invalid),
        "unaudited_pending": list(report.unaudited),
        "audit": {
            "ok": audit.ok,
            "lines": audit.lines,
            "head": audit.head_hash,
            "bad_line": audit.bad_line,
            "problem": audit.problem,
        },
        "roots": [
            {"root": str(r.root), "live_edits": r.live_edits, "git": _git_json(r.git)} for r in report.roots
        ],
        "sandbox": {
            "mode": sandbox.mode,
            "ready": sandbox.ready,
            "detail": sandbox.detail,
            "isolation": sandbox.isolation or None,
        },
    }


def _git_json(git) -> dict | None:  # noqa: ANN001 - a GitState or None
    if git is None:
        return None
    return {
        "head": git.head,
        "recorded_seq": git.recorded_seq,
        "audit_seq": git.audit_seq,
        "foreign_commits": git.foreign,
        "stale_index": list(git.stale_index),
        "in_step": git.in_step,
        "problem": git.problem,
    }


def _git_line(git) -> str:  # noqa: ANN001 - a GitState or None
    """How a git skills root's HEAD compares with the audit chain."""
    if git is None:
        return ""
    if git.problem:
        return f"; git: unreadable ({git.problem})"
    head = f"HEAD {git.head[:12]}" if git.head else "no commits"
    recorded = f"audit line {git.recorded_seq}" if git.recorded_seq is not None else "no Ingot commit"
    if git.in_step:
        return f"; git: {head} records {recorded}, the chain's last switch here (in step)"
    notes = []
    if git.recorded_seq != git.audit_seq:
        notes.append(
            f"the chain's last switch here is line {git.audit_seq}: run any change command to commit it"
        )
    if git.foreign:
        notes.append(f"{git.foreign} commit(s) since touch the skills without Ingot")
    if git.stale_index:
        notes.append(
            f"the index holds old bytes of {len(git.stale_index)} file(s) Ingot committed "
            f"({', '.join(git.stale_index[:3])}): a `git commit` now would revert them; run any change "
            "command to re-sync it"
        )
    return f"; git: {head} records {recorded}; " + "; ".join(notes)


def _sandbox_state(skills: tuple[Path, ...]):  # noqa: ANN202 - a SandboxStatus
    from ingot.runtime import sandbox
    from optimize.control.status import sandbox_status

    settings = settings_for(skills)
    return sandbox_status(settings.exec_sandbox, sandbox(settings))


def _echo_sandbox(state) -> None:  # noqa: ANN001 - a SandboxStatus
    """Whether checks and skill scripts can run here; a sandbox that cannot does not change the
    exit code (nothing drifted), but every execution check would be inconclusive."""
    if state.ready:
        click.echo(f"sandbox: {state.mode} ready: {state.isolation}")
    else:
        click.echo(
            f"sandbox: {state.mode} NOT READY ({state.detail}): execution checks are inconclusive "
            "and the agent cannot run skill scripts"
        )


@click.group()
def audit() -> None:
    """The tamper-evident audit chain."""


@audit.command(name="verify")
@skills_option
def audit_verify(skills: tuple[Path, ...]) -> None:
    """Check every line and MAC of the state home's audit chain; print the head hash or the first bad line."""
    control, _ = _control(skills, read_only=True)
    result = control.audit.verify()
    if result.ok:
        click.echo(
            f"ok: {result.lines} lines, head {result.head_hash}"
            + (f" ({result.note})" if result.note else "")
        )
        return
    click.echo(f"BROKEN at line {result.bad_line}: {result.problem}", err=True)
    sys.exit(1)


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


COMMANDS = (propose, list_pending, approve, reject, rollback, history, status, audit, migrate)
