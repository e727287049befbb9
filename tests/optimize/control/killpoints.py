"""Stop a writer at each of its fault points in a forked child: SIGKILL there, or EIO raised there.

`points(action)` runs `action` once in a child and returns the names of the fault points it
passed (ingot/faults.py), in order; `run(action, at, fault)` runs it in a fresh child that is
SIGKILLed at point number `at` (0-based), or gets `OSError(EIO)` raised there, and says how the
child ended, with what it wrote to stdout and stderr. A fork, not a new interpreter: the child
inherits the imported modules, so a test can afford every point of a writer where a fresh
`python` per point would cost a second each. The action runs in the child only; whatever it
leaves on disk is what the test then inspects and recovers.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ingot import faults

KILL, EIO = "kill", "eio"


@dataclass(frozen=True)
class Ended:
    """How one child ended."""

    killed: bool  # SIGKILLed at the chosen point
    code: int | None  # its exit code otherwise (0: the action returned; 1: it raised)
    error: str  # the exception the action raised, if any (type: message)
    traceback: str
    stdout: str
    stderr: str
    passed: tuple[str, ...]  # the points it passed (all of them, for `points`)


def _child(action: Callable[[], object], at: int | str, fault: str, out: Path) -> None:
    passed: list[str] = []

    def hook(name: str) -> None:
        if len(passed) == at or (name == at and at not in passed):
            if fault == KILL:
                os.kill(os.getpid(), signal.SIGKILL)
            passed.append(name)
            raise OSError(errno.EIO, f"Input/output error (injected at {name!r})")
        passed.append(name)

    faults.install(hook)
    report: dict[str, object] = {"error": "", "traceback": "", "code": 0}
    try:
        action()
    except SystemExit as exc:  # a CLI entry point
        report["code"] = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
        report.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(), code=1)
    faults.install(None)
    report["passed"] = passed
    sys.stdout.flush()
    sys.stderr.flush()
    out.write_text(json.dumps(report))


def run(action: Callable[[], object], at: int | str = -1, fault: str = KILL) -> Ended:
    """Run `action` in a forked child, faulting at point number `at` (-1: never), or at the first
    point named `at`."""
    with tempfile.TemporaryDirectory(prefix="killpoint-") as scratch:
        folder = Path(scratch)
        out, stdout, stderr = folder / "report.json", folder / "stdout", folder / "stderr"
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the test runner
            try:
                for fd, path in ((1, stdout), (2, stderr)):
                    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    os.dup2(target, fd)
                    os.close(target)
                # pytest's capture replaced sys.stdout / sys.stderr with its own files: print
                # and logging must reach the child's fds 1 and 2, which the parent reads.
                sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - lives as long as the child
                sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
                _child(action, at, fault, out)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        report = json.loads(out.read_text()) if out.exists() else {}
        return Ended(
            killed,
            None if killed else int(report.get("code", -1)),
            str(report.get("error", "")),
            str(report.get("traceback", "")),
            stdout.read_text(errors="replace"),
            stderr.read_text(errors="replace"),
            tuple(report.get("passed", ())),
        )


def points(action: Callable[[], object]) -> tuple[str, ...]:
    """The fault points `action` passes when nothing goes wrong (it must succeed)."""
    ended = run(action)
    assert ended.code == 0 and not ended.error, ended.traceback or ended.stderr
    return ended.passed
