"""Pushing Ingot's commits to GIT_PUSH_REMOTE: in the background, retried, and never silently dropped.

After each commit `Pusher.request` pushes the branch and Ingot's notes (gitrepo.py: atomic,
fast-forward only) from a background thread, so a slow or unreachable remote never holds the
change lock. A failed push is retried with a growing wait (1 s doubling to 60 s) for as long as
the process lives; `ingot serve` also retries at its background tick, so a commit made by a CLI
process that exited is pushed later. Every attempt's result is kept in `<home>/git-push.json`
(schema_version 1: the last commit pushed, the last failure and how many attempts in a row
failed) and `ingot status` shows it: a rejected push (the remote moved on: someone else pushed) is
shown as such, with what to do; nothing is ever force-pushed.
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import logging
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from ingot.fsutil import write_atomic
from optimize.control.gitrepo import GitError, GitRepo

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1
FIRST_WAIT_S, LONGEST_WAIT_S = 1.0, 60.0
EXIT_WAIT_S = 30.0  # how long a process about to exit gives the push it started (a CLI approval)
RECORD = "git-push.json"


@dataclass(frozen=True)
class PushState:
    """What `git-push.json` says about one remote."""

    remote: str
    pushed: str | None  # the newest commit a push delivered
    failed: str | None  # the commit the last failed attempt tried to deliver
    error: str | None
    attempts: int  # failed attempts in a row
    time: str | None  # of the last attempt

    @property
    def rejected(self) -> bool:
        """The remote refused a fast-forward: it holds commits this repository does not."""
        text = (self.error or "").lower()
        return any(word in text for word in ("rejected", "non-fast-forward", "fetch first"))


def read_state(home: Path, remote: str) -> PushState | None:
    """The record for `remote`, or None when nothing was ever pushed there (or it is unreadable:
    the next attempt writes it again)."""
    try:
        data = json.loads((home / RECORD).read_text())
        entry = data["remotes"][remote]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return PushState(
        remote,
        entry.get("pushed"),
        entry.get("failed"),
        entry.get("error"),
        int(entry.get("attempts", 0)),
        entry.get("time"),
    )


def _record(home: Path, repo: GitRepo, remote: str, commit: str, error: str | None) -> None:
    """Merge one attempt into the record under a file lock: several processes push the same
    branch, so a success never goes back to an older commit and a failure of a commit already
    delivered is not shown."""
    path = home / RECORD
    with FileLock(str(path) + ".lock"):
        try:
            data = json.loads(path.read_text())
            remotes = dict(data.get("remotes", {}))
        except (OSError, ValueError, AttributeError):
            remotes = {}
        entry = dict(remotes.get(remote, {}))
        pushed = entry.get("pushed")
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        if error is None:
            if pushed is None or _is_ancestor(repo, pushed, commit):
                entry["pushed"] = commit
            entry.update(failed=None, error=None, attempts=0, time=now)
        elif pushed is None or not _is_ancestor(repo, commit, pushed):
            entry.update(failed=commit, error=error, attempts=int(entry.get("attempts", 0)) + 1, time=now)
        remotes[remote] = entry
        write_atomic(
            path, json.dumps({"schema_version": SCHEMA_VERSION, "remotes": remotes}, indent=2).encode()
        )


def _is_ancestor(repo: GitRepo, older: str, newer: str) -> bool:
    try:
        return repo.is_ancestor(older, newer)
    except GitError:
        return False


class Pusher:
    """Pushes one repository's branch to one remote; one background thread at a time."""

    def __init__(self, home: Path, repo: GitRepo, remote: str) -> None:
        self.home, self.repo, self.remote = home, repo, remote
        self._lock = threading.Condition()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._requested = self._attempted = 0  # requests made, and how many an attempt has covered
        self._closed = False

    def request(self) -> None:
        """Push HEAD soon (now, or when the retry in progress next runs)."""
        with self._lock:
            self._requested += 1
            self._wake.set()
            if self._requested == 1:  # a process about to exit first gives its push a chance
                atexit.register(self._at_exit)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ingot-git-push", daemon=True)
                self._thread.start()

    def _at_exit(self) -> None:
        state = self.wait(EXIT_WAIT_S)
        if state is not None and state.error and self.busy:
            print(
                f"ingot: could not push to {self.remote} yet ({state.error}); `ingot serve` retries it and "
                "`ingot status` shows it",
                file=sys.stderr,
            )

    def close(self, timeout_s: float) -> None:
        """Let the attempt under way finish (up to `timeout_s`), then make no more (a process
        that is about to delete the repository, such as a benchmark)."""
        self.wait(timeout_s)
        with self._lock:
            self._closed = True
            thread = self._thread
            self._wake.set()
        if thread is not None:
            thread.join(timeout_s)

    @property
    def busy(self) -> bool:
        """A push (or its retries) is under way."""
        return self._thread is not None

    def wait(self, timeout_s: float) -> PushState | None:
        """Wait up to `timeout_s` until an attempt covered every request made so far (whether it
        succeeded or not: a CLI process about to exit says which); the record then."""
        with self._lock:
            self._lock.wait_for(lambda: self._attempted >= self._requested, timeout_s)
        return read_state(self.home, self.remote)

    def push_once(self) -> bool:
        """One attempt, recorded; True when the remote holds HEAD."""
        head = self.repo.head()
        if head is None:
            return True
        try:
            self.repo.push(self.remote)
        except GitError as exc:
            _record(self.home, self.repo, self.remote, head, str(exc))
            log.warning("could not push %s to %s: %s (retrying)", self.repo.top, self.remote, exc)
            return False
        _record(self.home, self.repo, self.remote, head, None)
        return True

    def _run(self) -> None:
        wait = FIRST_WAIT_S
        while True:
            with self._lock:
                if self._closed:
                    self._thread = None
                    return
                self._wake.clear()
                covering = self._requested
            try:
                pushed = self.push_once()
            except Exception:  # a full disk writing the record: the next wait retries it
                log.exception("a push attempt of %s failed", self.repo.top)
                pushed = False
            with self._lock:
                self._attempted = covering
                self._lock.notify_all()
                if pushed and not self._wake.is_set():
                    self._thread = None  # decided under the lock: a later request starts a new one
                    return
            if not pushed and not self._wake.is_set():
                self._wake.wait(wait)
                wait = min(wait * 2, LONGEST_WAIT_S)
