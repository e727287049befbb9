"""What every `ingot` command module shares: settings from flags, logging, JSON output, --skills.

Command modules import this and nothing else from the CLI; `main.py` imports them and registers
their commands, so no module of the CLI imports `main.py` (no import circle)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ingot.settings import Settings, load_settings

if TYPE_CHECKING:
    from ingot.evaluation import Evaluated


def settings_for(skills: tuple[Path, ...] = (), **overrides: object) -> Settings:
    """The settings, with the values given as flags taking precedence over the environment."""
    if skills:
        overrides["skills_dirs"] = tuple(skills)
    return load_settings(**overrides)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    logging.getLogger("bm25s").setLevel(max(logging.WARNING, logging.getLevelName(level)))


def print_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


skills_option = click.option(
    "--skills",
    "skills",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A skills root (repeatable; the first wins on duplicate names).",
)


def print_evaluation(result: Evaluated) -> None:
    """What `ingot evaluate` (and `ingot propose`) report: the verdict, each cell, the bundle."""
    click.echo(f"evaluated {result.change_id}: gate {result.verdict}")
    for reason in result.reasons:
        click.echo(f"  {reason}")
    for name, status in result.cells.items():
        click.echo(f"  {name}: {status}")
    click.echo(f"evidence: {result.evidence.path}" + (f"; ledger {result.ledger}" if result.ledger else ""))
