"""`ingot` reports on change control, each read-only: pending, history, status, audit verify.

None of them writes anything, not even the state home (a root never managed has no history and
nothing pending): tests/ingot/cli/test_read_only.py runs each against read-only folders. Every one
prints text for a person and, with `--json`, the same facts for a program.
Registered on the group by `main.py`; this module imports only `options` from the CLI."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ingot.cli.options import print_json, settings_for, setup_logging, skills_option
from ingot.settings import load_settings


def _reader(skills: tuple[Path, ...]):  # noqa: ANN202 - a ChangeControl, imported lazily
    """Change control over the state home as it is on disk (ingot/runtime.py: read_only)."""
    from ingot.runtime import change_control

    settings = settings_for(skills)
    setup_logging("WARNING")
    return change_control(settings, read_only=True)


@click.command(name="pending")
@skills_option
@click.option("--json", "as_json", is_flag=True, help="Print each change with its passport as JSON.")
def list_pending(skills: tuple[Path, ...], as_json: bool) -> None:
    """List the changes waiting for a decision: kind, size and passport state (ready,
    needs-acknowledgement, blocked, or stale: the live skill changed since it was measured) with
    the cells that make it so."""
    from optimize.measure.size import change_size

    control = _reader(skills)
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
@click.option("--json", "as_json", is_flag=True, help="Print the events and snapshots as JSON.")
def history(skills: tuple[Path, ...], skill: str, as_json: bool) -> None:
    """SKILL's audited changes and the snapshots that can be restored (`absent`, for a skill
    Ingot created, removes it), with the rollback command that pins what is live now."""
    from optimize.control.promote import ABSENT

    control = _reader(skills)
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
    """Live revisions, drift from the audited revision, pending changes and the audit chain (on a
    replica, REPLICA_REMOTE set: what it serves, its lag and what it refused).

    Exits 1 when a skill has drifted (under LIVE_EDITS=quarantine also when its folder holds its
    revision's bytes laid out otherwise: modes, hidden entries, empty folders), the audit chain
    is broken, a pending record is not in it, or
    commits are not reaching GIT_PUSH_REMOTE."""
    if not skills and load_settings().replica_remote:
        _replica_status(as_json)
        return
    control = _reader(skills)
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
            if skill.laid_out_otherwise:
                click.echo(f"  its folder: {'; '.join(skill.layout)} ({_LAYOUT_FIX[_live_edits(report)]})")
        for problem in report.invalid:
            click.echo(f"SKIPPED {problem}")
        for problem in report.unaudited:
            click.echo(f"UNAUDITED pending {problem}")
        for problem in report.archive_disagrees:
            click.echo(f"ARCHIVE {problem}")
        click.echo(
            f"audit: {'ok' if audit.ok else f'BROKEN at line {audit.bad_line}: {audit.problem}'}"
            f" ({audit.lines} lines, head {audit.head_hash[:16]})"
        )
        for root in report.roots:
            click.echo(f"root {root.root}: live edits {root.live_edits}{_git_line(root.git)}")
            if root.git is not None and root.git.remote:
                click.echo(push_line(root.git))
        interrupted = [s.name for s in report.skills if s.recovery_pending]
        if interrupted:
            click.echo(
                f"recovery pending: an interrupted change to {', '.join(interrupted)}; the next "
                "change-control command (or `ingot serve`) settles it from what is live"
            )
        _echo_sandbox(sandbox)
    if _fails(report) or any(r.git and r.git.push_failed for r in report.roots):
        sys.exit(1)


# Each skill's state in `ingot status`, and how the text shows it.
_FLAGS = {
    "recovery-pending": "RECOVERY PENDING",
    "drifted": "DRIFTED",
    "laid-out-otherwise": "LAID OUT OTHERWISE",
    "removed": "removed by Ingot",
    "unaudited": "unaudited",
    "ok": "ok",
}


def _skill_state(skill) -> str:  # noqa: ANN001 - a SkillStatus
    if skill.recovery_pending:
        return "recovery-pending"
    if skill.drifted:
        return "drifted"
    if skill.laid_out_otherwise:
        return "laid-out-otherwise"
    if skill.removed:
        return "removed"
    return "unaudited" if skill.audited_revision is None else "ok"


# What puts a folder laid out otherwise back, per LIVE_EDITS (the bytes MCP serves are unaffected).
_LAYOUT_FIX = {
    "quarantine": "the guard restores the approved layout on its next pass; `ingot guard` now",
    "serve": "MCP serves the same bytes; a harness reading the folder sees this; "
    "LIVE_EDITS=serve restores nothing",
}


def _layout_fails(report) -> bool:  # noqa: ANN001 - a Status
    """Under LIVE_EDITS=quarantine the folders harnesses read are promised to be approved
    revisions, so one laid out otherwise fails the report; under serve it is shown only."""
    return _live_edits(report) == "quarantine" and bool(report.laid_out_otherwise)


def _fails(report) -> bool:  # noqa: ANN001 - a Status
    """What makes `ingot status` not ok (besides a failed push, which JSON reports per root)."""
    unsound = report.unaudited or report.archive_disagrees or not report.audit.ok
    return bool(report.drifted or _layout_fails(report) or unsound)


def _live_edits(report) -> str:  # noqa: ANN001 - a Status
    return "quarantine" if any(r.live_edits == "quarantine" for r in report.roots) else "serve"


def _status_json(report, sandbox) -> dict:  # noqa: ANN001 - a Status and a SandboxStatus
    """`status --json`: the facts the text shows, null where unknown (a git root not compared)."""
    audit = report.audit
    return {
        "schema_version": 1,
        "ok": not _fails(report),
        "skills": [
            {
                "name": s.name,
                "root": str(s.root),
                "state": _skill_state(s),
                "live_revision": s.live_revision,
                "audited_revision": s.audited_revision,
                "pending": s.pending,
                "layout": list(s.layout) if s.laid_out_otherwise else [],
            }
            for s in report.skills
        ],
        "invalid": list(report.invalid),
        "unaudited_pending": list(report.unaudited),
        "archive_disagrees": list(report.archive_disagrees),
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
        "push": None
        if not git.remote
        else {
            "remote": git.remote,
            "unpushed": git.unpushed,
            "pushed": git.push.pushed if git.push else None,
            "error": git.push.error if git.push else None,
            "failed_attempts": git.push.attempts if git.push else 0,
            "last_attempt": git.push.time if git.push else None,
        },
    }


def _replica_status(as_json: bool) -> None:
    """`ingot status` on a replica (REPLICA_REMOTE set): what it serves, its lag, what it refused."""
    from ingot.runtime import replica_config, replica_home
    from optimize.control.replica import replica_status

    settings = settings_for()
    setup_logging("WARNING")
    state = replica_status(replica_config(settings, replica_home(settings)))
    if as_json:
        print_json({"schema_version": 1, "replica": {**state.__dict__, "refused": list(state.refused)}})
    else:
        for line in replica_lines(state):
            click.echo(line)
    if state.refused or state.error:
        sys.exit(1)


def replica_lines(state) -> list[str]:  # noqa: ANN001 - a ReplicaStatus
    """A replica's status, one fact a line."""
    served = state.served[:12] if state.served else "nothing (no verified commit yet)"
    verified = f", verified {state.verified_at}" if state.verified_at else ""
    tip = str(state.remote_tip)[:12] if state.remote_tip else "unknown"
    lines = [
        f"replica of {state.remote} ({state.branch}): serving {served}{verified}",
        f"remote tip {tip}; lag {state.lag_s:g} s; {state.refused_total} commit(s) refused so far",
    ]
    if state.error:
        lines.append(f"ERROR {state.error}")
    for refused in state.refused:
        lines.append(f"REFUSED {str(refused.get('commit'))[:12]}: {refused.get('why')}")
    return lines


def push_line(git) -> str:  # noqa: ANN001 - a GitState with a remote
    """Whether every commit reached GIT_PUSH_REMOTE, and if not, why and what to do."""
    push = git.push
    if git.unpushed == 0:
        return f"push to {git.remote}: up to date" + (
            f" ({push.pushed[:12]})" if push and push.pushed else ""
        )
    waiting = f"push to {git.remote}: {git.unpushed} commit(s) not pushed"
    if push is None or push.error is None:
        return (
            f"{waiting}; no attempt recorded since: `ingot serve` pushes it at its next tick (or push "
            "by hand)"
        )
    fix = (
        "the remote has commits this repository does not (someone else pushed): look at them, then "
        "push by hand; Ingot never force-pushes"
        if push.rejected
        else "retrying with backoff; fix the remote or the network"
    )
    failed = f"{push.attempts} attempt(s) in a row failed, last at {push.time}: {push.error}"
    return f"PUSH FAILING {waiting}; {failed}; {fix}"


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
    from ingot.model_runtime import sandbox
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
    """Check every line and MAC of the state home's audit chain, then the chain against the newest
    audit line a commit pushed to GIT_PUSH_REMOTE records (fetched from the remote). Prints the
    head hash or the first bad line, then what the remote says. Exits 1 when either check fails,
    4 when the remote cannot be read (the local result is printed first), 0 otherwise, also when no
    remote is configured (one line says the outside check was not made)."""
    from optimize.control.audit_remote import check

    control = _reader(skills)
    result = control.audit.verify()
    if result.ok:
        click.echo(
            f"ok: {result.lines} lines, head {result.head_hash}"
            + (f" ({result.note})" if result.note else "")
        )
    else:
        click.echo(f"BROKEN at line {result.bad_line}: {result.problem}", err=True)
    outside = check(control.audit, control.roots, control.git)
    for found in outside:
        click.echo(f"outside: {found.message}", err=found.state in ("broken", "unchecked"))
    if not result.ok or any(found.state == "broken" for found in outside):
        sys.exit(1)
    if any(found.state == "unchecked" for found in outside):
        sys.exit(4)


COMMANDS = (list_pending, history, status, audit)
