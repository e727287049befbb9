"""Replicas verify before they serve: real git, real SSH keys, forgeries pushed straight to the remote.

The primary signs every promotion, rollback and baseline (GIT_SIGNING_KEY) and attaches the
evidence; a replica fetches, checks every new commit (signature by an allowed signer, descent from
what it verified, each skill change an Ingot commit whose folder hashes to its trailer's revision,
the attached evidence matching its digest), and only then switches. Each forgery below is pushed
by someone with push access: each is refused, and the replica keeps serving its last verified
library, saying why."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from optimize.control.baseline import sign_baseline
from optimize.control.replica import replica_status, served_state
from tests.conftest import wait_for
from tests.optimize.control.team import SKILL, Team, git, make_team


@pytest.fixture
def team(tmp_path, library_factory) -> Team:
    built = make_team(tmp_path, None)
    built.control.neighbours = library_factory(built.root).current
    return built


@pytest.fixture
def synced(team):
    """A replica that verified the baseline and one promotion."""
    revision = team.promote("FIRST")
    replica, config = team.replica()
    result = replica.sync()
    assert result.switched and not result.refused, result
    assert team.served(config)[SKILL] == revision
    return replica, config


def test_a_replica_serves_the_baseline_then_each_promotion_and_rollback_once_verified(team):
    replica, config = team.replica()
    first = replica.sync()
    assert first.switched and first.refused == ()
    assert team.served(config) == team.primary_revisions()  # the baseline: every skill
    before = team.primary_revisions()[SKILL]
    promoted = team.promote("ONE")
    assert team.served(config)[SKILL] == before  # nothing new is served before a sync verifies it
    assert replica.sync().switched and team.served(config)[SKILL] == promoted
    team.rollback(before)
    assert replica.sync().switched and team.served(config) == team.primary_revisions()
    assert replica.sync().switched is False  # up to date: nothing to do
    status = replica_status(config)
    assert status.served == git(team.top, "rev-parse", "HEAD").strip() and status.lag_s == 0
    assert status.refused == () and status.error is None


def _unsigned(team: Team) -> None:
    team.forge(lambda w: _append(w, "unsigned rule"), "tweak the release notes")


def _unknown_key(team: Team) -> None:
    team.forge(lambda w: _append(w, "rule from a stranger"), "tweak", key=team.other_key)


def _tree_differs_from_trailer(team: Team) -> None:
    """Signed with the primary's own key (stolen, or a bug), trailers copied from the last genuine
    commit, files changed: the folder no longer hashes to the revision the trailer names."""
    genuine = git(team.top, "log", "-1", "--format=%B")
    team.forge(lambda w: _append(w, "smuggled rule"), genuine, key=team.key)


def _no_trailers(team: Team) -> None:
    team.forge(lambda w: _append(w, "signed but not an Ingot commit"), "a signed hand edit", key=team.key)


def _force_push(team: Team) -> None:
    def rewind(work):
        git(work, "reset", "-q", "--hard", "HEAD~1")

    team.forge(rewind, "history rewritten", key=team.key, force=True)


def _deleted_branch(team: Team) -> None:
    git(team.remote, "update-ref", "-d", "refs/heads/main")


def _evidence_mismatch(team: Team) -> None:
    """A genuine promotion reaches the remote, then its attached evidence is swapped."""
    team.promote("SECOND")
    work = team.tmp / "notes-forger"
    git(team.tmp, "clone", "-q", str(team.remote), str(work))
    git(work, "fetch", "-q", "origin", "refs/notes/ingot:refs/notes/ingot")
    bundle = json.loads(git(work, "notes", "--ref=ingot", "show", "HEAD"))
    bundle["passport"]["state"] = "ready"
    bundle["measurements_forged"] = True
    git(work, "notes", "--ref=ingot", "add", "-f", "-m", json.dumps(bundle), "HEAD")
    git(work, "push", "-q", "--force", "origin", "refs/notes/ingot:refs/notes/ingot")


def _append(work, line: str) -> None:
    path = work / "skills" / SKILL / "SKILL.md"
    path.write_text(path.read_text() + f"\n{line}\n")


FORGERIES = {
    "unsigned commit": (_unsigned, "unsigned"),
    "signed by a key not allowed": (_unknown_key, "not in the allowed signers file"),
    "tree differs from its trailer's revision": (_tree_differs_from_trailer, "not the revision"),
    "skills/ changed with no Ingot trailers": (_no_trailers, "not an Ingot commit"),
    "force-push rewriting verified history": (_force_push, "history rewritten"),
    "branch deleted": (_deleted_branch, "gone from"),
    "evidence digest does not match": (_evidence_mismatch, "not the"),
}


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_forgery_pushed_to_the_remote_is_refused_and_the_verified_library_keeps_serving(
    team, synced, forgery
):
    replica, config = synced
    forge, why = FORGERIES[forgery]
    before, verified = team.served(config), served_state(config)
    forge(team)
    result = replica.sync()
    assert not result.switched
    reasons = " ".join(w for _, w in result.refused) + (result.error or "")
    assert why in reasons, reasons
    assert team.served(config) == before and served_state(config) == verified
    status = replica_status(config)
    assert why in " ".join(str(r.get("why")) for r in status.refused) + (status.error or "")
    assert replica.sync().switched is False  # refused again, never served on a second look


def test_a_genuine_promotion_after_a_refused_commit_is_not_served_either(team, synced):
    """Verification is of the whole range: a good commit on top of a forgery does not wash it."""
    replica, config = synced
    before = team.served(config)
    _unsigned(team)
    git(team.top, "pull", "-q", "--ff-only", "origin", "main")  # the primary takes it in...
    team.promote("AFTER")  # ...and signs a promotion on top
    assert not replica.sync().switched and team.served(config) == before


def test_a_new_baseline_supersedes_a_refused_commit(team, synced):
    replica, config = synced
    _unsigned(team)
    assert not replica.sync().switched
    git(team.top, "pull", "-q", "--ff-only", "origin", "main")
    sign_baseline(team.control, "ana", "re-anchor after an unsigned push")  # a person attests it
    team.control.promoter.commits.wait_for_pushes(60)
    result = replica.sync()
    assert result.switched and result.refused == ()
    assert team.served(config) == team.primary_revisions()
    assert "unsigned rule" in (team.root / SKILL / "SKILL.md").read_text()
    assert replica_status(config).refused == ()  # superseded: no longer shown as refusing


def test_a_replica_with_no_baseline_to_start_from_serves_nothing_and_says_what_to_run(tmp_path, team):
    bare = tmp_path / "plain.git"
    git(tmp_path, "clone", "-q", "--bare", str(team.remote), str(bare))
    git(bare, "update-ref", "refs/heads/main", git(team.top, "rev-list", "--max-parents=0", "HEAD").strip())
    team.remote = bare
    replica, config = team.replica("no-baseline")
    result = replica.sync()
    assert not result.switched and "ingot baseline" in result.error
    assert team.served(config) == {}


def test_an_unreachable_remote_keeps_the_library_served_lagging_then_it_catches_up(team, synced):
    replica, config = synced
    before = team.served(config)
    promoted = team.promote("WHILE-AWAY")
    hidden = team.remote.with_name("remote-away.git")
    team.remote.rename(hidden)
    result = replica.sync()
    assert result.error and "cannot fetch" in result.error and not result.switched
    assert team.served(config) == before
    status = replica_status(config)
    assert status.error and status.lag_s > 0  # behind since its last good fetch...
    wait_for(lambda: replica_status(config).lag_s > status.lag_s, timeout=10)  # ...and growing
    assert replica_sync_again_fails(replica)
    hidden.rename(team.remote)
    assert replica.sync().switched and team.served(config)[SKILL] == promoted
    assert replica_status(config).error is None and replica_status(config).lag_s == 0


def replica_sync_again_fails(replica) -> bool:
    result = replica.sync()
    return bool(result.error) and not result.switched


def test_verify_history_prints_every_commit_and_fails_at_the_first_forgery(team, synced):
    team.promote("SECOND")

    def verify():
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "ingot.cli",
                "verify-history",
                str(team.remote),
                "--allowed-signers",
                str(team.allowed),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = verify()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "before the first baseline" in lines[0]
    assert "good by ingot" in lines[1] and "baseline of 7 skills" in lines[1]
    assert all("good by ingot" in line and "promote release-notes" in line for line in lines[2:])
    assert all("evidence ok" in line and "passport ready (evidence says ready)" in line for line in lines[2:])
    _no_trailers(team)
    done = verify()
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1].endswith("not an Ingot commit (no Ingot trailers)")
    assert done.stderr.startswith("Error: commit ") and "not an Ingot commit" in done.stderr


def test_a_replica_killed_at_any_step_of_a_sync_serves_the_old_or_the_new_library_and_the_next_sync_completes(
    team, synced
):
    from tests.optimize.control import killpoints

    replica, config = synced
    old = team.served(config)
    team.promote("KILLED-SYNC")
    team.rollback(old[SKILL])
    team.promote("KILLED-SYNC-AGAIN")
    new = team.primary_revisions()
    folder = config.folder
    pristine = team.tmp / "pristine-replica"
    shutil.copytree(folder, pristine, symlinks=True)
    steps = killpoints.points(lambda: replica.sync())
    assert {"replica: fetch", "replica: verify", "replica: switch", "replica: state write"} <= set(steps)
    tried = safe = 0
    for at, step in enumerate(steps):
        shutil.rmtree(folder)
        shutil.copytree(pristine, folder, symlinks=True)
        ended = killpoints.run(lambda: replica.sync(), at)
        assert ended.killed, (step, ended.error)
        tried += 1
        served = team.served(config)
        assert served in (old, new), (step, served)  # one library or the other, never a mix
        again = replica.sync()
        assert not again.refused and not again.error, (step, again)
        assert team.served(config) == new, step
        safe += 1
    assert tried == safe == len(steps) >= 6


def test_a_rollback_to_a_revision_the_replica_pruned_is_written_again_and_served(team, synced):
    """Only the served and the previous library are kept on disk; an older revision that comes
    back (a rollback) is taken from git again, not assumed to be there."""
    replica, config = synced
    first = team.served(config)[SKILL]
    for marker in ("TWO", "THREE", "FOUR"):
        team.promote(marker)
        assert replica.sync().switched
    assert not (config.folder / "revisions" / SKILL / first).exists()  # pruned
    team.rollback(first)
    assert replica.sync().switched
    assert team.served(config)[SKILL] == first


def test_a_kill_between_a_commit_and_its_evidence_note_is_mended_by_recovery_and_then_verifies(team, synced):
    from tests.optimize.conftest import body_rewrite, ready_body
    from tests.optimize.control import killpoints

    replica, config = synced
    files = body_rewrite(team.root, SKILL, "NOTE-KILL")
    change, _ = team.control.propose(SKILL, "operator", files, ready_body())
    ended = killpoints.run(lambda: team.control.approve(SKILL, "reviewer", change.id), "git: note")
    assert ended.killed, ended.error
    head = git(team.top, "rev-parse", "HEAD").strip()
    assert "Ingot-Evidence" in git(team.top, "log", "-1", "--format=%B")
    assert not git(team.top, "notes", "--ref=ingot", "list", head, check=False).strip()  # killed before it
    notes = team.control.recover()
    assert any("evidence attached" in n for n in notes), notes
    team.control.promoter.commits.wait_for_pushes(60)
    result = replica.sync()
    assert result.switched and not result.refused, result
    assert team.served(config)[SKILL] == change.candidate_revision


def test_a_hidden_file_and_an_executable_script_verify_as_the_registry_reads_them(tmp_path, library_factory):
    """What a replica serves is what the registry reads: a hidden file in a skill folder is not
    part of its revision (nor written), an executable script keeps its mode."""

    def extras(root):
        (root / SKILL / ".notes").write_text("the author's scratch notes\n")
        script = root / SKILL / "scripts" / "collect.sh"
        script.parent.mkdir()
        script.write_text("#!/bin/sh\necho collected\n")
        script.chmod(0o755)

    team = make_team(tmp_path, None, extras)
    team.control.neighbours = library_factory(team.root).current
    replica, config = team.replica()
    assert replica.sync().switched
    assert team.served(config) == team.primary_revisions()
    stored = config.folder / "revisions" / SKILL / team.served(config)[SKILL]
    assert not (stored / ".notes").exists() and (stored / "scripts" / "collect.sh").stat().st_mode & 0o111


def test_a_baseline_refuses_a_symlink_a_replica_could_not_serve(tmp_path):
    import pytest as _pytest

    from ingot.errors import IngotError

    def link(root):
        (root / SKILL / "references").mkdir(exist_ok=True)
        (root / SKILL / "references" / "alias.md").symlink_to("../SKILL.md")

    with _pytest.raises(IngotError, match="alias.md is a symlink in git"):
        make_team(tmp_path, None, link)
