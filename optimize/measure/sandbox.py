"""Where untrusted code runs: the Sandbox contract and its bubblewrap backend.

A run lays files out read-only at mount points (`/work` for checks; `/skill` and `/scratch` for
the agent's scripts), runs one command with no network, a private /tmp, uid 65534, no
environment, no capabilities and CPU, memory, process, file-size and wall-clock limits, and
classifies the exit. No sandbox, no run: a sandbox that is missing or cannot start makes the
result `inconclusive`, never an unsandboxed execution. Availability is probed once per sandbox.

Bubblewrap works for any user: as root it first drops to uid 65534 with `setpriv` (the kernel
exempts uid 0 from RLIMIT_NPROC, so a fork bomb would not be bounded); as a normal user it runs
under that user's uid, mapped to 65534 inside a fresh user namespace (`--unshare-user`).
The Docker backend lives in sandbox_docker.py; what to run and how to judge it, in execcheck.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ingot.fsutil import check_relative

OUTPUT_LIMIT = 8000  # characters of stdout/stderr kept in a result
SANDBOX_UID = 65534
SANDBOX_TMP = "/tmp"  # noqa: S108 - a private tmpfs inside the sandbox, not the host's /tmp
_MOUNT_POINT = re.compile(r"^/[a-z][a-z0-9_-]{0,30}$")
_RESERVED = {
    "/bin",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/tmp",  # noqa: S108 - a name to refuse, not a path we use
    "/usr",
    "/var",
}

Mounts = Mapping[str, Mapping[str, bytes]]  # mount point -> {relative path: bytes}


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
    """A place to run untrusted commands. Backends say whether they can (`available`) and run
    one command over laid-out mounts (`_run`); the base class probes once and refuses politely."""

    name: str = "sandbox"
    limits: Limits
    _availability: tuple[bool, str] | None = None

    def available(self) -> tuple[bool, str]:
        raise NotImplementedError

    def isolation(self) -> str:
        """One line saying what this mode isolates, for `ingot status` and the docs."""
        raise NotImplementedError

    def ready(self) -> tuple[bool, str]:
        """`available()`, probed once per sandbox (probing starts a process or asks an engine)."""
        if self._availability is None:
            self._availability = self.available()
        return self._availability

    def diagnose(self) -> tuple[bool, str]:
        """Everything a run needs, checked now: for `ingot status`."""
        return self.ready()

    def run(self, files: Mapping[str, bytes], argv: Sequence[str]) -> ExecResult:
        """Run `argv` in /work, where `files` are laid out read-only."""
        return self.run_in({"/work": files}, argv, cwd="/work")

    def run_in(
        self, mounts: Mounts, argv: Sequence[str], cwd: str, wall_s: float | None = None
    ) -> ExecResult:
        """Run `argv` in `cwd` with each mount's files read-only at its mount point; `wall_s`
        may shorten (never lengthen) the wall-clock limit."""
        for point in mounts:
            check_mount_point(point)
        ok, why = self.ready()
        if not ok:
            return ExecResult("inconclusive", f"no sandbox, so not run: {why}")
        limits = self.limits
        if wall_s is not None and 0 < wall_s < limits.wall_s:
            limits = Limits(wall_s, limits.cpu_s, limits.memory_bytes, limits.processes, limits.file_bytes)
        return self._run(mounts, argv, cwd, limits)

    def _run(self, mounts: Mounts, argv: Sequence[str], cwd: str, limits: Limits) -> ExecResult:
        raise NotImplementedError


def check_mount_point(point: str) -> str:
    """A mount point is one fresh top-level folder (`/work`, `/skill`): never a system path."""
    if not _MOUNT_POINT.match(point) or point in _RESERVED:
        raise ValueError(f"sandbox mount point {point!r} must be one new top-level folder like /work")
    return point


def lay_out(files: Mapping[str, bytes], folder: Path) -> None:
    """Write `files` under `folder` readable by uid 65534: files 0644 (0755 when they start with
    `#!`, so `./scripts/x.sh` runs), folders 0755. Paths are checked: nothing lands outside."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    for rel, data in files.items():
        target = folder / check_relative(rel)
        for parent in reversed(target.relative_to(folder).parents[:-1]):
            (folder / parent).mkdir(exist_ok=True)
            (folder / parent).chmod(0o755)
        target.write_bytes(data)
        target.chmod(0o755 if data.startswith(b"#!") else 0o644)


