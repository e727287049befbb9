"""Execution-grounded checks: run code from an answer (or a task's `check:`) in a real sandbox.

Bubblewrap by default: the command runs as uid 65534 (dropped with `setpriv` before `bwrap`, so
RLIMIT_NPROC really applies), in fresh user, network, PID, IPC and UTS namespaces (no network),
with /usr read-only, a private /tmp, the check's files read-only at /work, no environment, all
capabilities dropped, and CPU, memory, process, file-size and wall-clock limits. No sandbox, no
run: a missing or broken sandbox makes the check `inconclusive`, never an unsandboxed execution.
A fixture that fails to set up is also `inconclusive`, not a verdict against the answer.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ingot.fsutil import check_relative

OUTPUT_LIMIT = 8000  # characters of stdout/stderr kept in a result
SANDBOX_UID = 65534
SANDBOX_TMP = "/tmp"  # noqa: S108 - a private tmpfs inside the sandbox, not the host's /tmp


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    cpu_s: int = 5
    memory_bytes: int = 512 << 20
    processes: int = 64
    file_bytes: int = 16 << 20


@dataclass(frozen=True)
class ExecResult:
    status: str  # "passed" | "failed" | "inconclusive"
    reason: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0


class Sandbox:
    """Where untrusted code runs. Subclasses say whether they can (`available`) and how
    (`command`); `run` probes availability once per sandbox, since probing starts a process."""

    limits: Limits
    _availability: tuple[bool, str] | None = None

    def available(self) -> tuple[bool, str]:
        raise NotImplementedError

    def command(self, workdir: Path, argv: Sequence[str], limits: Limits) -> list[str]:
        raise NotImplementedError

    def run(self, files: Mapping[str, bytes], argv: Sequence[str]) -> ExecResult:
        if self._availability is None:
            self._availability = self.available()
        ok, why = self._availability
        if not ok:
            return ExecResult("inconclusive", f"no sandbox, so not run: {why}")
        return _execute(self.command, files, argv, self.limits)


class BubblewrapSandbox(Sandbox):
    """Runs commands under bwrap + prlimit + timeout; `available()` says whether it can."""

    def __init__(self, bwrap: str = "bwrap", limits: Limits | None = None) -> None:
        self.bwrap, self.limits = bwrap, limits or Limits()

    def available(self) -> tuple[bool, str]:
        missing = [
            tool for tool in (self.bwrap, "setpriv", "prlimit", "timeout") if shutil.which(tool) is None
        ]
        if missing:
            return False, f"sandbox tools missing: {', '.join(missing)} (install bubblewrap and util-linux)"
        probe = _execute(self.command, {}, ["/usr/bin/true"], Limits(wall_s=10))
        if probe.exit_code != 0:
            return False, f"bubblewrap cannot start a sandbox here: {probe.stderr.strip()[:300]}"
        return True, "bubblewrap"

    def command(self, workdir: Path, argv: Sequence[str], limits: Limits) -> list[str]:
        return [
            "timeout",
            "--kill-after=1",
            str(limits.wall_s),
            "setpriv",
            f"--reuid={SANDBOX_UID}",
            f"--regid={SANDBOX_UID}",
            "--clear-groups",
            "--",
            "prlimit",
            f"--as={limits.memory_bytes}",
            f"--cpu={limits.cpu_s}",
            f"--nproc={limits.processes}",
            f"--fsize={limits.file_bytes}",
            "--",
            self.bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--symlink",
            "usr/bin",
            "/bin",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            SANDBOX_TMP,
            "--ro-bind",
            str(workdir),
            "/work",
            "--chdir",
            "/work",
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/bin:/bin",
            "--setenv",
            "HOME",
            SANDBOX_TMP,
            "--cap-drop",
            "ALL",
            "--",
            *argv,
        ]


def _execute(
    command: Callable[[Path, Sequence[str], Limits], list[str]],
    files: Mapping[str, bytes],
    argv: Sequence[str],
    limits: Limits,
) -> ExecResult:
    """Lay out `files` in a fresh folder, run the sandbox `command` over it, and classify the exit."""
    with tempfile.TemporaryDirectory(prefix="ingot-exec-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)
        for rel, data in files.items():
            target = workdir / check_relative(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(0o644)
        start = time.perf_counter()
        try:
            done = subprocess.run(
                command(workdir, argv, limits), capture_output=True, timeout=limits.wall_s + 5, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return ExecResult("inconclusive", f"the sandbox itself failed: {exc}")
        elapsed = time.perf_counter() - start
    out = done.stdout.decode("utf-8", "replace")[-OUTPUT_LIMIT:]
    err = done.stderr.decode("utf-8", "replace")[-OUTPUT_LIMIT:]
    if done.returncode in (124, 137):
        reason = f"killed after the {limits.wall_s:.0f} s wall-clock limit"
        return ExecResult("failed", reason, done.returncode, out, err, elapsed)
    if done.returncode < 0 or done.returncode > 128:
        reason = f"killed by a resource limit (exit {done.returncode})"
        return ExecResult("failed", reason, done.returncode, out, err, elapsed)
    status = "passed" if done.returncode == 0 else "failed"
    return ExecResult(status, f"exit code {done.returncode}", done.returncode, out, err, elapsed)


class DockerSandbox(Sandbox):
    """The same checks in a throwaway container (EXEC_SANDBOX=docker): no network, read-only root,
    tmpfs /tmp, uid 65534, memory/CPU/pids limits. Needs a running engine; without one every
    check is inconclusive."""

    def __init__(self, image: str = "python:3.11-slim", limits: Limits | None = None) -> None:
        self.image, self.limits = image, limits or Limits()

    def available(self) -> tuple[bool, str]:
        if shutil.which("docker") is None:
            return False, "the docker client is not installed"
        try:
            probe = subprocess.run(
                ["docker", "info", "--format", "{{.ServerVersion}}"],
                capture_output=True,
                timeout=15,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"docker did not answer: {exc}"
        if probe.returncode != 0:
            return False, "no Docker engine is reachable (`docker info` failed)"
        return True, "docker"

    def command(self, workdir: Path, argv: Sequence[str], limits: Limits) -> list[str]:
        return [
            "timeout",
            "--kill-after=1",
            str(limits.wall_s),
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--read-only",
            "--tmpfs",
            f"{SANDBOX_TMP}:rw,size=64m",
            "--user",
            f"{SANDBOX_UID}:{SANDBOX_UID}",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--pids-limit",
            str(limits.processes),
            "--memory",
            str(limits.memory_bytes),
            "--cpus",
            "1",
            "-v",
            f"{workdir}:/work:ro",
            "-w",
            "/work",
            self.image,
            *argv,
        ]


def make_sandbox(kind: str) -> Sandbox | None:
    """The configured sandbox (EXEC_SANDBOX): bubblewrap (default), docker, or none."""
    if kind == "docker":
        return DockerSandbox()
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
