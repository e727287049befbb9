"""Background optimize runs started from the UI: one process per run, one run per skill at a time.

A run is `ingot optimize SKILL [--description]` in its own process group, so a crash or a hung
model call never takes the UI down and a run can be stopped. Its output goes to a pseudo-terminal
so the progress bars draw as they do in a shell; it is kept in runs/ui-runs/<id>.log (capped),
and progress is read from the newest bar. Metadata (<id>.json) outlives the UI: a run whose
process vanished without a recorded exit shows as "interrupted". A run only proposes; it takes
no change-control lock of its own beyond what `ingot optimize` takes to queue its result. A pass
the model settings cannot run is refused before it starts, with what to set.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import pty
import re
import secrets
import signal
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ingot.errors import IngotError
from ingot.fsutil import write_atomic
from optimize.control.lock import PromotionConflict
from optimize.control.pending import ID_PATTERN
from optimize.control.promote import check_skill_name

MODES = ("body", "description", "evaluate")
MAX_LOG_BYTES = 2 << 20
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BAR = re.compile(r"(?P<desc>[^|\r\n]*?):\s*(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)")
_RUN_ID = re.compile(r"^run-[0-9]{8}T[0-9]{6}-[0-9a-f]{6}$")


class RunConflict(PromotionConflict):
    """A run for this skill is already in progress, or the run asked to stop is not running."""


class RunNotFound(IngotError):
    """No run with that id."""


class RunRefused(IngotError):
    """The pass cannot run with this server's model settings (say which to set)."""


@dataclass(frozen=True)
class Run:
    id: str
    skill: str
    mode: str
    started: str
    status: str  # running | stopping | succeeded | failed | stopped | interrupted
    pid: int | None = None
    exit_code: int | None = None
    finished: str | None = None


@dataclass(frozen=True)
class Progress:
    label: str
    done: int
    total: int

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else 0


def clean(raw: str) -> str:
    """Terminal output as a reader sees it: colours dropped, each redrawn line at its last state."""
    lines = []
    for line in _ANSI.sub("", raw).replace("\r\n", "\n").split("\n"):
        drawn = [part for part in line.split("\r") if part.strip()]
        lines.append(drawn[-1] if drawn else "")
    return "\n".join(lines)


def progress_of(raw: str) -> Progress | None:
    """The newest progress bar's position in raw terminal output."""
    bars = list(_BAR.finditer(_ANSI.sub("", raw)[-8192:]))
    if not bars:
        return None
    last = bars[-1]
    return Progress(last["desc"].strip(" \r\n"), int(last["n"]), int(last["total"]))


