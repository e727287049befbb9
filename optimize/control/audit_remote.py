"""The audit chain checked against the outside: the newest audit line a pushed git commit records.

With GIT_HISTORY and GIT_PUSH_REMOTE every promotion, rollback, removal, restore and baseline is
a commit pushed to a remote, whose `Ingot-Audit:` trailer records its audit line's sequence
number, hash and MAC (promote/commits.py, baseline.py). That record lives outside the state home
and the claims, so it catches what they cannot: a chain truncated to an older genuine head with
the claims put back. `check` fetches the branch from the remote itself into a scratch repository
(the local repository is never written, and neither its refs nor its objects are trusted), takes
the highest audit line a commit on it records, and requires the chain to hold that line at that
sequence number with the same hash and MAC. With GIT_SIGNING_KEY only commits with a good
signature by that key count, so a commit pushed by someone without the key cannot fail it.
Where the remote is: by default the URL the repository's config gives GIT_PUSH_REMOTE, which
whoever can edit the repository can repoint (to a copy reset to an older genuine tip); with
AUDIT_REMOTE_URL set, the branch is fetched from that URL (and with the user's own ssh setup, not
the repository's `core.sshCommand`), and a repository whose remote points elsewhere fails.
Not checked here: a remote branch rewound by someone who can force-push to it (protect the branch
against non-fast-forward pushes); lines after the newest pushed one (proposals, rejections, a push not yet
delivered), and every other commit of the history (`ingot verify-history` does that).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from optimize.control.audit import AuditEntry, AuditError, AuditLog
from optimize.control.gitrepo import GIT_TIMEOUT_S, TRAILER, GitError, GitHistory, GitRepo

# ok: the chain holds the remote's newest line; broken: it does not; unchecked: a remote is
# configured but could not be read (`ingot audit verify` exits 4); off: nothing to check against.
State = Literal["ok", "broken", "unchecked", "off"]
HOW_TO_ENABLE = (
    "a chain truncated to an older head, with its claims put back, would pass; keep the skills "
    "roots in a git repository (GIT_HISTORY on) and set GIT_PUSH_REMOTE to check the chain against "
    "the pushed history"
)

UNPINNED = (
    "its URL came from the repository's config, which whoever can edit the repository can repoint: "
    "set AUDIT_REMOTE_URL to pin it"
)


@dataclass(frozen=True)
class RemoteCheck:
    """What one repository's pushed branch says about the chain, as one line for a person."""

    state: State
    message: str
    seq: int | None = None  # the audit line the remote records
    commit: str | None = None  # the commit that records it


@dataclass(frozen=True)
class Recorded:
    """An audit line as one commit's `Ingot-Audit:` trailer records it."""

    commit: str
    seq: int
    hash: str
    mac: str


def check(audit: AuditLog, roots: tuple[Path, ...], git: GitHistory) -> list[RemoteCheck]:
    """The chain against the pushed branch of each repository holding one of `roots`."""
    if not git.push_remote:
        return [RemoteCheck("off", f"not checked (no GIT_PUSH_REMOTE is set): {HOW_TO_ENABLE}")]
    if not git.enabled:
        return [RemoteCheck("off", f"not checked (GIT_HISTORY is off): {HOW_TO_ENABLE}")]
    repos = {repo.top: repo for repo in (GitRepo.of(root) for root in roots) if repo is not None}
    if not repos:
        return [RemoteCheck("off", f"not checked (no skills root is in a git repository): {HOW_TO_ENABLE}")]
    try:
        entries = {entry.seq: entry for entry in audit.entries()}
    except AuditError:
        return [RemoteCheck("unchecked", "not checked: the chain's lines cannot be read (see above)")]
    return [_check_repo(repo, git, entries) for _, repo in sorted(repos.items())]


