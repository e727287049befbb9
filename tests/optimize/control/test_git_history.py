"""Git history for skills roots in a git work tree, with real git: one commit per promotion and
rollback carrying its audit line, nothing else in it (the user's staged work stays staged), a
SIGKILL between the swap and the commit reconciled by recovery, `ingot status` comparing HEAD with
the chain, and each commit pushed to a configured remote."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ingot.cli.reports import push_line
from optimize.control.audit import AuditLog
from optimize.control.changes import ChangeControl
from optimize.control.gitrepo import GitHistory
from optimize.control.lock import change_lock
from optimize.control.promote import Promoter, tree_revision
from optimize.control.pushes import read_state
from tests.conftest import BUNDLED_SKILLS, wait_for
from tests.optimize.conftest import ready_body
from tests.optimize.control.test_promote import CHILD, REPO, skill_files

SKILL = "release-notes"


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "me", "GIT_AUTHOR_EMAIL": "me@example.com"}
    env |= {"GIT_COMMITTER_NAME": "me", "GIT_COMMITTER_EMAIL": "me@example.com"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return done.stdout


def passing() -> dict:
    return ready_body()


@pytest.fixture
def repo(tmp_path, library_factory):
    """A git work tree whose `skills/` folder is the skills root; state lives outside it."""
    top = tmp_path / "repo"
    root = top / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    (top / "README.md").write_text("team skills\n")
    git(top, "init", "-q", "-b", "main")
    git(top, "add", "-A")
    git(top, "commit", "-qm", "skills")
    control = ChangeControl(
        tmp_path / "home", (root,), neighbours=library_factory(root).current, git=GitHistory(enabled=True)
    )
    return top, root, control


def rewrite(control: ChangeControl, mark: str) -> str:
    files = control.champion_files(SKILL)
    files["SKILL.md"] += f"\n{mark}: group the changes by theme.\n".encode()
    change, _ = control.propose(SKILL, "operator", files, passing())
    control.approve(SKILL, "reviewer", change.id)
    return change.id


def test_each_promotion_and_rollback_is_one_commit_of_that_skill_only(repo):
    top, root, control = repo
    before = control.live_revision(SKILL)
    (top / "README.md").write_text("work in progress\n")
    git(top, "add", "README.md")  # the user's staged work
    (top / "notes.txt").write_text("untracked\n")
    change_id = rewrite(control, "MARK-ONE")
    log = git(top, "log", "--format=%H%x00%an%x00%B%x01", "-n", "2").split("\x01")
    sha, author, message = log[0].strip().split("\x00")
    assert f"ingot: promote {SKILL} {change_id}" in message.splitlines()[0]
    promote = next(e for e in control.history(SKILL) if e.get("action") == "promote")
    assert f"Ingot-Audit: {promote.seq} {promote.hash}" in message
    assert f"Ingot-Change: {change_id}" in message
    assert f"Ingot-Evidence: {promote.get('evidence_digest')}" in message
    assert author == "reviewer (via Ingot)"
    assert git(top, "show", "--name-only", "--format=", sha).split() == [f"skills/{SKILL}/SKILL.md"]
    status = git(top, "status", "--porcelain")
    assert "M  README.md" in status and "?? notes.txt" in status and "skills/" not in status
    control.rollback(SKILL, before, "reviewer", "back")
    message = git(top, "log", "-1", "--format=%B")
    assert message.startswith(f"ingot: rollback {SKILL}")
    assert "MARK-ONE" not in (root / SKILL / "SKILL.md").read_text()
    assert git(top, "rev-list", "--count", "HEAD") == "3\n"
    assert "MARK-ONE" not in git(top, "show", f"HEAD:skills/{SKILL}/SKILL.md")
    git(top, "stash", "-q")  # (revert wants a clean index)
    git(top, "revert", "--no-edit", "HEAD")  # git works on Ingot's commits like any other
    assert "MARK-ONE" in (root / SKILL / "SKILL.md").read_text()


def test_status_compares_head_with_the_audit_head(repo):
    top, root, control = repo
    [state] = control.status().roots
    assert state.git is not None and state.git.recorded_seq is None and state.git.audit_seq is None
    rewrite(control, "MARK-ONE")
    [state] = control.status().roots
    assert state.git.in_step and state.git.recorded_seq == state.git.audit_seq
    other = root / "csv-data-cleaning" / "SKILL.md"
    other.write_text(other.read_text() + "\nhand edit\n")
    git(top, "commit", "-qam", "a hand edit")
    [state] = control.status().roots
    assert not state.git.in_step and state.git.foreign == 1


def test_without_git_history_nothing_is_committed(repo, tmp_path):
    top, root, control = repo
    quiet = ChangeControl(control.runs_dir, control.roots, neighbours=control.neighbours)
    files = quiet.champion_files(SKILL)
    files["SKILL.md"] += b"\nNO-GIT\n"
    change, _ = quiet.propose(SKILL, "operator", files, passing())
    quiet.approve(SKILL, "reviewer", change.id)
    assert git(top, "rev-list", "--count", "HEAD") == "1\n" and f"skills/{SKILL}" in git(
        top, "status", "--short"
    )


def test_each_commit_is_pushed_with_its_evidence_and_a_rejected_push_is_retried_and_shown_in_status(
    repo, tmp_path
):
    top, root, control = repo
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(top, "remote", "add", "origin", str(remote))
    git(top, "push", "-q", "origin", "main")
    pushing = ChangeControl(
        control.runs_dir, control.roots, neighbours=control.neighbours, git=GitHistory(True, "origin")
    )
    rewrite(pushing, "PUSHED")
    pushing.promoter.commits.wait_for_pushes(60)
    head = git(top, "rev-parse", "HEAD")
    assert git(remote, "rev-parse", "main") == head
    digest = git(top, "log", "-1", "--format=%(trailers:key=Ingot-Evidence,valueonly)").strip()
    note = subprocess.run(["git", "notes", "--ref=ingot", "show", "main"], cwd=remote, capture_output=True)
    assert hashlib.sha256(note.stdout).hexdigest() == digest  # the bundle travelled, byte for byte
    [state] = pushing.status().roots
    assert state.git.unpushed == 0 and push_line(state.git) == f"push to origin: up to date ({head[:12]})"
    # Someone pushes to the remote directly: the primary's next push is not a fast-forward.
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(remote), str(other))
    (other / "README.md").write_text("edited elsewhere\n")
    git(other, "commit", "-qam", "someone else's commit")
    git(other, "push", "-q", "origin", "main")
    rewrite(pushing, "REJECTED")
    pushing.promoter.commits.wait_for_pushes(60)
    [state] = pushing.status().roots
    assert state.git.push_failed and state.git.unpushed == 1 and state.git.push.rejected
    line = push_line(state.git)
    assert (
        line.startswith("PUSH FAILING push to origin: 1 commit(s) not pushed")
        and "never force-pushes" in line
    )
    assert git(remote, "rev-parse", "main") != git(top, "rev-parse", "HEAD")  # nothing was overwritten
    git(remote, "update-ref", "refs/heads/main", head.strip())  # the team puts the remote back
    wait_for(lambda: pushing.status().roots[0].git.unpushed == 0, timeout=60)  # the retry lands it
    assert git(remote, "rev-parse", "main") == git(top, "rev-parse", "HEAD")
    assert read_state(control.runs_dir, "origin").error is None


# -- a SIGKILL between the swap and the commit -------------------------------------------------


def world(base: Path) -> tuple[Path, Path, Path, Path]:
    shutil.rmtree(base, ignore_errors=True)
    top, runs = base / "repo", base / "runs"
    root = top / "skills"
    root.mkdir(parents=True)
    with change_lock(runs):
        v1 = skill_files("version one")
        Promoter(runs).switch("alpha", root, v1, expected_from=None, action="create", actor="t")
    git(top, "init", "-q", "-b", "main")
    git(top, "add", "-A")
    git(top, "commit", "-qm", "alpha v1")
    candidate = base / "candidate"
    for rel, data in skill_files("version two").items():
        (candidate / rel).parent.mkdir(parents=True, exist_ok=True)
        (candidate / rel).write_bytes(data)
    return top, root, runs, candidate


def run_child(runs: Path, root: Path, arg: str, kill_at: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CRASH_GIT": "1"}
    return subprocess.run(
        [sys.executable, str(CHILD), str(runs), str(root), "alpha", "promote", arg, str(kill_at)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_a_kill_between_the_swap_and_the_commit_is_committed_on_recovery(tmp_path):
    base = tmp_path / "w"
    top, root, runs, candidate = world(base)
    steps = json.loads(run_child(runs, root, str(candidate), -1).stdout)
    assert "git: commit" in steps
    # Up to the commit; a kill after it (before its evidence note) is test_replica's.
    for kill_at in range(steps.index("switch: rename") + 1, steps.index("git: commit") + 1):
        top, root, runs, candidate = world(base)
        killed = run_child(runs, root, str(candidate), kill_at)
        assert killed.returncode == -9, (steps[kill_at], killed.stderr)
        assert git(top, "rev-list", "--count", "HEAD") == "1\n", steps[kill_at]  # not committed yet
        with change_lock(runs, wait_s=5):
            notes = Promoter(runs, git=GitHistory(True)).recover((root,))
        assert any("committed to git after an interruption" in n for n in notes), (steps[kill_at], notes)
        message = git(top, "log", "-1", "--format=%B")
        assert message.startswith("ingot: promote alpha") and "Committed on recovery" in message
        promote = [e for e in AuditLog(runs).entries() if e.get("action") == "promote"][-1]
        assert f"Ingot-Audit: {promote.seq} {promote.hash}" in message
        assert git(top, "status", "--porcelain") == ""
        assert tree_revision(skill_files("version two")) == Promoter(runs).live_revision(root, "alpha")
        with change_lock(runs):  # recovering again commits nothing twice
            assert not Promoter(runs, git=GitHistory(True)).recover((root,))
        assert git(top, "rev-list", "--count", "HEAD") == "2\n"


def test_drift_is_never_committed_by_recovery(repo):
    top, root, control = repo
    rewrite(control, "MARK-ONE")
    skill_md = root / SKILL / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nhand edit, not Ingot's\n")
    control.recover()
    assert "hand edit" not in git(top, "show", f"HEAD:skills/{SKILL}/SKILL.md")
    assert f"skills/{SKILL}/SKILL.md" in git(top, "status", "--short")


# -- a SIGKILL at every fault point of a switch and its commit --------------------------------


def test_a_kill_at_any_point_of_a_commit_leaves_head_index_and_work_tree_in_step_after_recovery(tmp_path):
    """Including the instant after HEAD moved and before the index was reset: recovery re-syncs
    the user's index (else their next `git commit` reverts the skill), and `ingot status`'s git
    state says so until it has. The user's own staged work stays staged throughout."""
    from optimize.control.status import _git_state
    from tests.optimize.control import killpoints

    base = tmp_path / "w"

    def fresh() -> tuple[Path, Path, Path, dict[str, bytes]]:
        top, root, runs, candidate = world(base)
        (top / "mine.txt").write_text("my own work\n")
        git(top, "add", "mine.txt")
        files = {
            p.relative_to(candidate).as_posix(): p.read_bytes() for p in candidate.rglob("*") if p.is_file()
        }
        return top, root, runs, files

    def switch(root: Path, runs: Path, files: dict[str, bytes]) -> None:
        with change_lock(runs):
            promoter = Promoter(runs, git=GitHistory(True))
            promoter.switch(
                "alpha",
                root,
                files,
                expected_from=promoter.live_revision(root, "alpha"),
                action="promote",
                actor="t",
            )

    top, root, runs, files = fresh()
    names = killpoints.points(lambda: switch(root, runs, files))
    assert "git: reset the index" in names, names
    stale_seen = False
    for at, name in enumerate(names):
        top, root, runs, files = fresh()
        ended = killpoints.run(lambda r=root, w=runs, f=files: switch(r, w, f), at)
        assert ended.killed, (name, ended.traceback)
        before = _git_state(root, AuditLog(runs))
        stale_seen |= bool(before.stale_index)
        assert not before.stale_index or not before.in_step, name
        with change_lock(runs, wait_s=5):
            Promoter(runs, git=GitHistory(True)).recover((root,))
        after = _git_state(root, AuditLog(runs))
        assert after.stale_index == () and after.foreign == 0, (name, after)
        assert git(top, "status", "--porcelain") == "A  mine.txt\n", name  # only the user's own work
        switched = Promoter(runs).live_revision(root, "alpha") == tree_revision(files)
        assert git(top, "rev-list", "--count", "HEAD") == ("2\n" if switched else "1\n"), name
        assert not switched or after.in_step, (name, after)
    assert stale_seen  # the kill after update-ref was among them, and status saw it


