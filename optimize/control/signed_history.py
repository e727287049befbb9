"""Reading a skills repository's history back and checking that every change to a skill earned it.

One check, two callers: a replica runs it on each fetched range before it serves anything new
(replica.py), and `ingot verify-history` runs it on a whole history for an auditor. Both hold only
the repository and an allowed-signers file (public keys): nothing here needs the primary's state
home or its audit key. A commit passes when:
- it is signed, and git (`gpg.format=ssh`, `gpg.ssh.allowedSignersFile`, i.e. `ssh-keygen -Y
  verify`) reports a good signature by an allowed signer;
- it has one parent (Ingot's history is linear; a merge is refused);
- if it changes anything under a served root, it is an Ingot commit (trailers, commits.py) that
  changes exactly the one skill folder its trailers name, and that folder's files hash to the
  revision its `Ingot-Revision` names (or the folder is gone, for `absent`);
- the evidence its `Ingot-Evidence` names is attached as its note and hashes to that digest;
- a baseline (`Ingot-Action: baseline`, baseline.py) attests every skill of every root: its note
  is the manifest its `Ingot-Manifest` names, and the tree holds exactly those folders at those
  revisions. A baseline is where verification can start, and it supersedes what came before.
What is served between commits is `LibraryState`: the roots and each skill's revision.
No cryptography is implemented here: signatures are git's and ssh-keygen's, digests SHA-256.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from optimize.control.gitrepo import NOTES_REF, TRAILER, GitError, GitRepo
from optimize.control.promote.snapshots import ABSENT

BASELINE = "baseline"
SWITCHES = ("promote", "rollback", "remove", "restore")  # the actions that change one skill folder
SIGNATURES = {  # git's %G? letter, as a person reads it
    "G": "good",
    "U": "signed by a key not in the allowed signers file",
    "N": "unsigned: a replica serves only commits signed by a key in its allowed-signers file",
    "B": "bad signature",
    "X": "good signature, expired",
    "Y": "good signature by an expired key",
    "R": "good signature by a revoked key",
    "E": "signature cannot be checked",
}


@dataclass(frozen=True)
class Commit:
    """What one commit says about itself, as git reads it."""

    sha: str
    parents: tuple[str, ...]
    signature: str  # git's %G? letter
    signer: str | None  # the allowed-signers principal of a good signature
    key: str | None  # the signing key's fingerprint
    time: int  # committer time, seconds since the epoch
    trailers: Mapping[str, str]

    @property
    def action(self) -> str | None:
        return self.trailers.get("Ingot-Action")


@dataclass(frozen=True)
class LibraryState:
    """What a verified commit serves: per root (repository-relative), each skill's revision."""

    commit: str
    roots: Mapping[str, Mapping[str, str]]

    def as_json(self) -> dict:
        return {"commit": self.commit, "roots": {r: dict(s) for r, s in self.roots.items()}}

    @classmethod
    def from_json(cls, data: Mapping) -> LibraryState:
        return cls(str(data["commit"]), {str(r): dict(s) for r, s in dict(data["roots"]).items()})


@dataclass(frozen=True)
class Checked:
    """One commit's verdict, with what a person reads in `verify-history`."""

    commit: Commit
    ok: bool
    problem: str | None = None
    skill: str | None = None
    revision: str | None = None
    passport: str | None = None
    evidence: str = "-"  # ok, missing, mismatch, or - (none named)
    note: str | None = None  # e.g. "touches no skill", "before the first baseline"

    @property
    def signature(self) -> str:
        said = SIGNATURES.get(self.commit.signature, f"unknown signature status {self.commit.signature}")
        return said.split(":")[0]  # the short form; a failure's problem says the rest


class HistoryError(GitError):
    """A range cannot be verified at all (no baseline, history rewritten, a branch gone)."""


# A place to put a skill folder's files taken from git, returning its revision: the replica's
# revision store keeps them; verify-history throws them away.
Exporter = Callable[[GitRepo, str, str, str], str | None]


def read_commits(repo: GitRepo, allowed_signers: Path, tip: str, since: str | None = None) -> list[Commit]:
    """The commits reachable from `tip` (not from `since`), oldest first, signatures checked
    against `allowed_signers`."""
    fields = "%H%x1f%P%x1f%G?%x1f%GS%x1f%GK%x1f%ct%x1f%(trailers:only,unfold)%x1e"
    span = f"{since}..{tip}" if since else tip
    out = repo.git(
        "-c",
        f"gpg.ssh.allowedSignersFile={allowed_signers}",
        "log",
        "--reverse",
        "--topo-order",
        f"--format={fields}",
        span,
    ).decode("utf-8", "replace")  # not `text`: str.strip() takes \x1e and \x1f for whitespace
    commits = []
    for record in out.split("\x1e"):
        record = record.strip("\n")
        if not record:
            continue
        sha, parents, letter, signer, key, when, trailers = record.split("\x1f")
        commits.append(
            Commit(
                sha,
                tuple(parents.split()),
                letter or "N",
                signer or None,
                key or None,
                int(when or 0),
                parse_trailers(trailers),
            )
        )
    return commits