def classify(code: int, out: bytes, err: bytes, elapsed: float, limits: Limits) -> ExecResult:
    """A finished command's result: timeout's 124/137 mean the wall clock, a signal or >128 a limit."""
    stdout = out.decode("utf-8", "replace")[-OUTPUT_LIMIT:]
    stderr = err.decode("utf-8", "replace")[-OUTPUT_LIMIT:]
    if code in (124, 137):
        reason = f"killed after the {limits.wall_s:g} s wall-clock limit"
        return ExecResult("failed", reason, code, stdout, stderr, elapsed)
    if code < 0 or code > 128:
        return ExecResult(
            "failed", f"killed by a resource limit (exit {code})", code, stdout, stderr, elapsed
        )
    status = "passed" if code == 0 else "failed"
    return ExecResult(status, f"exit code {code}", code, stdout, stderr, elapsed)


class BubblewrapSandbox(Sandbox):
    """bwrap + prlimit + timeout (+ setpriv when running as root)."""

    name = "bubblewrap"

    def __init__(self, bwrap: str = "bwrap", limits: Limits | None = None) -> None:
        self.bwrap, self.limits = bwrap, limits or Limits()
        # A fresh /proc for the sandbox's PID namespace. Inside a Docker container the kernel
        # refuses that mount (Docker masks parts of /proc); the probe then falls back to none.
        self.proc = True

    @staticmethod
    def _as_root() -> bool:
        return os.geteuid() == 0

    def available(self) -> tuple[bool, str]:
        needed = [self.bwrap, "prlimit", "timeout"] + (["setpriv"] if self._as_root() else [])
        missing = [tool for tool in needed if shutil.which(tool) is None]
        if missing:
            return False, f"sandbox tools missing: {', '.join(missing)} (install bubblewrap and util-linux)"
        probe = self._run({}, ["/usr/bin/true"], SANDBOX_TMP, Limits(wall_s=10))
        if probe.exit_code != 0 and "mount proc" in probe.stderr:
            self.proc = False
            probe = self._run({}, ["/usr/bin/true"], SANDBOX_TMP, Limits(wall_s=10))
        if probe.exit_code != 0:
            self.proc = True
            detail = (probe.stderr or probe.reason).strip()[:300]
            return False, f"bubblewrap cannot start a sandbox here ({detail})"
        return True, "bubblewrap"

    def isolation(self) -> str:
        who = "drops root to uid 65534 first" if self._as_root() else "your uid, mapped to 65534"
        proc = "" if self.proc else " (no /proc: this host refuses to mount one)"
        return (
            f"bubblewrap ({who}): new user, network, PID{proc}, IPC and UTS namespaces; no network; "
            "/usr read-only; private /tmp; no environment; no capabilities; CPU, memory, "
            "process, file-size and wall-clock limits"
        )

    def command(
        self, binds: Sequence[tuple[Path, str]], argv: Sequence[str], cwd: str, limits: Limits
    ) -> list[str]:
        drop = []
        if self._as_root():
            drop = ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups", "--"]
        mounts = [arg for source, point in binds for arg in ("--ro-bind", str(source), point)]
        return [
            "timeout",
            "--kill-after=1",
            f"{limits.wall_s:g}",
            *drop,
            "prlimit",
            f"--as={limits.memory_bytes}",
            f"--cpu={limits.cpu_s}",
            f"--nproc={limits.processes}",
            f"--fsize={limits.file_bytes}",
            "--",
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
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
            *(["--proc", "/proc"] if self.proc else []),
            "--dev",
            "/dev",
            "--tmpfs",
            SANDBOX_TMP,
            *mounts,
            "--chdir",
            cwd,
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

    def _run(self, mounts: Mounts, argv: Sequence[str], cwd: str, limits: Limits) -> ExecResult:
        if not mounts:  # the readiness probe: nothing to lay out, so no temporary folder is made
            return self._start([], argv, cwd, limits)
        with tempfile.TemporaryDirectory(prefix="ingot-exec-") as tmp:
            root = Path(tmp)
            root.chmod(0o755)
            binds = []
            for i, (point, files) in enumerate(sorted(mounts.items())):
                lay_out(files, root / f"m{i}")
                binds.append((root / f"m{i}", point))
            return self._start(binds, argv, cwd, limits)

    def _start(
        self, binds: Sequence[tuple[Path, str]], argv: Sequence[str], cwd: str, limits: Limits
    ) -> ExecResult:
        start = time.perf_counter()
        try:
            done = subprocess.run(
                self.command(binds, argv, cwd, limits),
                capture_output=True,
                timeout=limits.wall_s + 5,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return ExecResult("inconclusive", f"the sandbox itself failed: {exc}")
        elapsed = time.perf_counter() - start
        return classify(done.returncode, done.stdout, done.stderr, elapsed, limits)