def test_a_commit_whose_push_never_landed_is_pushed_by_the_next_process_that_serves(repo, tmp_path):
    """A CLI approval commits, its push fails (remote away), the process exits; `ingot serve`'s
    background tick (`retry_unpushed`) in another process delivers it once the remote is back."""
    top, root, control = repo
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(top, "remote", "add", "origin", str(remote))
    git(top, "push", "-q", "origin", "main")
    away = tmp_path / "away.git"
    remote.rename(away)
    cli = ChangeControl(
        control.runs_dir, control.roots, neighbours=control.neighbours, git=GitHistory(True, "origin")
    )
    rewrite(cli, "WHILE-AWAY")
    cli.promoter.commits.wait_for_pushes(60)
    assert read_state(control.runs_dir, "origin").error  # recorded, not dropped
    away.rename(remote)
    serving = ChangeControl(
        control.runs_dir, control.roots, git=GitHistory(True, "origin")
    )  # another process
    serving.promoter.commits.retry_unpushed(serving.roots)
    serving.promoter.commits.wait_for_pushes(60)
    assert git(remote, "rev-parse", "main") == git(top, "rev-parse", "HEAD")
    assert serving.status().roots[0].git.unpushed == 0
    serving.promoter.commits.retry_unpushed(serving.roots)  # nothing left: no new push starts
    assert not serving.promoter.commits._pushers[top.resolve()].busy