def parse_trailers(text: str) -> dict[str, str]:
    """The `Ingot-*` trailers of a commit message (the last one of a key wins)."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.startswith("Ingot-"):
            found[key] = value.strip()
    return found


def touched(repo: GitRepo, commit: Commit) -> list[str]:
    """The paths `commit` changes against its parent (against nothing for a root commit)."""
    parent = commit.parents[0] if commit.parents else "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    out = repo.git("diff-tree", "-r", "-z", "--no-renames", "--name-only", parent, commit.sha)
    return [p for p in out.decode("utf-8", "replace").split("\0") if p]


def under(path: str, root: str) -> str | None:
    """`path` relative to `root` when it is inside it (root "." is the whole repository)."""
    if root in (".", ""):
        return path
    return path[len(root) + 1 :] if path.startswith(f"{root}/") else None


def folders(repo: GitRepo, commit: str, root: str) -> dict[str, str]:
    """Each folder directly under `root` at `commit`, with its git tree id."""
    spec = f"{commit}:{'' if root in ('.', '') else root}"
    out = repo.git("ls-tree", "-z", spec, ok=(0, 128))
    found = {}
    for entry in out.decode("utf-8", "replace").split("\0"):
        if not entry:
            continue
        meta, name = entry.split("\t", 1)
        if meta.split()[1] == "tree" and not name.startswith("."):
            found[name] = meta.split()[2]
    return found


class Verifier:
    """Checks ranges of one repository's history against one allowed-signers file."""

    def __init__(
        self,
        repo: GitRepo,
        allowed_signers: Path,
        export: Exporter,
        prefetch: Callable[[GitRepo, str, str], None] | None = None,
    ) -> None:
        self.repo, self.allowed_signers, self.export = repo, allowed_signers, export
        self.prefetch = prefetch  # exports a whole root at once, before a baseline checks each folder

    def check(self, commit: Commit, state: LibraryState | None) -> tuple[Checked, LibraryState | None]:
        """One commit against the state before it; the state after it when it passes."""
        if state is None and commit.action != BASELINE:  # nothing vouches for it, nothing rests on it
            return Checked(commit, True, note="before the first baseline: not verified"), None
        if commit.signature != "G":
            return Checked(commit, False, f"{SIGNATURES.get(commit.signature, 'unknown')}"), state
        if len(commit.parents) > 1:
            return Checked(commit, False, "a merge commit: Ingot's history is linear"), state
        if commit.action == BASELINE:
            return self._baseline(commit)
        paths = touched(self.repo, commit)
        inside = {(root, rel) for root in state.roots for p in paths if (rel := under(p, root)) is not None}
        if not inside:
            return Checked(commit, True, note="touches no skill"), replace(state, commit=commit.sha)
        return self._switch(commit, state, inside)

    def _switch(
        self, commit: Commit, state: LibraryState, inside: set[tuple[str, str]]
    ) -> tuple[Checked, LibraryState | None]:
        t = commit.trailers
        skill, root, revision = t.get("Ingot-Skill"), t.get("Ingot-Root"), t.get("Ingot-Revision")
        first = sorted(f"{r}/{p}" if r != "." else p for r, p in inside)[0]
        if commit.action not in SWITCHES or not skill or not root or not revision or TRAILER not in t:
            return Checked(
                commit, False, f"changes {first} but is not an Ingot commit (no Ingot trailers)"
            ), state
        stray = sorted(
            {f"{r}/{p}" for r, p in inside if r != root or p.split("/", 1)[0] != skill or "/" not in p}
        )
        if stray:
            return Checked(
                commit, False, f"changes {stray[0]}, outside the skill folder {root}/{skill} it names", skill
            ), state
        served = folders(self.repo, commit.sha, root)
        if revision == ABSENT:
            found = ABSENT if skill not in served else "a folder"
        else:
            found = self.export(self.repo, commit.sha, root, skill) if skill in served else ABSENT
        if found != revision:
            got = str(found)[:12] if found else "no valid skill"
            why = (
                f"{root}/{skill} at this commit is {got}, not the revision {revision[:12]} its trailer names"
            )
            return Checked(commit, False, why, skill, revision), state
        evidence, problem = self._evidence(commit, "Ingot-Evidence")
        if problem:
            return Checked(commit, False, problem, skill, revision, t.get("Ingot-Passport"), evidence), state
        roots = {r: dict(s) for r, s in state.roots.items()}
        if revision == ABSENT:
            roots[root].pop(skill, None)
        else:
            roots[root][skill] = revision
        after = LibraryState(commit.sha, roots)
        return Checked(commit, True, None, skill, revision, t.get("Ingot-Passport"), evidence), after

    def _evidence(self, commit: Commit, trailer: str) -> tuple[str, str | None]:
        """("ok" | "missing" | "mismatch" | "-", the failure or None) for the digest `trailer` names."""
        digest = commit.trailers.get(trailer)
        if not digest:
            return "-", None
        data = self.repo.note(commit.sha, self.notes_ref)
        if data is None:
            return (
                "missing",
                f"the bundle {digest[:12]} its {trailer} names is not attached (no note in {self.notes_ref})",
            )
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            return (
                "mismatch",
                f"the attached bundle hashes to {actual[:12]}, not the {digest[:12]} its {trailer} names",
            )
        return "ok", None

    notes_ref = NOTES_REF

    def _baseline(self, commit: Commit) -> tuple[Checked, LibraryState | None]:
        evidence, problem = self._evidence(commit, "Ingot-Manifest")
        if evidence == "-":
            problem = "a baseline with no Ingot-Manifest trailer"
        if problem:
            return Checked(commit, False, problem, evidence=evidence), None
        try:
            manifest = json.loads(self.repo.note(commit.sha, self.notes_ref) or b"")
            roots = {
                str(r): {str(k): str(v) for k, v in dict(s).items()}
                for r, s in dict(manifest["roots"]).items()
            }
        except (ValueError, KeyError, TypeError, AttributeError):
            return Checked(
                commit, False, "the baseline's manifest is not readable JSON", evidence=evidence
            ), None
        for root, skills in roots.items():
            if self.prefetch is not None:
                self.prefetch(self.repo, commit.sha, root)
            served = folders(self.repo, commit.sha, root)
            if set(served) != set(skills):
                extra = sorted(set(served) ^ set(skills))[0]
                where = ("the tree", "the baseline's manifest")
                found_in, missing_from = where if extra in served else where[::-1]
                why = f"{root}/{extra} is in {found_in} but not in {missing_from}"
                return Checked(commit, False, why, evidence=evidence), None
            for skill, revision in sorted(skills.items()):
                found = self.export(self.repo, commit.sha, root, skill)
                if found != revision:
                    why = f"{root}/{skill} is {str(found)[:12]}, not the {revision[:12]} the baseline names"
                    return Checked(commit, False, why, skill, revision, evidence=evidence), None
        count = sum(len(s) for s in roots.values())
        return Checked(commit, True, note=f"baseline of {count} skills", evidence=evidence), LibraryState(
            commit.sha, roots
        )


