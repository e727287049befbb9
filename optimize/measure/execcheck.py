"""Execution-grounded checks: run code from an answer (or a task's `check:`) in a real sandbox.

The check API: `run_check` lays out the task's fixture, the answer's code as `answer.py` and the
assertion as `check.py`, and runs it; `run_python` runs a snippet. Where and how code runs is the
sandbox's job (sandbox.py: the contract and bubblewrap; sandbox_docker.py: Docker), re-exported
here. No sandbox, no run: the result is `inconclusive`, never an unsandboxed execution. A fixture
that fails to set up is also `inconclusive`, not a verdict against the answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from optimize.measure.sandbox import BubblewrapSandbox, ExecResult, Limits, Sandbox
from optimize.measure.sandbox_docker import DEFAULT_IMAGE, DockerSandbox

__all__ = [
    "BubblewrapSandbox",
    "DockerSandbox",
    "ExecResult",
    "Limits",
    "Sandbox",
    "answer_code",
    "make_sandbox",
    "run_check",
    "run_python",
]


def make_sandbox(
    kind: str, docker_image: str | None = None, docker_host: str | None = None
) -> Sandbox | None:
    """The configured sandbox (EXEC_SANDBOX): bubblewrap (default), docker, or none."""
    if kind == "docker":
        return DockerSandbox(image=docker_image or DEFAULT_IMAGE, base_url=docker_host)
    if kind == "none":
        return None
    return BubblewrapSandbox()


def _prepared(sandbox: Sandbox, files: Mapping[str, bytes], setup: str | None) -> ExecResult | None:
    """None if there is no setup or it succeeded; else the inconclusive result to return."""
    if setup is None:
        return None
    prepared = sandbox.run({**files, "setup.py": setup.encode()}, ["python3", "setup.py"])
    if prepared.status == "passed":
        return None
    return ExecResult(
        "inconclusive",
        f"the check's fixture failed to set up ({prepared.reason}); this says nothing about the answer",
        prepared.exit_code,
        prepared.stdout,
        prepared.stderr,
        prepared.duration_s,
    )


def run_python(
    sandbox: Sandbox,
    source: str,
    fixture: Mapping[str, bytes] | None = None,
    setup: str | None = None,
) -> ExecResult:
    """Run `source` with the system Python; a failing `setup` script makes the result inconclusive."""
    files = {**(fixture or {}), "main.py": source.encode()}
    return _prepared(sandbox, files, setup) or sandbox.run(files, ["python3", "main.py"])


_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def answer_code(answer: str) -> str:
    """The first fenced Python block of an answer, or the whole answer if it has none."""
    found = _CODE_BLOCK.search(answer)
    return found.group(1) if found else answer


def run_check(
    sandbox: Sandbox | None,
    answer: str,
    fixture: Mapping[str, str],
    assertion: str,
    setup: str | None = None,
) -> ExecResult:
    """Run a task's check against an answer: answer.py (its code), the fixture, then check.py."""
    if sandbox is None:
        return ExecResult("inconclusive", "no sandbox configured, so not run")
    files = {name: text.encode() for name, text in fixture.items()}
    files["answer.py"] = answer_code(answer).encode()
    files["check.py"] = assertion.encode()
    return _prepared(sandbox, files, setup) or sandbox.run(files, ["python3", "check.py"])
