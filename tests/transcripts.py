"""The shell sessions shown in the docs, parsed and executed: what tests/test_docs.py runs.

The convention (docs/development.md, "Sessions in the docs"): a fenced ```console block is a
session: each line starting with `$ ` is a command (a trailing backslash continues it on the
next line), and the lines up to the next command are its output, with `[exit N]` after the
output of a command that exits N != 0. A line of just `...` matches any number of lines. A
```bash or ```sh block is an instruction and is never run, so it shows no output; a `$ ` line
anywhere but a console block is refused by the test.

All sessions of one page run in order in one fresh folder, shown in the docs as
/home/you/ingot (the clone's top), with the bundled skills copied to `skills/`, the state home
in `.ingot/skills/` and `ingot` on PATH as `python -m ingot.cli` of this interpreter. A page
picks another set-up with a comment `<!-- transcript: demo -->`: the folder `make demo` makes
(`.demo/`, scripts/demo.py's task set and prices) with its scripted model server on loopback;
`KEY=VALUE` words in the same comment add settings (a relative path is relative to the folder).
No network is used, no model but the scripted one, and nothing of the caller's environment
reaches the commands except PATH and the locale.

Output is compared after normalising what changes between runs: hex ids and digests, ports,
timestamps, durations and temporary paths. `python -m tests.transcripts PAGE.md` prints each
session of a page with the output it really gives; `python -m tests.transcripts --update
PAGE.md` writes that output into the page for every command whose output no longer matches."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHOWN = "/home/you/ingot"  # how the docs show the session's folder
COMMAND_TIMEOUT_S = 180


@dataclass(frozen=True)
class Step:
    """One `$ ` command of a session and the output the page shows for it."""

    command: str
    expected: tuple[str, ...]
    line: int  # the command's line in the page, 1-based


@dataclass(frozen=True)
class Session:
    """One ```console block."""

    page: Path
    line: int
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Setup:
    """Where a page's sessions run: `bundled` or `demo`, plus settings."""

    kind: str
    settings: tuple[tuple[str, str], ...]


def fences(text: str) -> Iterator[tuple[str, int, list[str]]]:
    """(language, line of the opening fence, body lines) of every fenced block in a page."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            lang, start, body = lines[i][3:].strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            yield lang, start, body
        i += 1


def sessions(page: Path) -> list[Session]:
    """Every ```console block of `page`, split into commands and their expected output."""
    found = []
    for lang, start, body in fences(page.read_text()):
        if lang != "console":
            continue
        steps: list[Step] = []
        command, expected, at, i = None, [], 0, 0
        while i < len(body):
            line = body[i]
            if line.startswith("$ "):
                if command is not None:
                    steps.append(Step(command, tuple(expected), at))
                command, expected, at = line[2:], [], start + i + 1
                while command.endswith("\\") and i + 1 < len(body):
                    i += 1
                    command = command[:-1] + "\n" + body[i]
            elif command is None:
                raise ValueError(f"{page}:{start + i + 1}: a console block starts with a `$ ` command")
            else:
                expected.append(line)
            i += 1
        if command is not None:
            steps.append(Step(command, tuple(expected), at))
        found.append(Session(page, start, tuple(steps)))
    return found


def setup_of(page: Path) -> Setup:
    """The page's `<!-- transcript: KIND KEY=VALUE ... -->` comment, else the bundled set-up."""
    match = re.search(r"<!--\s*transcript:\s*(.*?)\s*-->", page.read_text())
    words = match.group(1).split() if match else ["bundled"]
    kind, pairs = words[0], tuple(tuple(w.split("=", 1)) for w in words[1:])
    if kind not in ("bundled", "demo") or any(len(p) != 2 for p in pairs):
        raise ValueError(f"{page}: transcript set-up must be `bundled` or `demo` then KEY=VALUE words")
    return Setup(kind, pairs)  # type: ignore[arg-type]


_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:\d{2}|Z)?|\d{8}T\d{6,}")
_HEX = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{6,}(?![0-9A-Za-z])")
_PORT = re.compile(r"(127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1\]):\d+")
_DURATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ms|s)\b")
_TMP = re.compile(r"/tmp/[^\s/'\"]+")


def normalize(lines: list[str] | tuple[str, ...]) -> list[str]:
    """The lines with what differs between runs replaced by placeholders."""
    out = []
    for line in lines:
        line = _TIME.sub("<time>", line)
        line = _PORT.sub(r"\1:<port>", line)
        line = _HEX.sub("<hex>", line)
        line = _DURATION.sub("<duration>", line)
        line = _TMP.sub("/tmp/<tmp>", line)
        out.append(line.rstrip())
    while out and not out[-1]:
        out.pop()
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether the normalised lines agree, a `...` line standing for any number of lines."""
    memo: dict[tuple[int, int], bool] = {}

    def at(i: int, j: int) -> bool:
        if (i, j) not in memo:
            if i == len(expected):
                memo[i, j] = j == len(actual)
            elif expected[i].strip() == "...":
                memo[i, j] = at(i + 1, j) or (j < len(actual) and at(i, j + 1))
            else:
                memo[i, j] = j < len(actual) and expected[i] == actual[j] and at(i + 1, j + 1)
        return memo[i, j]

    return at(0, 0)


def _demo_module():
    spec = importlib.util.spec_from_file_location("ingot_demo_script", REPO / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@contextlib.contextmanager
def workspace(setup: Setup) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh folder and the environment its commands run with, for one page."""
    with tempfile.TemporaryDirectory(prefix="ingot-docs-") as tmp, contextlib.ExitStack() as stack:
        folder = Path(tmp).resolve()
        bin_dir = folder / ".bin"
        bin_dir.mkdir()
        ingot = bin_dir / "ingot"
        ingot.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ingot.cli "$@"\n')
        ingot.chmod(0o755)
        env = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "HOME": str(folder),
            "PYTHONPATH": str(REPO),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HF_HUB_OFFLINE": "1",
            "NO_COLOR": "1",
            "GIT_HISTORY": "false",
            "GIT_AUTHOR_NAME": "you",
            "GIT_AUTHOR_EMAIL": "you@example.com",
            "GIT_COMMITTER_NAME": "you",
            "GIT_COMMITTER_EMAIL": "you@example.com",
        }
        if setup.kind == "demo":
            demo = _demo_module()
            env.update(demo.prepare(folder / ".demo"))
            from tests.scripted_llm import scripted_llm

            server = stack.enter_context(scripted_llm())
            demo.script(server)
            env["BASE_URL"] = server.url
        else:
            shutil.copytree(REPO / "skills", folder / "skills")
            env["SKILLS_DIRS"] = str(folder / "skills")
            env["INGOT_HOME"] = str(folder / ".ingot" / "skills")
        for key, value in setup.settings:
            env[key] = value
        yield folder, env


