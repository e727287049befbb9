"""`make test-image`'s team step: the primary's ./skills as a signed git history, and a replica.

As the README's "A team" section has a user do it: ./skills becomes a git repository, ./team holds
a bare remote, an SSH signing key and the allowed-signers file; the primary's services get
GIT_SIGNING_KEY and GIT_PUSH_REMOTE, `ingot baseline` signs the starting point in the `ui`
container, and `docker compose --profile replica up` starts a replica. A change approved in the
`ui` container must then be served by the replica (which verified its signature, trailers,
folder revision and evidence first); the time from approval to served is reported.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

TEAM_ENV = {"GIT_SIGNING_KEY": "/app/team/signing_key", "GIT_PUSH_REMOTE": "team", "REPLICA_INTERVAL_S": "1"}


def _git(cwd: Path, *args: str) -> None:
    env = {"GIT_AUTHOR_NAME": "you", "GIT_AUTHOR_EMAIL": "you@example.com", "HOME": "/tmp"}
    env |= {"GIT_COMMITTER_NAME": "you", "GIT_COMMITTER_EMAIL": "you@example.com", "PATH": "/usr/bin:/bin"}
    # safe.directory: this runs as root on folders the user owns (ownership is fixed after).
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr.strip()}")


def prepare(clone: Path, owner: int) -> None:
    """What the user runs on the host once: their skills repository, the remote, the key."""
    skills, team = clone / "skills", clone / "team"
    team.mkdir(exist_ok=True)
    _git(skills, "init", "-q", "-b", "main")
    _git(skills, "add", "-A")
    _git(skills, "commit", "-qm", "our skills")
    _git(clone, "init", "-q", "--bare", "-b", "main", str(team / "remote.git"))
    _git(skills, "remote", "add", "team", "/app/team/remote.git")  # the path the containers see
    key = team / "signing_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key), "-C", "ingot"], check=True)
    (team / "allowed_signers").write_text(f"ingot {(team / 'signing_key.pub').read_text()}")
    subprocess.run(["chown", "-R", f"{owner}:{owner}", str(skills), str(team)], check=True)


def replica_step(
    compose: Callable, clone: Path, owner: int, port: int, served: Callable, wait: Callable
) -> tuple[str, float]:
    """The step; returns what it saw and the seconds from approval to served on the replica."""
    prepare(clone, owner)
    replica_url = f"http://127.0.0.1:{port}/mcp"
    env = TEAM_ENV | {"INGOT_REPLICA_PORT": str(port)}

    def team(*args: str, **kwargs):  # noqa: ANN202 - a CompletedProcess
        return compose("--profile", "replica", *args, env=env, **kwargs)

    team("up", "-d", "mcp", "ui", timeout=600)  # the primary, now signing and pushing
    baseline = team("exec", "-T", "ui", "ingot", "baseline", "--reason", "make test-image").stdout
    if "pushed to team" not in baseline:
        raise AssertionError(f"the baseline was not pushed: {baseline[-300:]}")
    team("up", "-d", "replica", timeout=600)
    try:
        first = wait(lambda: served(replica_url), 180, "the replica serving the baseline")
    except Exception as exc:
        logs = team("logs", "--tail", "40", "replica", check=False)
        raise AssertionError(f"{exc}; the replica's log: {(logs.stdout + logs.stderr)[-2500:]}") from None
    edit = (
        "rm -rf /tmp/team-edit && cp -r /app/skills/release-notes /tmp/team-edit && "
        "echo 'Name the pull request of every entry.' >> /tmp/team-edit/SKILL.md && "
        "ingot propose release-notes --from /tmp/team-edit"
    )
    proposed = team("exec", "-T", "ui", "sh", "-c", edit).stdout
    change = re.search(r"pending (chg-[0-9a-f]{12}): body change of release-notes \w+ -> (\w+)", proposed)
    accepting = re.search(r'--accepting "([^"]+)"', proposed)
    if not change or not accepting:
        raise AssertionError(f"unexpected `ingot propose` output: {proposed[-400:]}")
    start = time.monotonic()
    team(
        "exec", "-T", "ui", "ingot", "approve", "release-notes", "--change", change.group(1),
        "--accept-missing", "make test-image: no model configured", "--accepting", accepting.group(1),
    )  # fmt: skip
    new = change.group(2)
    wait(lambda: (served(replica_url) or "").startswith(new), 120, f"the replica serving {new}")
    seconds = round(time.monotonic() - start, 2)
    status = team("exec", "-T", "replica", "ingot", "status", check=False).stdout
    if "lag 0 s" not in status or "0 commit(s) refused" not in status:
        raise AssertionError(f"the replica's status is not clean: {status[-400:]}")
    team("rm", "-s", "-f", "replica", timeout=180)
    return (
        f"baseline served at {str(first)[:12]}; {change.group(1)} approved in ui, "
        f"served by the replica {seconds} s later"
    ), seconds
