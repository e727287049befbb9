"""A replica: serve a primary's skills from its pushed git remote, and only what verifies.

A replica holds no audit key and makes no decisions. It keeps, in its own state home:
- `replica/repo.git`, a bare clone: each sync fetches the remote's branch and Ingot's notes;
- `replica/revisions/<skill>/<revision>/`, every revision it verified, written once, by content;
- `replica/served.json`, the library it serves: the newest verified commit with each root's
  skills and revisions. Replacing this one file (write, fsync, rename) is the switch, for the
  whole library at once; it is also what the next sync verifies from;
- `replica/sync.json`, what the last syncs saw: the remote's tip, refused commits and why, the
  last error, since when it has been behind (status and metrics read it).
A sync fetches, checks every new commit with signed_history.py (signed by an allowed signer,
descending from the verified commit, each skill change an Ingot commit whose folder hashes to its
trailer's revision, each evidence digest matching its attached bundle), writes the revisions that
verified, then switches. Anything that fails is refused and the last verified library keeps
serving; a replica killed at any step serves the old library or the new one, never a mix, and
its next sync completes. One sync at a time per state home (a file lock): the serving process
runs one per REPLICA_INTERVAL_S, `ingot replica sync` runs one now.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from ingot import faults
from ingot.errors import ConfigError, SkillInvalid
from ingot.fsutil import write_atomic
from mcp_server.registry import Limits, Skill, read_skill
from optimize.control.gitrepo import GitError, GitRepo
from optimize.control.signed_history import (
    BASELINE,
    HistoryError,
    LibraryState,
    RangeResult,
    Verifier,
    read_commits,
    verify_range,
)

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1
TIP_REF = "refs/replica/tip"
NOTES_REF = "refs/notes/remote/ingot"  # git notes live under refs/notes/
KEEP_REFUSED = 50  # refused commits remembered in sync.json (their count is kept whole)


@dataclass(frozen=True)
class ReplicaConfig:
    """Where a replica fetches from and whom it believes (settings REPLICA_*)."""

    remote: str
    branch: str
    allowed_signers: Path
    home: Path  # the replica's state home
    interval_s: float = 30.0

    @property
    def folder(self) -> Path:
        return self.home / "replica"


@dataclass(frozen=True)
class SyncResult:
    """One sync, as `ingot replica sync` prints it."""

    fetched: str | None  # the remote's tip, None when the fetch failed
    served: str | None  # the commit served after the sync
    switched: bool
    refused: tuple[tuple[str, str], ...]  # (commit, why)
    error: str | None = None  # the fetch or the range failed as a whole


class RevisionStore:
    """`replica/revisions`: each skill revision as a complete folder, written once."""

    def __init__(self, path: Path, limits: Limits) -> None:
        self.path, self.limits = path, limits
        self._trees: dict[tuple[str, str], str | None] = {}  # (skill, git tree id) -> revision
        self._listed: dict[tuple[str, str], dict[str, str]] = {}  # (commit, root) -> folder tree ids

    def folder(self, skill: str, revision: str) -> Path:
        return self.path / skill / revision

    def export(self, repo: GitRepo, commit: str, root: str, skill: str) -> str | None:
        """Write the folder `root/skill` at `commit` as its revision's folder; the revision, or
        None when it is not a valid skill. A git tree seen before is not written again."""
        path = skill if root in (".", "") else f"{root}/{skill}"
        tree = self._listed.get((commit, root), {}).get(skill) or repo.text("rev-parse", f"{commit}:{path}")
        known = self._trees.get((skill, tree), "")
        if known is None or (known and self.folder(skill, known).is_dir()):  # pruned: export again
            return known
        self.path.mkdir(parents=True, exist_ok=True)
        scratch = self.path / f".tmp-{skill}-{tree[:12]}"
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            try:
                repo.export_tree(f"{commit}:{path}", scratch)
                revision = read_skill(scratch.parent, scratch, self.limits, name=skill).revision
            except (SkillInvalid, GitError):  # a link, a submodule, an invalid skill: not served
                revision = None
            if revision is not None and not self.folder(skill, revision).is_dir():
                self.folder(skill, revision).parent.mkdir(parents=True, exist_ok=True)
                faults.point("replica: place revision")
                scratch.rename(self.folder(skill, revision))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self._trees[skill, tree] = revision
        return revision

    def prefetch(self, repo: GitRepo, commit: str, root: str) -> None:
        """Export every folder of `root` at `commit` in one pass over git's objects (a baseline
        checks them all: one `ls-tree` and one `cat-file --batch` instead of two per skill)."""
        spec = f"{commit}:{'' if root in ('.', '') else root}"
        folders = {}
        for entry in repo.git("ls-tree", "-z", spec).decode("utf-8", "replace").split("\0"):
            if entry and entry.split()[1] == "tree" and not entry.split("\t", 1)[1].startswith("."):
                folders[entry.split("\t", 1)[1]] = entry.split()[2]
        self._listed = {(commit, root): folders}  # only the newest listing is worth keeping
        todo = {name: tree for name, tree in folders.items() if (name, tree) not in self._trees}
        if not todo:
            return
        scratch = self.path / f".tmp-prefetch-{commit[:12]}"
        shutil.rmtree(scratch, ignore_errors=True)
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            try:
                repo.export_tree(spec, scratch)
            except GitError:  # a link somewhere: each folder is then checked (and refused) alone
                return
            for name, tree in todo.items():
                try:
                    revision = read_skill(scratch, scratch / name, self.limits, name=name).revision
                except SkillInvalid:
                    self._trees[name, tree] = None
                    continue
                if not self.folder(name, revision).is_dir():
                    self.folder(name, revision).parent.mkdir(parents=True, exist_ok=True)
                    faults.point("replica: place revision")
                    (scratch / name).rename(self.folder(name, revision))
                self._trees[name, tree] = revision
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def prune(self, keep: set[tuple[str, str]]) -> None:
        """Remove revisions no kept state serves (and what a killed export left)."""
        if not self.path.is_dir():
            return
        for leftover in self.path.glob(".tmp-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        for skill in self.path.iterdir():
            if not skill.is_dir():
                continue
            for revision in skill.iterdir():
                if (skill.name, revision.name) not in keep:
                    shutil.rmtree(revision, ignore_errors=True)
            if not any(skill.iterdir()):
                skill.rmdir()


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def served_state(config: ReplicaConfig) -> LibraryState | None:
    """The library this replica serves (served.json), or None before its first verified sync."""
    data = _read_json(config.folder / "served.json")
    if data is None:
        return None
    try:
        return LibraryState.from_json(data["state"])
    except (KeyError, TypeError, ValueError):
        return None


class Replica:
    """Syncs one replica state home from its remote."""

    def __init__(self, config: ReplicaConfig, limits: Limits) -> None:
        if not config.allowed_signers.is_file():
            raise ConfigError(
                f"the allowed signers file {config.allowed_signers} does not exist: a replica serves only "
                "commits signed by a key it lists (one line per key: `ingot ssh-ed25519 AAAA...`); set "
                "REPLICA_ALLOWED_SIGNERS"
            )
        self.config = config
        self.folder = config.folder
        self.repo = GitRepo(self.folder / "repo.git")
        self.store = RevisionStore(self.folder / "revisions", limits)

    # -- one sync ------------------------------------------------------------------------------

    def sync(self, wait_s: float = 0.0) -> SyncResult:
        """Fetch, verify, switch; None of it if another sync holds the lock for `wait_s`."""
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(str(self.folder / "sync.lock"), timeout=wait_s):
                return self._sync()
        except Timeout:
            served = served_state(self.config)
            return SyncResult(None, served.commit if served else None, False, (), "another sync is running")

    def _sync(self) -> SyncResult:
        status = _read_json(self.folder / "sync.json") or {}
        served = served_state(self.config)
        tip, error = self._fetch()
        if tip is None:
            self._status(status, served, None, error=error)
            return SyncResult(None, served.commit if served else None, False, (), error)
        if served is not None and tip == served.commit:
            self._status(status, served, tip)
            return SyncResult(tip, tip, False, ())
        faults.point("replica: verify")
        try:
            result = self._verify(tip, served)
        except (HistoryError, GitError, OSError) as exc:
            refused = ((tip, str(exc)),)
            self._status(status, served, tip, refused=refused)
            return SyncResult(tip, served.commit if served else None, False, refused, str(exc))
        refused = ((result.refused.commit.sha, str(result.refused.problem)),) if result.refused else ()
        switched = result.state is not None and (served is None or result.state.commit != served.commit)
        if switched:
            assert result.state is not None
            self._switch(result.state, served)
            served = result.state
        self._status(status, served, tip, refused=refused, superseded=result)
        return SyncResult(tip, served.commit if served else None, switched, refused)

    def _fetch(self) -> tuple[str | None, str | None]:
        """The remote branch's tip after fetching it (and Ingot's notes), or (None, why)."""
        if not (self.repo.top / "HEAD").exists():
            self.repo.top.mkdir(parents=True, exist_ok=True)
            self.repo.git("init", "--quiet", "--bare")
        faults.point("replica: fetch")
        branch = f"+refs/heads/{self.config.branch}:{TIP_REF}"
        done = self.repo.run(
            "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", self.config.remote, branch
        )
        if done.returncode != 0:
            reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
            text = (reason or ["no message"])[-1]
            if "couldn't find remote ref" in text:
                return None, f"the branch {self.config.branch} is gone from {self.config.remote} (deleted?)"
            return None, f"cannot fetch {self.config.remote}: {text}"
        notes = "+refs/notes/*:refs/notes/remote/*"
        self.repo.run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", self.config.remote, notes)
        return self.repo.resolve(TIP_REF), None

    def _verify(self, tip: str, served: LibraryState | None) -> RangeResult:
        verifier = Verifier(self.repo, self.config.allowed_signers, self.store.export, self.store.prefetch)
        verifier.notes_ref = NOTES_REF
        if served is not None:
            if not self.repo.is_ancestor(served.commit, tip):
                raise HistoryError(
                    f"history rewritten: {self.config.branch} at {tip[:12]} does not descend from "
                    f"{served.commit[:12]}, the commit this replica verified last (a force-push?)"
                )
            commits = read_commits(self.repo, self.config.allowed_signers, tip, served.commit)
            return verify_range(verifier, commits, served)
        baseline = self.repo.text("log", "-n", "1", "--format=%H", f"--grep=^Ingot-Action: {BASELINE}$", tip)
        if not baseline:
            raise HistoryError(
                f"{self.config.branch} holds no Ingot baseline: run `ingot baseline` on the primary, "
                "so replicas have a signed starting point"
            )
        commits = read_commits(self.repo, self.config.allowed_signers, tip, f"{baseline}^")
        if not commits or commits[0].sha != baseline:  # a root baseline: `baseline^` names nothing
            commits = read_commits(self.repo, self.config.allowed_signers, tip)
            commits = commits[[c.sha for c in commits].index(baseline) :]
        return verify_range(verifier, commits, None)

    def _switch(self, state: LibraryState, previous: LibraryState | None) -> None:
        """Serve `state`: its revisions are in the store; replacing served.json switches."""
        data = {"schema_version": SCHEMA_VERSION, "state": state.as_json(), "verified_at": now()}
        faults.point("replica: switch")
        write_atomic(self.folder / "served.json", json.dumps(data, indent=2).encode())
        keep = {
            (s, r)
            for st in (state, previous)
            if st
            for skills in st.roots.values()
            for s, r in skills.items()
        }
        self.store.prune(keep)

    def _status(
        self,
        status: Mapping,
        served: LibraryState | None,
        tip: str | None,
        error: str | None = None,
        refused: tuple[tuple[str, str], ...] = (),
        superseded: RangeResult | None = None,
    ) -> None:
        faults.point("replica: state write")
        when = now()
        known = {r["commit"]: r for r in status.get("refused", []) if isinstance(r, dict) and "commit" in r}
        seen = set(status.get("refused_seen", []))
        for commit, why in refused:
            known.setdefault(commit, {"commit": commit, "why": why, "first_seen": when})
            seen.add(commit)
        if superseded is not None:
            for checked in superseded.superseded:
                known.pop(checked.commit.sha, None)
        behind = tip is not None and (served is None or tip != served.commit)
        data = {
            "schema_version": SCHEMA_VERSION,
            "remote": self.config.remote,
            "branch": self.config.branch,
            "last_attempt": when,
            "last_fetch_ok": when if tip is not None else status.get("last_fetch_ok"),
            "remote_tip": tip if tip is not None else status.get("remote_tip"),
            "served": served.commit if served else None,
            "error": error,
            "refused": list(known.values())[-KEEP_REFUSED:],
            "refused_seen": sorted(seen),
            "behind_since": (status.get("behind_since") or when) if behind else None,
        }
        write_atomic(self.folder / "sync.json", json.dumps(data, indent=2).encode(), durable=False)


@dataclass(frozen=True)
class ReplicaStatus:
    """What `status`, the log and /metrics say about a replica."""

    remote: str
    branch: str
    served: str | None
    verified_at: str | None
    remote_tip: str | None
    error: str | None
    refused: tuple[Mapping, ...]
    refused_total: int
    lag_s: float  # 0 when serving the remote's tip; else since the replica first fell behind


def replica_status(config: ReplicaConfig) -> ReplicaStatus:
    data = _read_json(config.folder / "sync.json") or {}
    served = _read_json(config.folder / "served.json") or {}
    state = served_state(config)
    lag = 0.0
    since = data.get("behind_since")
    if data.get("error") and not since:
        since = data.get("last_fetch_ok") or served.get("verified_at")
    if since:
        try:
            lag = max(0.0, time.time() - dt.datetime.fromisoformat(since).timestamp())
        except ValueError:
            lag = 0.0
    return ReplicaStatus(
        config.remote,
        config.branch,
        state.commit if state else None,
        served.get("verified_at"),
        data.get("remote_tip"),
        data.get("error"),
        tuple(r for r in data.get("refused", []) if isinstance(r, dict)),
        len(data.get("refused_seen", [])),
        round(lag, 1),
    )


class ReplicaPin:
    """A library filter serving what served.json names from the revision store, whatever the
    placeholder root holds (nothing): the library a replica verified, or nothing before that."""

    def __init__(self, config: ReplicaConfig, limits: Limits) -> None:
        self.config, self.limits = config, limits
        self.store = RevisionStore(config.folder / "revisions", limits)
        self._read: dict[tuple[str, str], Skill] = {}

    def __call__(self, skills: Mapping[str, Skill], roots: tuple[Path, ...]) -> dict[str, Skill]:
        state = served_state(self.config)
        if state is None:
            return {}
        served: dict[str, Skill] = {}
        for root_skills in state.roots.values():
            for name, revision in root_skills.items():
                if name in served:
                    continue  # the first root wins, as on the primary
                skill = self._skill(name, revision)
                if skill is not None:
                    served[name] = dataclasses.replace(skill, root=roots[0])
        return served

    def _skill(self, name: str, revision: str) -> Skill | None:
        key = (name, revision)
        if key not in self._read:
            folder = self.store.folder(name, revision)
            try:
                skill = read_skill(folder.parent, folder, self.limits, name=name)
            except (SkillInvalid, OSError) as exc:
                log.warning(
                    "not serving %s: its verified revision %s is unreadable (%s)", name, revision[:12], exc
                )
                return None
            if skill.revision != revision:
                log.warning("not serving %s: the stored revision %s was edited", name, revision[:12])
                return None
            self._read[key] = skill
        return self._read[key]
