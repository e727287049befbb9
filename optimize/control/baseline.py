"""A baseline: the signed starting point a replica verifies from (`ingot baseline`).

Skills that were in the repository before Ingot signed anything were never approved through it,
so nothing later in the history can vouch for them. A baseline commit does: run on the primary by
a person, it records an audited `baseline` line, then commits (changing no file) a signed
statement of every skill in every root of the repository and its revision: the manifest, attached
as the commit's note, whose SHA-256 is its `Ingot-Manifest` trailer. A replica's first sync
starts at the newest baseline; a later one supersedes whatever came before it (the way to
re-anchor replicas after a commit they refused). Refused unless every root in the repository is
exactly what HEAD holds and every folder in it is a valid skill: a baseline attests what is
committed, never a work tree edit.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import rfc8785

from ingot.errors import ConfigError, IngotError, SkillInvalid
from mcp_server.registry import read_skill
from optimize.control.audit import AuditEntry
from optimize.control.changes import ChangeControl
from optimize.control.gitrepo import TRAILER, GitError, GitRepo
from optimize.control.signed_history import BASELINE

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Baseline:
    """One baseline commit: the repository, the commit, and what it attests."""

    top: Path
    commit: str
    skills: int
    entry: AuditEntry


def manifest(control: ChangeControl, repo: GitRepo, roots: list[Path]) -> bytes:
    """The canonical JSON of every skill under `roots` (all in `repo`) and its revision."""
    listed: dict[str, dict[str, str]] = {}
    for root in roots:
        skills = {}
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            try:
                skills[folder.name] = read_skill(root, folder, control.limits).revision
                _regular_files_only(repo, root, folder.name)
            except SkillInvalid as exc:
                raise IngotError(
                    f"{folder} is not a valid skill ({exc}); a baseline attests every folder of the "
                    "root: fix it or remove it, commit, then run `ingot baseline` again"
                ) from exc
        listed[repo.rel(root) or "."] = skills
    return rfc8785.dumps({"schema_version": SCHEMA_VERSION, "roots": listed})


def _regular_files_only(repo: GitRepo, root: Path, skill: str) -> None:
    """A replica takes a folder from git's objects, where a link is a link: refuse one here."""
    rel = repo.rel(root / skill)
    for entry in repo.git("ls-tree", "-r", "-z", f"HEAD:{rel}").decode("utf-8", "replace").split("\0"):
        if not entry:
            continue
        meta, path = entry.split("\t", 1)
        mode = meta.split()[0]
        if mode not in ("100644", "100755") and not any(p.startswith(".") for p in path.split("/")):
            what = "a symlink" if mode == "120000" else "a submodule" if mode == "160000" else f"mode {mode}"
            raise SkillInvalid(f"{path} is {what} in git; replicas serve regular files only")


def message(entry: AuditEntry, rel_roots: list[str], digest: str, count: int) -> str:
    trailers = [
        f"Ingot-Action: {BASELINE}",
        *(f"Ingot-Root: {r}" for r in rel_roots),
        f"Ingot-Manifest: {digest}",
        f"Ingot-Approver: {entry.get('actor')}",
        f"{TRAILER}: {entry.seq} {entry.hash} {entry.mac}",
    ]
    reason = str(entry.get("reason") or "")
    subject = f"ingot: baseline of {count} skills"
    return "\n\n".join([subject, *([reason] if reason else []), "\n".join(trailers)]) + "\n"


def sign_baseline(control: ChangeControl, actor: str, reason: str | None = None) -> list[Baseline]:
    """One signed baseline commit per repository holding a root, audited, then pushed."""
    if not control.git.enabled:
        raise ConfigError("GIT_HISTORY is off: a baseline is a git commit; turn it on")
    if control.git.signing_key is None:
        raise ConfigError(
            "no signing key: set GIT_SIGNING_KEY to an SSH key (ssh-keygen -t ed25519) so replicas can "
            "check who made the baseline"
        )
    by_repo: dict[Path, tuple[GitRepo, list[Path]]] = {}
    for root in control.roots:
        repo = GitRepo.of(root, control.git.signing_key)
        if repo is None:
            raise ConfigError(f"{root} is not in a git work tree: a baseline is a git commit")
        by_repo.setdefault(repo.top, (repo, []))[1].append(root)
    made = []
    with control.writing():
        for repo, roots in by_repo.values():
            rel = [repo.rel(r) or "." for r in roots]
            dirty = repo.dirty(rel)
            if dirty:
                raise IngotError(
                    f"{', '.join(sorted(dirty))} differs from HEAD in {repo.top}: a baseline attests what is "
                    "committed; commit or restore it first"
                )
            data = manifest(control, repo, roots)
            digest = hashlib.sha256(data).hexdigest()
            count = sum(1 for r in roots for p in r.iterdir() if p.is_dir() and not p.name.startswith("."))
            entry = control.audit.append(
                action=BASELINE,
                actor=actor,
                reason=reason or f"replicas verify from here ({count} skills)",
                manifest_digest=digest,
            )
            try:
                commit = repo.commit_same_tree(message(entry, rel, digest, count), f"{actor} (via Ingot)")
                repo.add_note(commit, data)
            except GitError as exc:
                raise IngotError(
                    f"the baseline is audited (line {entry.seq}) but not committed: {exc}; fix git and run "
                    "`ingot baseline` again"
                ) from exc
            made.append(Baseline(repo.top, commit, count, entry))
            control.promoter.commits.push(roots[0])
    return made