class Shell:
    """Runs a page's commands in its folder. An id the page shows in an earlier output (a change,
    a trace, a golden) and then types in a later command is replaced by the id the real run
    printed in its place, so `ingot approve --change chg-...` approves the change just proposed."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.env = folder, env
        self.ids: dict[str, str] = {}

    def command(self, step: Step) -> str:
        """The step's command with the ids the page showed replaced by the real ones."""
        return _HEX.sub(lambda m: self.ids.get(m.group(0), m.group(0)), step.command)

    def run(self, step: Step) -> list[str]:
        """What the command prints (stdout and stderr as a terminal shows them), the folder's
        path shown as SHOWN, and `[exit N]` when it fails."""
        command = self.command(step)
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        lines = done.stdout.replace(str(self.folder), SHOWN).splitlines()
        if done.returncode:
            lines.append(f"[exit {done.returncode}]")
        self._learn(step.expected, lines)
        return lines

    def _learn(self, expected: tuple[str, ...], actual: list[str]) -> None:
        """Pair the ids of each shown line with those of the real line it matches."""
        j = 0
        for line in expected:
            if line.strip() == "...":
                continue
            want = normalize([line])
            for k in range(j, len(actual)):
                if normalize([actual[k]]) == want:
                    for shown, real in zip(_HEX.findall(line), _HEX.findall(actual[k]), strict=False):
                        self.ids.setdefault(shown, real)
                    j = k + 1
                    break


@dataclass(frozen=True)
class Mismatch:
    """A command whose output differs from what the page shows."""

    step: Step
    expected: list[str]
    actual: list[str]

    def __str__(self) -> str:
        return (
            f"line {self.step.line}: $ {self.step.command}\n--- the page shows (normalised):\n"
            + "\n".join(self.expected)
            + "\n--- the command printed (normalised):\n"
            + "\n".join(self.actual)
        )


def check_page(page: Path) -> list[Mismatch]:
    """Run every session of `page`; the commands whose output does not match."""
    found = sessions(page)
    wrong: list[Mismatch] = []
    if not found:
        return wrong
    with workspace(setup_of(page)) as (folder, env):
        shell = Shell(folder, env)
        for session in found:
            for step in session.steps:
                actual = normalize(shell.run(step))
                expected = normalize(step.expected)
                if not matches(expected, actual):
                    wrong.append(Mismatch(step, expected, actual))
    return wrong


def show(page: Path) -> None:
    """Print each session of `page` as it really runs (not normalised), for pasting."""
    with workspace(setup_of(page)) as (folder, env):
        shell = Shell(folder, env)
        for session in sessions(page):
            print(f"```console  # {page}:{session.line}")
            for step in session.steps:
                print(f"$ {shell.command(step)}")
                print("\n".join(shell.run(step)), flush=True)
            print("```")


def update(page: Path) -> int:
    """Rewrite the output of every command of `page` that no longer matches with what it prints
    now (ids the page already showed kept as the page's); matching output, `...` lines and the
    commands stay as written. Returns how many commands' output was replaced."""
    lines = page.read_text().splitlines()
    blocks = [(start, len(body)) for lang, start, body in fences(page.read_text()) if lang == "console"]
    replaced, rebuilt = 0, {}
    with workspace(setup_of(page)) as (folder, env):
        shell = Shell(folder, env)
        for (start, length), session in zip(blocks, sessions(page), strict=True):
            body: list[str] = []
            for step in session.steps:
                actual = shell.run(step)
                body.append("$ " + step.command.replace("\n", "\\\n"))
                if matches(normalize(step.expected), normalize(actual)):
                    body.extend(step.expected)
                    continue
                replaced += 1
                seen = {real: shown for shown, real in shell.ids.items()}
                for line in actual:
                    body.append(_HEX.sub(lambda m, s=seen: s.get(m.group(0), m.group(0)), line))
            rebuilt[start] = (length, body)
    out, i = [], 0
    while i < len(lines):
        out.append(lines[i])
        if i + 1 in rebuilt:  # lines[i] is the opening fence of a console block
            length, body = rebuilt[i + 1]
            out.extend(body)
            i += length
        i += 1
    page.write_text("\n".join(out) + "\n")
    return replaced


if __name__ == "__main__":
    if sys.argv[1:2] == ["--update"]:
        for arg in sys.argv[2:]:
            print(f"{arg}: {update(Path(arg))} command(s) given their real output")
    else:
        for arg in sys.argv[1:]:
            show(Path(arg))
