"""`ingot autonomy`: earned autonomy per skill and change class: show it, allow a ceiling, tick.

Registered on the group by `main.py`; this module imports only `options` from the CLI."""

from __future__ import annotations

from pathlib import Path

import click

from ingot.cli.options import print_json, settings_for, setup_logging, skills_option


def _control(skills: tuple[Path, ...], read_only: bool = False):  # noqa: ANN202 - ChangeControl, lazily
    from ingot.runtime import change_control

    setup_logging("WARNING")
    settings = settings_for(skills)
    return settings, change_control(settings, read_only=read_only)


class _ShowByDefault(click.Group):
    """`ingot autonomy [SKILL]` means `ingot autonomy show [SKILL]`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["show", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_ShowByDefault)
def autonomy() -> None:
    """Earned autonomy per skill and change class (create, description, body).

    `ingot autonomy [SKILL]` shows each class's level (manual, supervised, auto), streak, ceiling
    and last incident; `allow` sets a ceiling; `tick` runs the autopilot once."""


@autonomy.command(name="show")
@skills_option
@click.argument("skill", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the same table as JSON.")
def show(skills: tuple[Path, ...], skill: str | None, as_json: bool) -> None:
    """Each class's level, streak, ceiling and last incident (of SKILL, or of every skill)."""
    _, control = _control(skills, read_only=True)
    names = [skill] if skill else sorted({*control.autonomy.table(), *(c.skill for c in control.pending())})
    if skill and control.live_revision(skill) is None and control.queue.get(skill) is None:
        from ingot.errors import SkillNotFound

        raise SkillNotFound(f"no skill or pending change named {skill!r}")
    problem = control.autonomy.mirror_problem()
    needed = control.autonomy.streak_needed
    rows = [(name, cls, trust) for name in names for cls, trust in control.autonomy.table(name)[name].items()]
    if as_json:
        print_json(
            {
                "schema_version": 1,
                "streak_needed": needed,
                "mirror_problem": problem,
                "classes": [
                    {
                        "skill": name,
                        "class": cls,
                        "level": trust.level,
                        "streak": trust.streak,
                        "ceiling": trust.ceiling,
                        "last_incident": trust.last_incident,
                    }
                    for name, cls, trust in rows
                ],
            }
        )
        return
    if not names:
        click.echo(
            "every class of every skill is manual (nothing delegated yet): see `ingot autonomy allow --help`"
        )
    if problem is not None:
        click.echo(f"warning: {problem}", err=True)
    for name, cls, trust in rows:
        incident = f"  last incident: {trust.last_incident}" if trust.last_incident else ""
        click.echo(
            f"{name}  {cls:<11} {trust.level:<10} streak {trust.streak}/{needed}"
            f"  ceiling {trust.ceiling}{incident}"
        )


@autonomy.command(name="allow")
@skills_option
@click.argument("skill")
@click.argument("change_class", metavar="CLASS", type=click.Choice(["create", "description", "body"]))
@click.argument("level", type=click.Choice(["manual", "supervised", "auto"]))
def allow(skills: tuple[Path, ...], skill: str, change_class: str, level: str) -> None:
    """Let SKILL's CLASS of changes earn up to LEVEL (audited). The class still starts at manual
    and climbs one level per AUTONOMY_STREAK clean changes; `manual` takes the delegation back."""
    from ingot.runtime import actor
    from optimize.control.lock import change_lock

    settings, control = _control(skills)
    if control.live_revision(skill) is None and control.queue.get(skill) is None:
        from ingot.errors import SkillNotFound

        raise SkillNotFound(f"no skill or pending change named {skill!r}")
    with change_lock(control.runs_dir, control.lock_wait_s):
        trust = control.autonomy.allow(skill, change_class, level, actor(settings))
    click.echo(f"{skill} {change_class}: ceiling {trust.ceiling}, level now {trust.level}")


@autonomy.command(name="tick")
@skills_option
def tick(skills: tuple[Path, ...]) -> None:
    """Run the autopilot once: promote what autonomy may, report incidents (for cron or Compose;
    `ingot serve` does this every AUTOPILOT_TICK_S)."""
    from ingot.errors import WriteFailed
    from optimize.control.autopilot import Autopilot

    settings, control = _control(skills)
    steps = Autopilot(control).tick()
    for step in steps:
        click.echo(f"{step.skill}  {step.change_id or '-'}  {step.did}: {step.why}")
    if any(s.did == "failed" for s in steps):  # for cron: a tick that could not do its job failed
        raise WriteFailed("the autopilot tick failed (see above); nothing it failed on was promoted")


COMMANDS = (autonomy,)
