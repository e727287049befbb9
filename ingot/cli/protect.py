"""Where agents' writes go: `ingot inbox` reads the candidate inbox once, `ingot guard` protects
the live roots once (LIVE_EDITS=quarantine). `ingot serve` does both on every tick; these are for
cron, or to see what they hold.

Registered on the group by `main.py`; this module imports only `options` from the CLI."""

from __future__ import annotations

from pathlib import Path

import click

from ingot.cli.options import settings_for, setup_logging, skills_option


@click.command()
@skills_option
@click.option(
    "--evaluate", "evaluate_now", is_flag=True, help="Measure each queued change now (needs models)."
)
def inbox(skills: tuple[Path, ...], evaluate_now: bool) -> None:
    """Queue what agents wrote to CANDIDATE_ROOTS (and commits on CANDIDATE_BRANCH) as pending
    changes, withdraw deleted ones, and list every candidate with its outcome.

    `ingot serve` does this on every tick; candidates are never served."""
    from ingot.errors import ConfigError
    from ingot.runtime import change_control, open_library
    from ingot.runtime import inbox as make_inbox

    settings = settings_for(skills)
    setup_logging("WARNING")
    library = open_library(settings)
    control = change_control(settings, library=library)
    found = make_inbox(settings, library, control)
    if found is None:
        raise ConfigError(
            "there is no inbox to read: set CANDIDATE_ROOTS (folders agents write skills to) "
            "and/or CANDIDATE_BRANCH (a git branch of a skills root)"
        )
    events = found.scan()
    for event in events:
        click.echo(f"{event.skill}  {event.did}  ({event.origin}): {event.detail}")
    if evaluate_now:
        from ingot.evaluation import evaluate_change

        for event in events:
            if event.did == "queued" and event.change_id:
                result = evaluate_change(settings, library, control, event.skill, event.change_id)
                click.echo(f"{event.skill}  evaluated: {result.verdict}")
    seen = found.seen()
    if not events:
        click.echo("nothing new in the inbox")
    if seen:
        click.echo(f"every candidate read so far ({len(seen)}):")
    for origin, record in sorted(seen.items()):
        why = f": {record.get('why')}" if record.get("why") else ""
        change = record.get("change_id") or ""
        click.echo(f"  {record.get('skill')}  {record.get('did')}  {change}  {origin}{why}")


@click.command()
@skills_option
def guard(skills: tuple[Path, ...]) -> None:
    """Keep every live skill folder at its approved revision (LIVE_EDITS=quarantine): an edit made
    straight to a live skill is kept aside, the approved revision restored, and the edit queued
    as a pending change (source direct-edit). Lists the kept edits.

    The first run adopts the skills as they are as the approved baseline (audited)."""
    from ingot.errors import ConfigError, WriteFailed, os_reason
    from ingot.runtime import change_control, open_library
    from optimize.control.guard import Guard

    settings = settings_for(skills)
    if settings.live_edits != "quarantine":
        raise ConfigError(
            "LIVE_EDITS is 'serve': edits to live skills are served and flagged as drift (`ingot "
            "status`). Set LIVE_EDITS=quarantine to protect the live roots"
        )
    setup_logging("WARNING")
    library = open_library(settings)
    found = Guard(
        change_control(settings, library=library), library.similarity, settle_s=settings.inbox_settle_s
    )
    try:
        events = found.check()
    except OSError as exc:  # e.g. a read-only or full state home: before anything was restored
        raise WriteFailed(
            f"the guard stopped: {os_reason(exc)}. A folder it did not restore still holds what it "
            "found (`ingot status` shows each); MCP serves the approved revisions meanwhile, but a "
            "harness reading the folders directly sees what is there. Fix the permissions or free "
            "disk space, then run `ingot guard` again"
        ) from exc
    for event in events:
        click.echo(str(event))
    if not events:
        click.echo("every live skill is at its approved revision")
    kept_edits = found.kept()
    if kept_edits:
        click.echo(f"direct edits kept so far ({len(kept_edits)}):")
    for kept in kept_edits:
        change = f" as {kept.change_id}" if kept.change_id else ""
        why = f": {kept.why}" if kept.why and kept.why != kept.found else ""
        click.echo(f"  kept {kept.skill} ({kept.found}) {kept.status}{change} at {kept.path}{why}")
    failed = sorted({e.skill for e in events if e.did == "failed"})
    if failed:
        raise WriteFailed(
            f"the guard could not finish for {', '.join(failed)} (see above); MCP serves their "
            "approved revisions meanwhile, but a harness reading the folder directly sees what is "
            "there. The next `ingot guard` (or `ingot serve` tick) retries"
        )


COMMANDS = (inbox, guard)