@dataclass
class RangeResult:
    """The verdicts of a range, and the newest state that verified (None: nothing new verified)."""

    checked: list[Checked] = field(default_factory=list)
    state: LibraryState | None = None
    refused: Checked | None = None  # the first commit that failed
    superseded: list[Checked] = field(default_factory=list)  # failed, then replaced by a baseline

    @property
    def ok(self) -> bool:
        return self.refused is None


def verify_range(verifier: Verifier, commits: list[Commit], state: LibraryState | None) -> RangeResult:
    """Check `commits` (oldest first) from `state`; stop at the first failure, unless a newer
    baseline later in the range verifies, which supersedes everything before it."""
    result = RangeResult(state=state)
    current = state
    for index, commit in enumerate(commits):
        checked, after = verifier.check(commit, current)
        result.checked.append(checked)
        if checked.ok:
            current = after
            if after is not None:
                result.state = after
            continue
        later = [i for i in range(index + 1, len(commits)) if commits[i].action == BASELINE]
        if later:
            rest = verify_range(verifier, commits[later[-1] :], None)
            if rest.ok and rest.state is not None:
                result.superseded = [checked]
                result.checked += rest.checked
                result.state = rest.state
                return result
        result.refused = checked
        return result
    return result


def walk(verifier: Verifier, commits: list[Commit]) -> Iterator[Checked]:
    """Every commit of a whole history (oldest first) checked in turn, for `verify-history`:
    commits before the first baseline are listed as not verified; a failure ends the walk (a
    later baseline does not excuse it here: the record shows it)."""
    state: LibraryState | None = None
    for commit in commits:
        checked, after = verifier.check(commit, state)
        yield checked
        if not checked.ok:
            return
        state = after if after is not None else state


def rederived_passport(bundle: bytes) -> str | None:
    """The passport state an evidence bundle gives on its own numbers and thresholds (what
    evidence.py wrote), or None when the bundle is not one Ingot can read."""
    from optimize.control.gate import Thresholds
    from optimize.control.passport import passport

    try:
        data = json.loads(bundle)
        thresholds = Thresholds(**dict(data["passport"]["thresholds"]))
        return passport(data, data.get("champion_revision"), thresholds).state
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