def _check_repo(repo: GitRepo, git: GitHistory, entries: Mapping[int, AuditEntry]) -> RemoteCheck:
    remote = str(git.push_remote)
    with tempfile.TemporaryDirectory(prefix="ingot-audit-remote-") as scratch:
        try:
            branch = repo.branch()
            if branch is None:
                raise GitError(f"{repo.top} has a detached HEAD, so no branch of it is pushed")
            url = _url(repo, remote)
            if git.pinned_url and not _same_place(url, git.pinned_url, repo.top):
                return RemoteCheck(
                    "broken",
                    f"BROKEN: the repository's remote {remote} points at {url}, not at AUDIT_REMOTE_URL "
                    f"{git.pinned_url}: its config was changed, so pushes (and this check) would go "
                    f"elsewhere. Put it back (`git -C {repo.top} remote set-url {remote} "
                    f"{git.pinned_url}`) and find out who changed it",
                )
            if git.pinned_url:  # fetched with the user's own ssh setup, not the repository's
                copy, tip = _fetch(
                    "AUDIT_REMOTE_URL", _absolute(git.pinned_url, repo.top), branch, Path(scratch)
                )
            else:  # as its pushes are: with the repository's `core.sshCommand`, if it sets one
                ssh = repo.run("config", "--get", "core.sshCommand").stdout.decode().strip()
                copy, tip = _fetch(remote, url, branch, Path(scratch), ssh)
            signers = _allowed_signers(git.signing_key, Path(scratch)) if git.signing_key else None
            newest, unsigned = _newest(copy, tip, signers)
        except GitError as exc:
            return RemoteCheck(
                "unchecked",
                f"NOT CHECKED: {exc}; the local checks above stand, but a truncated chain is not caught "
                "until the remote can be read: run `ingot audit verify` again when it can",
            )
    where = f"{remote} ({branch})" if not git.pinned_url else f"AUDIT_REMOTE_URL ({branch})"
    if not newest:
        signed = " with a good signature by GIT_SIGNING_KEY" if signers else ""
        return RemoteCheck(
            "off",
            f"not checked: no commit on {where}{signed} records an audit line yet; the first promotion "
            "or `ingot baseline` pushed there records one",
        )
    found = _compare(newest, entries, where, unsigned)
    if found.state == "ok" and not git.pinned_url:
        found = replace(found, message=f"{found.message}; {UNPINNED}")
    return found


def _compare(
    newest: list[Recorded], entries: Mapping[int, AuditEntry], where: str, unsigned: int
) -> RemoteCheck:
    """Every record of the newest line (usually one commit) against the chain's line."""
    last = max(entries, default=0)
    for record in newest:
        seq, commit = record.seq, record.commit[:12]
        entry = entries.get(seq)
        if entry is None:
            return RemoteCheck(
                "broken",
                f"BROKEN: {where} records audit line {seq} (hash {record.hash[:16]}, commit {commit}), but "
                f"the chain ends at line {last}: it was truncated to an older head. Restore audit.jsonl, "
                f"audit.head and the claims from a backup that holds line {seq} (`git show {commit}` shows "
                "what it recorded); change nothing until then",
                seq,
                record.commit,
            )
        differ = [
            f"{name} {theirs[:16]} there, {ours[:16]} in the chain"
            for name, theirs, ours in (("hash", record.hash, entry.hash), ("MAC", record.mac, entry.mac))
            if theirs != ours
        ]
        if differ:
            return RemoteCheck(
                "broken",
                f"BROKEN: {where} records audit line {seq} (commit {commit}) with another "
                f"{' and '.join(differ)}: the chain or the pushed record was rewritten. Compare with "
                f"`git show {commit}` and restore the chain from a backup that agrees with it",
                seq,
                record.commit,
            )
    seq, commit = newest[0].seq, newest[0].commit
    skipped = (
        f"; {unsigned} commit(s) recording a later line without a good signature by GIT_SIGNING_KEY not "
        "counted (`ingot verify-history` names them)"
        if unsigned
        else ""
    )
    return RemoteCheck(
        "ok",
        f"ok: the chain holds audit line {seq} as {where} records it (commit {commit[:12]}): same hash "
        f"and MAC{skipped}",
        seq,
        commit,
    )


def _url(repo: GitRepo, remote: str) -> str:
    """The URL the repository's config gives `remote` (a relative path made absolute)."""
    found = repo.run("remote", "get-url", remote)
    if found.returncode != 0:
        raise GitError(f"GIT_PUSH_REMOTE={remote} is not a remote of {repo.top} (`git remote -v` lists them)")
    return _absolute(found.stdout.decode("utf-8", "replace").strip(), repo.top)


