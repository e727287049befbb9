"""A team on one machine, for the replica tests: a primary whose skills root is a git work tree,
a bare remote it pushes to, real SSH signing keys (ssh-keygen), and a forger who can push
anything to the remote but holds no allowed key (or, for some forgeries, does).

Everything is real git: the primary commits through change control with GIT_SIGNING_KEY, and
every forgery is an ordinary clone, commit and push (`forge`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ingot.home import establish
from mcp_server.registry import Limits
from optimize.control.baseline import sign_baseline
from optimize.control.changes import ChangeControl
from optimize.control.gitrepo import GitHistory
from optimize.control.replica import Replica, ReplicaConfig, ReplicaPin
from tests.conftest import BUNDLED_SKILLS
from tests.optimize.conftest import body_rewrite, ready_body

SKILL = "release-notes"


def git(cwd: Path, *args: str, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env |= {"GIT_AUTHOR_NAME": "me", "GIT_AUTHOR_EMAIL": "me@example.com"}
    env |= {"GIT_COMMITTER_NAME": "me", "GIT_COMMITTER_EMAIL": "me@example.com"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {done.stderr}")
    return done.stdout


def keygen(path: Path, comment: str) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path), "-C", comment], check=True
    )
    return path


@dataclass
class Team:
    tmp: Path
    key: Path  # the primary's signing key (allowed)
    other_key: Path  # a key nobody allowed
    allowed: Path  # the allowed-signers file replicas use
    top: Path  # the primary's work tree
    root: Path  # its skills root (top/skills)
    remote: Path  # the bare remote
    control: ChangeControl

    def promote(self, marker: str) -> str:
        """A body change approved on the primary and pushed; its candidate revision."""
        change, _ = self.control.propose(
            SKILL, "operator", body_rewrite(self.root, SKILL, marker), ready_body()
        )
        self.control.approve(SKILL, "reviewer", change.id)
        self.control.promoter.commits.wait_for_pushes(60)
        return change.candidate_revision

    def rollback(self, revision: str) -> None:
        self.control.rollback(SKILL, revision, "reviewer", "back")
        self.control.promoter.commits.wait_for_pushes(60)

    def replica(self, name: str = "replica") -> tuple[Replica, ReplicaConfig]:
        config = ReplicaConfig(str(self.remote), "main", self.allowed, self.tmp / name, 1.0)
        return Replica(config, Limits()), config

    def served(self, config: ReplicaConfig) -> dict[str, str]:
        """What a replica's server serves right now: each skill's revision."""
        return {n: s.revision for n, s in ReplicaPin(config, Limits())({}, (self.tmp / "empty",)).items()}

    def remote_audit_line(self) -> tuple[str, list[str]]:
        """The remote's tip and the `Ingot-Audit` trailer it records (seq, hash, MAC), read there."""
        out = git(self.remote, "log", "-1", "--format=%H %(trailers:key=Ingot-Audit,valueonly)", "main")
        commit, *line = out.split()
        return commit, line

    def primary_revisions(self) -> dict[str, str]:
        return {p.name: self.control.live_revision(p.name) for p in self.root.iterdir() if p.is_dir()}

    def forge(
        self, edit: Callable[[Path], None], message: str, key: Path | None = None, force: bool = False
    ) -> str:
        """Clone the remote, `edit` the clone, commit (signed with `key` if given) and push."""
        work = self.tmp / f"forge-{len(list(self.tmp.glob('forge-*')))}"
        git(self.tmp, "clone", "-q", str(self.remote), str(work))
        edit(work)
        git(work, "add", "-A")
        signing = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"] if key else []
        git(work, *signing, "commit", "-q", "--allow-empty", *(["-S"] if key else []), "-m", message)
        git(work, "push", "-q", *(["--force"] if force else []), "origin", "HEAD:main")
        return git(work, "rev-parse", "HEAD").strip()


def make_team(
    tmp: Path,
    neighbours,  # noqa: ANN001
    before_commit: Callable[[Path], None] | None = None,
    claimed: bool = False,
) -> Team:
    """A primary with the bundled skills committed, pushed, baselined (signed) and pushed again;
    `before_commit(root)` may change the skills first. `claimed`: its state home is established
    as `ingot` does it, with a claim beside the root anchoring the audit chain's newest line."""
    key, other = keygen(tmp / "primary_key", "primary"), keygen(tmp / "other_key", "someone")
    allowed = tmp / "allowed_signers"
    allowed.write_text(f"ingot {(tmp / 'primary_key.pub').read_text()}")
    top, remote = tmp / "primary", tmp / "remote.git"
    root = top / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    (top / "README.md").write_text("team skills\n")
    if before_commit is not None:
        before_commit(root)
    if claimed:
        establish((root,), tmp / "home")  # the claim folder ignores itself in git (.gitignore)
    git(tmp, "init", "-q", "--bare", "-b", "main", str(remote))
    git(top, "init", "-q", "-b", "main")
    git(top, "add", "-A")
    git(top, "commit", "-qm", "our skills, before Ingot signed anything")
    git(top, "remote", "add", "origin", str(remote))
    git(top, "push", "-q", "origin", "main")
    control = ChangeControl(tmp / "home", (root,), neighbours=neighbours, git=GitHistory(True, "origin", key))
    sign_baseline(control, "ana")
    control.promoter.commits.wait_for_pushes(60)
    return Team(tmp, key, other, allowed, top, root, remote, control)
