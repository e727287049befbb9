"""Git, for skills roots that live in a git work tree: read a candidate branch, commit a promotion.

Everything goes through the `git` program (the reference implementation: it honours the
repository's own config, object format and worktrees), never a reimplementation. Two uses:

* the candidate inbox reads what commits on a candidate branch changed under a skills root
  (`touched`, `export`), without checking anything out;
* promote/ records each promotion and rollback as one commit on the checked-out branch
  (`commit_paths`). That commit is built with plumbing on a private index: only the named paths
  go in, the user's staged work is never included, the work tree is never written, and no hook
  runs (the decision was already taken and audited; a hook must not be able to undo half of it).
  With a signing key (GIT_SIGNING_KEY) the commit is signed the standard way (`gpg.format=ssh`),
  and what it rests on (an evidence bundle) is attached byte for byte as a note under
  `refs/notes/ingot`, pushed together with the branch in one atomic push.
Checking signatures and reading history back is signed_history.py's; no cryptography is here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ingot import faults
from ingot.errors import IngotError
from ingot.fsutil import check_relative
from mcp_server.registry import Limits

GIT_TIMEOUT_S = 60.0
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's well-known empty tree (sha1)
TRAILER = "Ingot-Audit"
NOTES_REF = "refs/notes/ingot"  # what each Ingot commit rests on (its evidence bundle, a baseline's manifest)
IDENTITY = {"GIT_COMMITTER_NAME": "Ingot", "GIT_COMMITTER_EMAIL": "ingot@localhost"}


class GitError(IngotError):
    """A git command failed or a branch holds something Ingot will not read."""


@dataclass(frozen=True)
class GitHistory:
    """Whether promote/ records each switch as a commit (in a skills root that is a git work
    tree; GIT_HISTORY), and the remote each such commit is pushed to (GIT_PUSH_REMOTE)."""

    enabled: bool = True
    push_remote: str | None = None
    signing_key: Path | None = None  # an SSH key: every Ingot commit is signed with it (GIT_SIGNING_KEY)
    pinned_url: str | None = None  # where the push remote really is (AUDIT_REMOTE_URL): audit_remote.py


@dataclass(frozen=True)
class IngotCommit:
    """A commit Ingot made for a promotion or rollback, read back from its trailers."""

    sha: str
    audit_seq: int
    skill: str


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    return env


class GitRepo:
    """One git work tree (the folder `git rev-parse --show-toplevel` names)."""

    def __init__(self, top: Path, signing_key: Path | None = None) -> None:
        self.top = top
        self.signing_key = signing_key

    @classmethod
    def of(cls, folder: Path, signing_key: Path | None = None) -> GitRepo | None:
        """The work tree `folder` belongs to, or None (not in one, or git is not installed)."""
        if shutil.which("git") is None or not folder.is_dir():
            return None
        try:
            done = subprocess.run(
                ["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
                capture_output=True,
                text=True,
                env=_git_env(),
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode != 0 or not done.stdout.strip():
            return None
        return cls(Path(done.stdout.strip()).resolve(), signing_key)

    # -- plumbing ----------------------------------------------------------------------------

    def git(
        self, *args: str, index: Path | None = None, stdin: bytes | None = None, ok: tuple[int, ...] = (0,)
    ) -> bytes:
        done = self.run(*args, index=index, stdin=stdin)
        if done.returncode not in ok:
            reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise GitError(f"git {args[0]} in {self.top} failed: {(reason or ['no message'])[-1]}")
        return done.stdout

    def run(
        self, *args: str, index: Path | None = None, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """`git ARGS` in this repository, whatever its exit code (GitError only if it did not run)."""
        env = _git_env()
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        try:
            return subprocess.run(
                ["git", "-C", str(self.top), *args],
                input=stdin,
                capture_output=True,
                env=env,
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GitError(f"git {args[0]} in {self.top} did not run: {exc}") from exc

    def is_ancestor(self, older: str, newer: str) -> bool:
        """`older` is `newer` or one of its ancestors (False also when either is unknown)."""
        return older == newer or self.run("merge-base", "--is-ancestor", older, newer).returncode == 0

    def text(self, *args: str, **kwargs) -> str:  # noqa: ANN003 - the keywords of `git`
        return self.git(*args, **kwargs).decode("utf-8", "replace").strip()

    def rel(self, path: Path) -> str:
        """`path` relative to the work tree, in git's spelling ('' for the top itself)."""
        rel = Path(os.path.realpath(path)).relative_to(self.top).as_posix()
        return "" if rel == "." else rel

    def resolve(self, ref: str) -> str | None:
        """The commit `ref` names, or None if it names none (an unborn HEAD, a missing branch)."""
        out = self.git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", ok=(0, 1, 128))
        return out.decode().strip() or None

    def head(self) -> str | None:
        return self.resolve("HEAD")

    def branch(self) -> str | None:
        """The checked-out branch's name, or None when HEAD is detached."""
        out = self.git("symbolic-ref", "--quiet", "--short", "HEAD", ok=(0, 1, 128))
        return out.decode().strip() or None

    # -- reading a candidate branch --------------------------------------------------------

    def touched(self, branch: str, rel_root: str) -> dict[str, str]:
        """Skill folders under `rel_root` that commits on `branch` changed since it left HEAD,
        each with the last such commit (deleted folders included)."""
        tip = self.resolve(f"refs/heads/{branch}")
        if tip is None:
            return {}
        head = self.head()
        base = None
        if head is not None:
            base = self.text("merge-base", head, tip, ok=(0, 1)) or None
        prefix = f"{rel_root}/" if rel_root else ""
        names = self.git(
            "diff", "--name-only", "-z", "--no-renames", base or EMPTY_TREE, tip, "--", rel_root or "."
        )
        skills = {
            path[len(prefix) :].split("/", 1)[0]
            for path in names.decode("utf-8", "replace").split("\0")
            if path.startswith(prefix) and "/" in path[len(prefix) :]
        }
        return {
            skill: self.text("log", "-1", "--format=%H", tip, "--", f"{prefix}{skill}")
            for skill in sorted(skills)
            if not skill.startswith(".")
        }

    def tree(self, ref: str, rel_path: str) -> str | None:
        """The tree object at `ref:rel_path`, or None if there is none."""
        out = self.git("rev-parse", "--verify", "--quiet", f"{ref}:{rel_path}", ok=(0, 1, 128))
        return out.decode().strip() or None

    def export(self, ref: str, rel_path: str, dest: Path, limits: Limits) -> Path:
        """Write the folder `ref:rel_path` under `dest` (read-only from git; nothing checked
        out) after checking it against the skill limits; returns the written folder."""
        listing = self.git("ls-tree", "-r", "-l", "-z", ref, "--", rel_path).decode("utf-8", "replace")
        entries = [e for e in listing.split("\0") if e]
        if not entries:
            raise GitError(f"{ref[:12]} has no folder {rel_path}")
        where = f"{rel_path} at {ref[:12]}"
        if len(entries) > limits.max_files:
            raise GitError(f"{where} has {len(entries)} files; the limit is {limits.max_files}")
        total = 0
        for entry in entries:
            meta, path = entry.split("\t", 1)
            mode, kind, _, size = meta.split()
            if kind != "blob" or mode not in ("100644", "100755"):
                what = "symlink" if mode == "120000" else kind
                raise GitError(f"{path} at {ref[:12]} is a {what}; a skill holds only regular files")
            if int(size) > limits.max_file_bytes:
                raise GitError(f"{path} at {ref[:12]} is {size} bytes; the limit is {limits.max_file_bytes}")
            total += int(size)
        if total > limits.max_skill_bytes:
            raise GitError(f"{where} is {total} bytes; the limit is {limits.max_skill_bytes}")
        self.export_tree(f"{ref}:{rel_path}", dest / rel_path)
        return dest / rel_path

    def export_tree(self, spec: str, dest: Path) -> None:
        """Write the tree `spec` (`commit:path`) as the folder `dest`, straight from git's objects:
        regular files only (a link or a submodule is refused), every path checked to stay inside;
        hidden files are left out, as the registry never reads them."""
        listing = self.git("ls-tree", "-r", "-z", spec).decode("utf-8", "replace")
        entries = []
        for entry in (e for e in listing.split("\0") if e):
            meta, path = entry.split("\t", 1)
            mode, kind, sha = meta.split()
            if any(part.startswith(".") for part in path.split("/")):
                continue
            if kind != "blob" or mode not in ("100644", "100755"):
                what = "symlink" if mode == "120000" else kind
                raise GitError(f"{path} in {spec} is a {what}; a skill holds only regular files")
            entries.append((check_relative(path), mode, sha))
        blobs = self._blobs([sha for _, _, sha in entries])
        dest.mkdir(parents=True, exist_ok=True)
        for path, mode, sha in entries:
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(blobs[sha])
            target.chmod(0o755 if mode == "100755" else 0o644)

    def _blobs(self, shas: list[str]) -> dict[str, bytes]:
        """The contents of `shas`, read in one `git cat-file --batch`."""
        wanted = list(dict.fromkeys(shas))
        if not wanted:
            return {}
        out = self.git("cat-file", "--batch", stdin="".join(f"{s}\n" for s in wanted).encode())
        found, at = {}, 0
        for sha in wanted:
            header_end = out.index(b"\n", at)
            name, kind, size = out[at:header_end].decode().split()
            if kind != "blob":
                raise GitError(f"{name} is a {kind}, not a file's contents")
            start = header_end + 1
            found[sha] = out[start : start + int(size)]
            at = start + int(size) + 1  # the newline after each object
        return found

    # -- recording a promotion ---------------------------------------------------------------

    def dirty(self, rel_paths: list[str]) -> set[str]:
        """Which of `rel_paths` differ between HEAD and the work tree (untracked files count)."""
        out = self.git("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *rel_paths)
        changed = [e[3:] for e in out.decode("utf-8", "replace").split("\0") if len(e) > 3]
        return {p for p in rel_paths if any(c == p or c.startswith(f"{p}/") for c in changed)}

    def commit_paths(self, rel_paths: list[str], message: str, author: str) -> str | None:
        """Commit exactly `rel_paths` as they are in the work tree onto HEAD; returns the commit,
        or None if they already match HEAD. Built on a private index, so whatever the user has
        staged stays staged and out of this commit; then the real index is synced for those
        paths only, so `git status` shows them clean."""
        head = self.head()
        with tempfile.TemporaryDirectory(prefix="ingot-git-") as scratch:
            index = Path(scratch) / "index"
            if head is not None:
                self.git("read-tree", head, index=index)
            else:
                self.git("read-tree", "--empty", index=index)
            self.git("add", "--all", "--force", "--", *rel_paths, index=index)
            tree = self.text("write-tree", index=index)
        if head is not None and tree == self.text("rev-parse", f"{head}^{{tree}}"):
            return None
        parents = ["-p", head] if head is not None else []
        env_name = author.replace("<", "").replace(">", "").strip() or "ingot"
        faults.point("git: commit-tree")
        commit = self._commit_tree(tree, parents, message, env_name)
        faults.point("git: update-ref")
        self.git("update-ref", "-m", f"ingot: {message.splitlines()[0]}", "HEAD", commit, head or "0" * 40)
        # A kill here leaves the user's index holding the old files of these paths: their next
        # `git commit` would revert the skill. Recovery re-syncs them (`stale_index`, `sync_index`).
        faults.point("git: reset the index")
        self.sync_index(rel_paths)
        return commit

    def stale_index(self, rel_paths: list[str]) -> list[str]:
        """Files under `rel_paths` whose index entry differs from HEAD while the work tree matches
        HEAD: what an interrupted commit leaves (the user's index still holds the old files).
        Anything the user changed in the work tree is theirs, and not listed."""
        if not rel_paths or self.head() is None:
            return []
        staged = self.text("diff", "--cached", "--name-only", "--no-renames", "HEAD", "--", *rel_paths)
        if not staged:
            return []
        edited = set(self.text("diff", "--name-only", "--no-renames", "HEAD", "--", *rel_paths).splitlines())
        return [path for path in staged.splitlines() if path not in edited]

    def sync_index(self, rel_paths: list[str]) -> None:
        """Make the index match HEAD for `rel_paths` (what was just committed)."""
        self.git("reset", "--quiet", "HEAD", "--", *rel_paths, ok=(0, 1))

    def _commit_tree(self, tree: str, parents: list[str], message: str, author: str) -> str:
        env = _git_env() | IDENTITY | {"GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": "ingot@localhost"}
        sign = []
        if self.signing_key is not None:  # git's own SSH signing: ssh-keygen -Y sign under the hood
            sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={self.signing_key}"]
        try:
            done = subprocess.run(
                [
                    "git",
                    "-C",
                    str(self.top),
                    *sign,
                    "commit-tree",
                    tree,
                    *parents,
                    *(["-S"] if sign else []),
                    "-F",
                    "-",
                ],
                input=message.encode(),
                capture_output=True,
                env=env,
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GitError(f"git commit-tree in {self.top} did not run: {exc}") from exc
        if done.returncode != 0:
            raise GitError(f"git commit-tree in {self.top} failed: {done.stderr.decode().strip()}")
        return done.stdout.decode().strip()

    def commit_same_tree(self, message: str, author: str) -> str:
        """A commit on HEAD that changes no file (a baseline: it only attests what HEAD holds)."""
        head = self.head()
        if head is None:
            raise GitError(f"{self.top} has no commit yet: commit the skills first")
        tree = self.text("rev-parse", f"{head}^{{tree}}")
        faults.point("git: commit-tree")
        commit = self._commit_tree(tree, ["-p", head], message, author)
        faults.point("git: update-ref")
        self.git("update-ref", "-m", f"ingot: {message.splitlines()[0]}", "HEAD", commit, head)
        return commit

    # -- notes: what a commit rests on, byte for byte ------------------------------------------

    def add_note(self, commit: str, data: bytes) -> None:
        """Attach `data` to `commit` under NOTES_REF, exactly (a blob, never re-formatted)."""
        blob = self.text("hash-object", "-w", "--stdin", stdin=data)
        env_note = _git_env() | IDENTITY | {"GIT_AUTHOR_NAME": "Ingot", "GIT_AUTHOR_EMAIL": "ingot@localhost"}
        try:
            done = subprocess.run(
                ["git", "-C", str(self.top), "notes", f"--ref={NOTES_REF}", "add", "-f", "-C", blob, commit],
                capture_output=True,
                env=env_note,
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GitError(f"git notes in {self.top} did not run: {exc}") from exc
        if done.returncode != 0:
            raise GitError(f"git notes in {self.top} failed: {done.stderr.decode().strip()}")

    def note(self, commit: str, ref: str = NOTES_REF) -> bytes | None:
        """The note attached to `commit` under `ref`, or None."""
        out = self.git("notes", f"--ref={ref}", "list", commit, ok=(0, 1))
        blob = out.decode().strip()
        return self.git("cat-file", "blob", blob) if blob else None

    def last_ingot_commit(self, rel_root: str) -> IngotCommit | None:
        """The newest commit on HEAD under `rel_root` that Ingot made, or None."""
        if self.head() is None:
            return None
        out = self.text(
            "log", "-1", f"--grep=^{TRAILER}: ", "--format=%H%x00%B", "HEAD", "--", rel_root or "."
        )
        if not out:
            return None
        sha, body = out.split("\0", 1)
        trailers = dict(
            line.split(": ", 1) for line in body.splitlines() if line.startswith("Ingot-") and ": " in line
        )
        try:
            return IngotCommit(sha, int(trailers[TRAILER].split()[0]), trailers.get("Ingot-Skill", ""))
        except (KeyError, ValueError, IndexError):
            return None

    def commits_since(self, sha: str, rel_root: str) -> list[str]:
        """Commits on HEAD after `sha` that touch `rel_root` (someone else's, if not Ingot's)."""
        out = self.text("rev-list", f"{sha}..HEAD", "--", rel_root or ".")
        return out.split() if out else []

    def push(self, remote: str) -> None:
        """Push the checked-out branch and Ingot's notes to `remote` in one atomic push
        (fast-forward only, like any push: a remote that moved on is refused, never overwritten)."""
        branch = self.branch()
        if branch is None:
            raise GitError(f"{self.top} has a detached HEAD; there is no branch to push")
        refs = [f"HEAD:refs/heads/{branch}"]
        if self.resolve(NOTES_REF) is not None:
            refs.append(f"{NOTES_REF}:{NOTES_REF}")
        done = self.run("push", "--atomic", "--porcelain", remote, *refs)
        if done.returncode != 0:
            lines = (
                done.stderr.decode("utf-8", "replace").splitlines()
                + done.stdout.decode("utf-8", "replace").splitlines()
            )
            said = [x.strip() for x in lines if x.startswith(("!", "error:", "fatal:")) or "[rejected]" in x]
            raise GitError(f"git push to {remote} failed: {'; '.join(said) or 'no message'}")