class RunManager:
    """Starts, tracks and stops optimize runs; state in `runs_dir/ui-runs/`."""

    def __init__(
        self,
        runs_dir: Path,
        roots: Sequence[Path],
        env: Mapping[str, str] | None = None,
        command: Sequence[str] = (sys.executable, "-m", "ingot.cli"),
        blocked: Mapping[str, str | None] | None = None,
    ) -> None:
        """`blocked`: why each optimize pass cannot run (runtime.optimize_missing), None: it can."""
        self.folder = runs_dir / "ui-runs"
        self.blocked = dict(blocked or {})
        self.roots, self.command = tuple(roots), tuple(command)
        self.env = {
            **(os.environ if env is None else env),
            "INGOT_HOME": str(runs_dir),
            "PYTHONUNBUFFERED": "1",
            "COLUMNS": "100",
            "TERM": "dumb",
        }
        self._lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, skill: str, mode: str, change_id: str | None = None) -> Run:
        """Start `ingot optimize` (mode body / description) or `ingot evaluate --change ID`."""
        check_skill_name(skill)
        if mode not in MODES:
            raise IngotError(f"unknown pass {mode!r}; choose one of {', '.join(MODES)}")
        if mode == "evaluate" and not (change_id and ID_PATTERN.match(change_id)):
            raise IngotError("an evaluation needs the pending change's id")
        if self.blocked.get(mode):  # refused before a process starts, not after it fails
            raise RunRefused(f"cannot start a {mode} pass: {self.blocked[mode]}")
        with self._lock:
            busy = [r for r in self.list() if r.skill == skill and r.status in ("running", "stopping")]
            if busy:
                raise RunConflict(f"an optimize run for {skill!r} is already in progress ({busy[0].id})")
            now = dt.datetime.now(dt.UTC)
            run_id = f"run-{now:%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
            if mode == "evaluate":
                args = [*self.command, "evaluate", skill, "--change", str(change_id)]
            else:
                args = [*self.command, "optimize", skill] + (
                    ["--description"] if mode == "description" else []
                )
            for root in self.roots:
                args += ["--skills", str(root)]
            self.folder.mkdir(parents=True, exist_ok=True)
            master, slave = pty.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
            try:
                proc = subprocess.Popen(  # noqa: S603 - our own CLI, arguments validated above
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=slave,
                    stderr=slave,
                    env=self.env,
                    start_new_session=True,
                )
            except OSError as exc:
                os.close(master)
                raise IngotError(f"could not start the optimize run: {exc}") from exc
            finally:
                os.close(slave)
            run = Run(run_id, skill, mode, now.isoformat(timespec="seconds"), "running", proc.pid)
            self._procs[run_id] = proc
            self._save(run)
        threading.Thread(target=self._pump, args=(run, proc, master), daemon=True).start()
        return run

    def _pump(self, run: Run, proc: subprocess.Popen[bytes], master: int) -> None:
        written = 0
        with (self.folder / f"{run.id}.log").open("ab") as log:
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                if written < MAX_LOG_BYTES:
                    log.write(chunk[: MAX_LOG_BYTES - written])
                    log.flush()
                    written += len(chunk)
        os.close(master)
        code = proc.wait()
        with self._lock:
            current = self.get(run.id)
            stopped = current.status in ("stopping", "stopped")
            status = "stopped" if stopped else "succeeded" if code == 0 else "failed"
            finished = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            self._save(replace(current, status=status, exit_code=code, finished=finished))
            self._procs.pop(run.id, None)

    def stop(self, run_id: str, grace_s: float = 10.0) -> Run:
        """Ask the run's process group to stop (SIGTERM, then SIGKILL after `grace_s`). The run
        stays "stopping", and its skill busy, until the process has really exited."""
        with self._lock:
            run = self.get(run_id)
            proc = self._procs.get(run_id)
            if run.status != "running" or proc is None:
                raise RunConflict(f"run {run_id} is not running")
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:  # it finished on its own a moment ago; the pump records how
                return run
            self._save(replace(run, status="stopping"))
            timer = threading.Timer(grace_s, self._kill, args=(proc,))
            timer.daemon = True
            timer.start()
            return self.get(run_id)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

    def get(self, run_id: str) -> Run:
        if not _RUN_ID.match(run_id):
            raise RunNotFound(f"no run {run_id!r}; the Runs page lists them")
        try:
            data = json.loads((self.folder / f"{run_id}.json").read_text())
            run = Run(**{k: data.get(k) for k in Run.__dataclass_fields__})
        except (OSError, ValueError, TypeError) as exc:
            raise RunNotFound(f"no run {run_id!r}; the Runs page lists them") from exc
        if run.status in ("running", "stopping") and run_id not in self._procs:
            return replace(run, status="interrupted")  # its UI process went away mid-run
        return run

    def list(self) -> list[Run]:
        if not self.folder.is_dir():
            return []
        runs = []
        for path in sorted(self.folder.glob("run-*.json"), reverse=True):
            try:
                runs.append(self.get(path.stem))
            except RunNotFound:
                continue
        return runs

    def output(self, run_id: str, tail: int = 200_000) -> tuple[str, Progress | None]:
        """The run's log as a reader sees it (last `tail` bytes) and its newest progress bar."""
        self.get(run_id)
        try:
            with (self.folder / f"{run_id}.log").open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - tail))
                raw = log.read().decode("utf-8", "replace")
        except FileNotFoundError:
            raw = ""
        return clean(raw), progress_of(raw)

    def _save(self, run: Run) -> None:
        write_atomic(self.folder / f"{run.id}.json", json.dumps(asdict(run)).encode())