def _is_path(url: str) -> bool:
    """Whether git reads `url` as a local path (no scheme, no `host:` of scp-like syntax)."""
    return "://" not in url and ":" not in url.split("/")[0]


def _absolute(url: str, top: Path) -> str:
    if _is_path(url) and not Path(url).is_absolute():
        return str(top / url)  # a path relative to the work tree, as git reads it there
    return url


def _same_place(url: str, pinned: str, top: Path) -> bool:
    """Whether two remote URLs name one place (paths compared resolved, a trailing slash or
    `.git` aside for URLs)."""
    a, b = _absolute(url, top), _absolute(pinned, top)
    if _is_path(a) and _is_path(b):
        return Path(a).resolve() == Path(b).resolve()
    return a.rstrip("/").removesuffix(".git") == b.rstrip("/").removesuffix(".git")


def _fetch(remote: str, url: str, branch: str, scratch: Path, ssh: str = "") -> tuple[GitRepo, str]:
    """`branch` fetched from `url` (`remote` names it in messages) into a fresh bare repository,
    with `ssh` as its `core.sshCommand` if given: every object comes from the remote, checked by
    git as it arrives."""
    copy = GitRepo(scratch / "remote.git")
    copy.top.mkdir()
    copy.git("init", "--quiet", "--bare")
    options = ["-c", f"core.sshCommand={ssh}"] if ssh else []
    refspec = f"+refs/heads/{branch}:refs/heads/{branch}"
    done = copy.run(*options, "fetch", "--quiet", "--no-tags", url, refspec)
    if done.returncode != 0:
        said = [x.strip() for x in done.stderr.decode("utf-8", "replace").splitlines() if x.strip()]
        first = said[0].removeprefix("fatal: ") if said else "no message"  # the cause; the rest is advice
        raise GitError(f"cannot fetch {branch} from {remote} ({url}): {first}")
    tip = copy.resolve(f"refs/heads/{branch}")
    if tip is None:
        raise GitError(f"{remote} ({url}) has no branch {branch}")
    return copy, tip


def _newest(copy: GitRepo, tip: str, signers: Path | None) -> tuple[list[Recorded], int]:
    """The records of the highest audit line any commit reachable from `tip` records (with
    `signers`, only commits with a good signature by them count), and how many commits recording a
    line at least that high were not counted for want of one."""
    out = copy.git(
        "log", f"--grep=^{TRAILER}: ", f"--format=%H%x1f%(trailers:key={TRAILER},valueonly)%x1e", tip
    ).decode("utf-8", "replace")
    records = []
    for item in out.split("\x1e"):
        commit, _, value = item.strip("\n").partition("\x1f")
        parts = value.split()
        if commit and len(parts) >= 2 and parts[0].isdigit():
            records.append(Recorded(commit, int(parts[0]), parts[1], parts[2] if len(parts) > 2 else ""))
    records.sort(key=lambda r: -r.seq)  # stable: newest commit first among equal lines
    counted: list[Recorded] = []
    unsigned = 0
    for record in records:
        if counted and record.seq < counted[0].seq:
            break
        if signers is None or _good(copy, record.commit, signers):
            counted.append(record)
        else:
            unsigned += 1
    return counted, unsigned


def _good(copy: GitRepo, commit: str, signers: Path) -> bool:
    letter = copy.text("-c", f"gpg.ssh.allowedSignersFile={signers}", "log", "-1", "--format=%G?", commit)
    return letter == "G"


def _allowed_signers(key: Path, scratch: Path) -> Path:
    """An allowed-signers file holding GIT_SIGNING_KEY's public key: the commits Ingot signed."""
    try:
        done = subprocess.run(
            ["ssh-keygen", "-y", "-f", str(key)],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"cannot read the public half of GIT_SIGNING_KEY={key}: {exc}") from exc
    if done.returncode != 0 or not done.stdout.strip():
        why = (done.stderr.strip().splitlines() or ["not a private key"])[-1]
        raise GitError(f"cannot read the public half of GIT_SIGNING_KEY={key}: {why}")
    path = scratch / "allowed_signers"
    path.write_text(f"ingot {done.stdout.strip()}\n")
    return path
