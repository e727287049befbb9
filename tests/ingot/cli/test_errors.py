"""The command line never surprises: bad input is one `Error:` line on stderr with the exit code
`ingot --help` documents, never a traceback and never silence."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import click
import pytest

from ingot.cli.main import main, run
from ingot.errors import EXIT_CODES, ConfigError, IngotError, NotFound
from ingot.progress import parse
from optimize.control.lock import PromotionConflict
from tests.conftest import free_port, write_skill
from tests.ingot.cli.test_main import bundled, ingot


def error_line(done: subprocess.CompletedProcess, code: int) -> str:
    """The one `Error:` line a failed command printed, after checking its exit code (a long
    command's progress lines before it, ingot/cli/progress.py, are not part of the error)."""
    lines = [line for line in done.stderr.strip().splitlines() if parse(line) is None]
    assert done.returncode == code, (done.returncode, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def commands(group: click.Group = main, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        yield (*path, name), command


def minimal_args(command: click.Command, folder: Path, file: Path) -> list[str]:
    """Arguments that get `command` past click's own checks, so what runs next is ours."""
    args: list[str] = []
    for param in command.params:
        if isinstance(param, click.Argument) and param.required:
            args.append(str(param.type.choices[0]) if isinstance(param.type, click.Choice) else "x" * 3)
        elif isinstance(param, click.Option) and param.required:
            path_type = isinstance(param.type, click.Path)
            value = (str(file) if not param.type.dir_okay else str(folder)) if path_type else "abcdef0123"
            args += [param.opts[0], value]
    return args


def run_in_process(argv: list[str], capsys, monkeypatch) -> tuple[int, str]:
    """`ingot ARGV` through the console-script entry point, in this process (same code as the
    real command, without a new interpreter per command)."""
    monkeypatch.setattr(sys, "argv", ["ingot", *argv])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        run()
    return exited.value.code, capsys.readouterr().err


@pytest.mark.parametrize("problem", ["missing", "empty", "a skill folder"])
def test_every_command_that_takes_skills_refuses_a_bad_root_in_one_line(
    tmp_path, capsys, monkeypatch, problem
):
    monkeypatch.chdir(tmp_path)
    folder, file = tmp_path / "candidate", tmp_path / "cases.jsonl"
    write_skill(folder.parent, "candidate", "A candidate.")
    file.write_text('{"task": "t", "expected": null}\n')
    root = {
        "missing": tmp_path / "nowhere",
        "empty": tmp_path / "empty",
        "a skill folder": write_skill(tmp_path / "lib", "alpha", "Alpha."),
    }[problem]
    if problem == "empty":
        root.mkdir()
    expected = {
        "missing": "does not exist",
        "empty": "holds no skill folders",
        "a skill folder": "is a skill folder, not a skills root: pass the folder that holds it "
        f"(--skills {root.parent})",
    }[problem]
    swept = []
    for path, command in commands():
        if not any("--skills" in p.opts for p in command.params if isinstance(p, click.Option)):
            continue
        if problem == "empty" and path == ("propose",):
            continue  # how an empty library gets its first skill: below
        argv = [*path, *minimal_args(command, folder, file), "--skills", str(root)]
        code, err = run_in_process(argv, capsys, monkeypatch)
        swept.append(" ".join(path))
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, (path, code, err)
        assert lines[0].startswith(f"Error: skills root {root} (--skills) {expected}"), (path, err)
    assert {"serve", "ui", "route", "skills", "history", "rollback", "approve", "evaluate"} <= set(swept)
    assert not (root.parent / ".ingot").exists()  # a refused root gets no state home
    if problem == "empty":
        argv = ["propose", "xxx", "--from", str(folder), "--skills", str(root)]
        _, err = run_in_process(argv, capsys, monkeypatch)
        assert "no skill named 'xxx' is live" in err and expected not in err


def test_a_bad_root_fails_at_once_from_a_real_process_naming_where_it_came_from(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    line = error_line(ingot("skills", "--skills", str(tmp_path / "nowhere"), cwd=tmp_path), 2)
    assert "nowhere (--skills) does not exist" in line
    line = error_line(ingot("route", "summarise this", cwd=tmp_path, SKILLS_DIRS=str(empty)), 2)
    assert f"{empty} (SKILLS_DIRS) holds no skill folders" in line and "ingot propose NAME --new" in line
    # serve refuses before serving: no warning repeated every second, no URL announced
    done = ingot("serve", "--skills", str(tmp_path / "nowhere"), cwd=tmp_path, timeout=60)
    assert "does not exist" in error_line(done, 2) and done.stdout == ""


def test_a_managed_library_may_be_empty_and_says_so(tmp_path):
    root = tmp_path / "skills"
    root.mkdir()
    candidate = write_skill(tmp_path / "drafts", "kiln-firing", "Plans glaze firings for an electric kiln.")
    proposed = ingot(
        "propose",
        "kiln-firing",
        "--new",
        "--from",
        str(candidate),
        "--no-evaluate",
        "--skills",
        str(root),
        cwd=tmp_path,
    )
    assert proposed.returncode == 0 and "create change of kiln-firing" in proposed.stdout, proposed.stderr
    listed = ingot("skills", "--skills", str(root), cwd=tmp_path)  # managed now: empty is not a typo
    assert listed.returncode == 0 and listed.stdout == "" and "no skills are served from" in listed.stderr


def test_a_taken_port_is_one_line_naming_the_flag_or_setting(tmp_path):
    skills = str(bundled(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for flag, other in (("--mcp-port", "--ui-port"), ("--ui-port", "--mcp-port")):
            done = ingot(
                "serve", "--skills", skills, flag, port, other, str(free_port()), cwd=tmp_path, timeout=60
            )
            line = error_line(done, 2)
            assert line == (
                f"Error: port {port} on 127.0.0.1 is already in use ({flag}): stop what listens there, or "
                "choose another port"
            )
            assert done.stdout == ""
        done = ingot("serve", "--skills", skills, "--no-ui", cwd=tmp_path, timeout=60, MCP_PORT=port)
        assert "in use (MCP_PORT or --mcp-port)" in error_line(done, 2)


def test_a_bad_flag_value_names_the_flag_not_the_environment(tmp_path):
    done = ingot("serve", "--skills", str(bundled(tmp_path)), "--mcp-port", "0", cwd=tmp_path, timeout=60)
    assert error_line(done, 2) == "Error: --mcp-port 0: input should be greater than or equal to 1"
    done = ingot("serve", "--skills", str(bundled(tmp_path)), cwd=tmp_path, timeout=60, UI_PORT="70000")
    line = error_line(done, 2)
    assert line.startswith("Error: invalid settings: UI_PORT: ") and line.endswith(
        "Fix them in the environment or .env"
    )


def test_a_missing_required_option_is_one_line_naming_it(tmp_path):
    done = ingot("rollback", "alpha", "abcdef012345", cwd=tmp_path)
    assert (
        error_line(done, 2) == "Error: Missing option '--live'. (`ingot rollback --help` lists the options)"
    )


def test_help_documents_the_exit_codes_the_errors_use(tmp_path):
    done = ingot("--help", cwd=tmp_path)
    assert done.returncode == 0 and "Exit codes:" in done.stdout
    table = done.stdout.split("Exit codes:")[1]
    for code, meaning in EXIT_CODES:
        assert f"  {code:<4} {meaning.split()[0]}" in table
    documented = {code for code, _ in EXIT_CODES}
    assert {
        IngotError.exit_code,
        ConfigError.exit_code,
        NotFound.exit_code,
        PromotionConflict.exit_code,
    } <= documented
    assert {0, click.UsageError.exit_code, 130} <= documented


def test_every_option_of_every_command_has_help():
    missing = [
        f"{' '.join(path)} {param.opts[0]}"
        for path, command in commands()
        for param in command.params
        if isinstance(param, click.Option) and not (param.help or "").strip()
    ]
    assert missing == []
