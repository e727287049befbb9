"""The `ingot` command group. Errors are caught here, once: `Error: ...` and a non-zero exit.

The commands live in one module per area (library, calibrate, changes, reports, models, goldens,
autonomy, protect, bench); this module builds the group from them, so they never import it back."""

from __future__ import annotations

import sys
import textwrap

import click

from ingot.cli import (
    autonomy,
    bench,
    calibrate,
    changes,
    goldens,
    library,
    models,
    protect,
    replica,
    reports,
    stdio,
)
from ingot.errors import EXIT_CODES, IngotError


def _epilog() -> str:
    # "\b" keeps click from re-wrapping a table into one paragraph.
    rows = "\n".join(
        textwrap.fill(meaning, 88, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
        for code, meaning in EXIT_CODES
    )
    return (
        f"\b\nExit codes:\n{rows}\n\nErrors are one line on stderr, starting with `Error:`.\n\n"
        f"{_evidence_table()}"
    )


def _evidence_table() -> str:
    """Which passport cells apply to which kind of change (optimize/control/kinds.py)."""
    from optimize.control.kinds import KINDS, table_rows

    header = "  " + f"{'cell':<16}" + "".join(f"{k:<14}" for k in KINDS)
    lines = [header.rstrip()]
    for cell, *rules in table_rows():
        lines.append(("  " + f"{cell:<16}" + "".join(f"{r:<14}" for r in rules)).rstrip())
    return (
        "\b\nEvidence per kind of change (a change is classified by what its bytes change):\n"
        + "\n".join(lines)
        + f"\n\n{_words()}"
    )


def _words() -> str:
    """The passport's vocabulary, as passport.py writes it down (the one place it is defined)."""
    from optimize.control.passport import CELL_MEANING, STATE_MEANING

    def table(title: str, meanings: dict[str, str]) -> str:
        width = max(map(len, meanings)) + 2
        rows = (
            textwrap.fill(m, 96, initial_indent=f"  {w:<{width}}", subsequent_indent=" " * (width + 2))
            for w, m in meanings.items()
        )
        return f"\b\n{title}:\n" + "\n".join(rows)

    return table("Each cell is", CELL_MEANING) + "\n\n" + table("A change is", STATE_MEANING)


@click.group(epilog=_epilog(), context_settings={"max_content_width": 100})
@click.version_option(package_name="ingot", help="Show the version and exit.")
def main() -> None:
    """Ingot: evidence-gated change control and offline routing for agent skills.

    `ingot COMMAND --help` shows a command's options."""


for _command in (
    *library.COMMANDS,
    *stdio.COMMANDS,
    *calibrate.COMMANDS,
    *changes.COMMANDS,
    *reports.COMMANDS,
    *replica.COMMANDS,
    *models.COMMANDS,
    *goldens.COMMANDS,
    *autonomy.COMMANDS,
    *protect.COMMANDS,
    bench.bench,
):
    main.add_command(_command)


def run() -> None:
    """Console-script entry point: show errors as one line, exit with their code (`EXIT_CODES`)."""
    try:
        main(standalone_mode=False, prog_name="ingot")
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.UsageError as exc:  # one line, like every other error, with where to look
        where = exc.ctx.command_path if exc.ctx else "ingot"
        click.echo(f"Error: {exc.format_message()} (`{where} --help` lists the options)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except IngotError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:  # a file or folder named on the command line that cannot be used
        where = f": {exc.filename}" if exc.filename else ""
        click.echo(f"Error: {exc.strerror or exc}{where}", err=True)
        sys.exit(1)
