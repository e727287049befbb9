"""What every `ingot` command module shares: settings from flags, the skills-root check, logging,
JSON output, --skills.

Command modules import this and nothing else from the CLI; `main.py` imports them and registers
their commands, so no module of the CLI imports `main.py` (no import circle). A value given as a
flag is reported against that flag when it is invalid; one from the environment against its
variable."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ingot.errors import ConfigError, SkillNotFound, did_you_mean
from ingot.settings import Settings, load_settings

if TYPE_CHECKING:
    from ingot.evaluation import Evaluated
    from mcp_server.library import Library
    from mcp_server.registry import Skill
    from optimize.control.passport import Passport

# Settings a command can take as a flag, and that flag (for error messages).
FLAGS = {
    "skills_dirs": "--skills",
    "mcp_port": "--mcp-port",
    "ui_port": "--ui-port",
    "bind_host": "--host",
    "proxy_port": "--port",
}


def settings_for(
    skills: tuple[Path, ...] | None = None, *, may_be_empty: bool = False, **overrides: object
) -> Settings:
    """The settings, with the values given as flags taking precedence over the environment.

    `skills` is the command's --skills value (pass it, even empty, from every command that
    serves or changes a library): its roots are then checked (`check_roots`)."""
    if skills:
        overrides["skills_dirs"] = tuple(skills)
    settings = load_settings(flags=FLAGS, **overrides)
    if skills is not None:
        default = Settings.model_fields["skills_dirs"].default
        source = "--skills" if skills else "the default" if settings.skills_dirs == default else "SKILLS_DIRS"
        check_roots(settings.skills_dirs, source, may_be_empty)
    return settings


def check_roots(roots: tuple[Path, ...], source: str, may_be_empty: bool = False) -> None:
    """Refuse, with one line naming where the root came from, a skills root that does not exist,
    is a skill folder itself, or holds no skill folder while no state home manages it yet (a
    typo'd path, most likely). A managed root may be empty: Ingot may have removed its last
    skill. `may_be_empty` (for `ingot propose`, which adds a first skill) allows that too."""
    from ingot.home import claim_path

    for root in roots:
        shown = f"skills root {root} ({source})"
        if not root.expanduser().is_dir():
            what = "is not a folder" if root.expanduser().exists() else "does not exist"
            raise ConfigError(
                f"{shown} {what}: pass the folder that holds your skill folders (--skills DIR, "
                "repeatable, or SKILLS_DIRS)"
            )
        folder = root.expanduser()
        if (folder / "SKILL.md").is_file():
            raise ConfigError(
                f"{shown} is a skill folder, not a skills root: pass the folder that holds it "
                f"(--skills {folder.absolute().parent})"
            )
        if may_be_empty or claim_path(Path(folder.absolute())).exists():
            continue
        if not any(p.is_dir() and not p.name.startswith(".") for p in folder.iterdir()):
            raise ConfigError(
                f"{shown} holds no skill folders: pass the folder that holds them, or add a first "
                f"skill with `ingot propose NAME --new --from DIR --skills {root}`"
            )


def served_skill(library: Library, name: str) -> Skill:
    """`name`'s served revision, or `SkillNotFound` naming the nearest served skills."""
    if name not in library.skills():
        raise SkillNotFound(
            f"no skill named {name!r} is served{did_you_mean(name, library.skills())} "
            "(`ingot skills` lists them)"
        )
    return library.get(name)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    # bm25s sets its own logger to DEBUG when imported (after this runs): filter at the handlers.
    floor = max(logging.WARNING, logging.getLevelName(level))
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda record: not record.name.startswith("bm25s") or record.levelno >= floor)


def print_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


skills_option = click.option(
    "--skills",
    "skills",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A skills root (repeatable; the first wins on duplicate names); default SKILLS_DIRS, else ./skills.",
)


def print_evaluation(result: Evaluated, skill: str) -> None:
    """What `ingot evaluate` (and `ingot propose`) report: the passport, each cell, the bundle."""
    from optimize.measure.replay_verdict import said_rulings

    click.echo(f"evaluated {result.change_id}: {result.passport.state} ({result.passport.kind} change)")
    replay = (result.evidence.data.get("measurements") or {}).get("replay") or {}
    rulings = said_rulings(replay) if replay.get("status") == "measured" else []
    notes = {"replay": [f"ruled by a model: {r}" for r in rulings]}
    print_passport(result.passport, skill, result.change_id, notes)
    click.echo(f"evidence: {result.evidence.path}" + (f"; ledger {result.ledger}" if result.ledger else ""))


def print_passport(
    verdict: Passport, skill: str, change_id: str, notes: Mapping[str, list[str]] | None = None
) -> None:
    """Every cell on its own line (state, why, and for a missing one what would measure it, then
    its `notes`: the model rulings a replay cell rests on), then what approving it takes."""
    from optimize.control.passport import NEEDS_ACK, READY, STALE

    for cell in verdict.cells:
        click.echo(f"  {cell.name:<15} {cell.state:<8} {cell.why}")
        if cell.measure:
            click.echo(f"  {'':<15} {'':<8} to measure: {cell.measure}")
        for note in (notes or {}).get(cell.name, ()):
            click.echo(f"  {'':<15} {'':<8} {note}")
    base = f"ingot approve {skill} --change {change_id}"
    if verdict.state == READY:
        click.echo(f"approve with: {base}")
    elif verdict.state == NEEDS_ACK:
        names = ", ".join(c.name for c in verdict.missing)
        pinned = ",".join(c.name for c in verdict.missing)
        click.echo(
            f'approve only naming why {names} may stay missing: {base} --accept-missing "REASON" '
            f'--accepting "{pinned}"'
        )
    elif verdict.state == STALE:
        again = f"ingot evaluate {skill} --change {change_id}"
        click.echo(f"stale: it cannot be approved until re-measured: `{again}`")
    elif verdict.overridable:
        failed = ", ".join(c.name for c in verdict.failed)
        pinned = ",".join(c.name for c in verdict.missing)
        missing = f' --accept-missing "REASON" --accepting "{pinned}"' if verdict.missing else ""
        click.echo(f'blocked by {failed}; an override is audited: {base} --override-reason "WHY"{missing}')
    else:
        click.echo("blocked: it cannot be approved; re-measure it, or reject it")


def usage_line(total: dict | None) -> str:
    """What a paid run used, as a person reads it ("cost: 39 calls, 517 tokens in, 329 out, $0.0012";
    an unpriced call makes the total unknown, never zero)."""
    if not total:
        return "cost: unknown (no ledger)"
    usd = total.get("usd")
    unknown = total.get("unknown_cost_calls") or 0
    money = (
        f"${usd:.4f}" if usd is not None else f"unknown ({unknown} call(s) without a price in PRICES_FILE)"
    )
    tokens = f"{total.get('tokens_in')} tokens in, {total.get('tokens_out')} out"
    return f"cost: {total.get('calls')} calls, {tokens}, {money}"
