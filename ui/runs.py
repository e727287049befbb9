"""Background runs started from the UI: one process per run, one run per skill at a time.

A run is `ingot optimize SKILL [--description]` or `ingot evaluate SKILL --change ID` in its own
process group, so a crash or a hung model call never takes the UI down and a run can be stopped.
Its output goes to a pipe, so the CLI writes its progress as plain lines ("evaluate pdf: step 3
of 5: held-out A/B 6/24 judgements", ingot/cli/progress.py); the log is kept in
runs/ui-runs/<id>.log (capped) as it arrives, and progress is the newest such line, read back
with `ingot.progress.parse`. When the run ends, the verdict it reported (the passport state of
the change it measured or queued) is kept with it, so a run page never calls a blocked change's
evaluation a success. Metadata (<id>.json) outlives the UI: a run whose process vanished without
a recorded exit shows as "interrupted". A run only proposes; it takes no change-control lock of
its own beyond what the command takes to queue its result. A pass the model settings cannot run
is refused before it starts, with what to set.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ingot.errors import IngotError
from ingot.fsutil import write_atomic
from ingot.progress import parse
from optimize.control.lock import PromotionConflict
from optimize.control.passport import STATE_MEANING, STATES
from optimize.control.pending import ID_PATTERN
from optimize.control.promote import check_skill_name

MODES = ("body", "description", "evaluate")
MAX_LOG_BYTES = 2 << 20
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RUN_ID = re.compile(r"^run-[0-9]{8}T[0-9]{6}-[0-9a-f]{6}$")
# What `ingot evaluate` and `ingot optimize` print about the change they measured or queued.
_VERDICT = re.compile(
    r"^(?:evaluated (?P<evaluated>chg-[0-9a-f]{12}): |queued (?P<queued>chg-[0-9a-f]{12}) for review \()"
    r"(?P<state>[a-z-]+)",
    re.MULTILINE,
)


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
    change_id: str | None = None  # the change it measured (evaluate) or queued (optimize)
    verdict: str | None = None  # that change's passport state as the run reported it

    @property
    def title(self) -> str:
        """What the run is, and once it has one, the verdict: "evaluate chg-… of pdf: blocked"."""
        if self.mode == "evaluate":
            what = f"evaluate {self.change_id or 'a change'} of {self.skill}"
        else:
            what = f"{self.mode} pass for {self.skill}"
            if self.change_id:
                what += f", queued {self.change_id}"
        return f"{what}: {self.verdict}" if self.verdict else what

    @property
    def meaning(self) -> str | None:
        """What the verdict means, in the passport's own words (control/passport.py)."""
        return STATE_MEANING.get(self.verdict) if self.verdict else None

    @property
    def shown_status(self) -> str:
        """The process's state as a reader takes it: a run that ran to its end "finished" (what
        it found is the verdict, not this)."""
        return "finished" if self.status == "succeeded" else self.status


@dataclass(frozen=True)
class Progress:
    """The newest step a run reported: its line as written, and how far the whole run is."""

    label: str
    done: int
    total: int
    percent: int


def clean(raw: str) -> str:
    """Terminal output as a reader sees it: colours dropped, each redrawn line at its last state."""
    lines = []
    for line in _ANSI.sub("", raw).replace("\r\n", "\n").split("\n"):
        drawn = [part for part in line.split("\r") if part.strip()]
        lines.append(drawn[-1] if drawn else "")
    return "\n".join(lines)


def progress_of(raw: str) -> Progress | None:
    """The newest step line in a run's output (ingot/progress.py), or None before the first."""
    for line in reversed(clean(raw[-8192:]).splitlines()):
        step = parse(line)
        if step is not None:
            return Progress(step.line(), step.done, step.total, round(100 * step.fraction))
    return None


def _steps_collapsed(text: str) -> str:
    """The log with each step's run of progress lines cut to its newest ("4/12" replaces
    "0/12" ... "3/12"), so the page reads like the bar a terminal would show."""
    lines: list[str] = []
    previous = None
    for line in text.split("\n"):
        step = parse(line)
        key = None if step is None else (line[: line.find("step ")], step.index, step.name)
        if key is not None and key == previous:
            lines[-1] = line
        else:
            lines.append(line)
        previous = key
    return "\n".join(lines)


def verdict_of(output: str) -> tuple[str | None, str | None]:
    """The change a finished run measured or queued, and its passport state, from its output."""
    found = next(reversed(list(_VERDICT.finditer(output))), None)
    if found is None or found["state"] not in STATES:
        return None, None
    return found["evaluated"] or found["queued"], found["state"]


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
            try:
                proc = subprocess.Popen(  # noqa: S603 - our own CLI, arguments validated above
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,  # not a terminal: progress comes as plain lines
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise IngotError(f"could not start the run: {exc}") from exc
            run = Run(
                run_id,
                skill,
                mode,
                now.isoformat(timespec="seconds"),
                "running",
                proc.pid,
                change_id=change_id if mode == "evaluate" else None,
            )
            self._procs[run_id] = proc
            self._save(run)
        threading.Thread(target=self._pump, args=(run, proc), daemon=True).start()
        return run

    def _pump(self, run: Run, proc: subprocess.Popen[bytes]) -> None:
        written = 0
        assert proc.stdout is not None
        with (self.folder / f"{run.id}.log").open("ab") as log, proc.stdout:
            while chunk := os.read(proc.stdout.fileno(), 65536):  # as it comes: the page streams it
                if written < MAX_LOG_BYTES:
                    log.write(chunk[: MAX_LOG_BYTES - written])
                    log.flush()
                    written += len(chunk)
        code = proc.wait()
        change_id, verdict = verdict_of(self.output(run.id)[0]) if code == 0 else (None, None)
        with self._lock:
            current = self.get(run.id)
            stopped = current.status in ("stopping", "stopped")
            status = "stopped" if stopped else "succeeded" if code == 0 else "failed"
            finished = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            outcome = {"change_id": change_id or current.change_id, "verdict": verdict}
            self._save(replace(current, status=status, exit_code=code, finished=finished, **outcome))
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
        return _steps_collapsed(clean(raw)), progress_of(raw)

    def _save(self, run: Run) -> None:
        write_atomic(self.folder / f"{run.id}.json", json.dumps(asdict(run)).encode())
