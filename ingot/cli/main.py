"""The `ingot` command group. Errors are caught here, once: `Error: ...` and a non-zero exit.

The commands live in one module per area (library, calibrate, changes, models, goldens,
autonomy, inbox, bench); this module builds the group from them, so they never import it back."""

from __future__ import annotations

import sys

import click

from ingot.cli import autonomy, bench, calibrate, changes, goldens, inbox, library, models
from ingot.errors import IngotError


@click.group()
@click.version_option(package_name="ingot")
def main() -> None:
    """Ingot: evidence-gated change control and offline routing for agent skills."""


for _command in (
    *library.COMMANDS,
    *calibrate.COMMANDS,
    *changes.COMMANDS,
    *models.COMMANDS,
    *goldens.COMMANDS,
    *autonomy.COMMANDS,
    *inbox.COMMANDS,
    bench.bench,
):
    main.add_command(_command)


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
