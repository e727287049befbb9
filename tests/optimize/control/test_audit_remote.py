"""The audit chain checked against the pushed history: real git, real SSH signing keys, a real
state home with claims beside its root.

The limit this closes: a chain truncated to an older genuine head with the claims put back passes
every local check (the claims remember only what they were restored to). The remote's commits
record each promotion's audit line with its hash and MAC, and the remote is not in the home."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from ingot.home import claim_path
from optimize.control.audit import AuditLog
from optimize.control.audit_remote import check
from optimize.control.gitrepo import GitHistory
from tests.optimize.control.team import Team, git, make_team


@pytest.fixture
def team(tmp_path, library_factory) -> Team:
    built = make_team(tmp_path, None, claimed=True)
    built.control.neighbours = library_factory(built.root).current
    assert claim_path(built.root).is_file()  # the claims are there: the local check is at its strongest
    return built


def outside(team: Team, git_history: GitHistory | None = None):
    control = team.control
    (found,) = check(control.audit, control.roots, git_history or control.git)
    return found


def test_a_genuine_chain_holds_the_newest_line_the_remote_records(team):
    team.promote("ONE")
    commit, (seq, digest, mac) = team.remote_audit_line()
    found = outside(team)
    assert found.state == "ok" and found.seq == int(seq) and found.commit == commit
    assert f"holds audit line {seq} as origin (main) records it" in found.message
    line = next(e for e in team.control.audit.entries() if e.seq == int(seq))
    assert (line.hash, line.mac) == (digest, mac)


def test_a_chain_truncated_to_an_older_genuine_head_with_its_claims_put_back_fails(team):
    home, claim = team.control.runs_dir, claim_path(team.root)
    kept = [home / "audit.jsonl", home / "audit.head", claim]
    older = {path: path.read_bytes() for path in kept}  # a genuine state: the baseline, pushed
    team.promote("ONE")
    team.promote("TWO")
    _, (seq, _, _) = team.remote_audit_line()
    for path, data in older.items():
        path.write_bytes(data)
    assert AuditLog(home).verify().ok  # every local check passes: the documented limit
    found = outside(team)
    assert found.state == "broken" and found.seq == int(seq)
    lines = len(older[kept[0]].splitlines())
    assert f"origin (main) records audit line {seq}" in found.message
    assert f"the chain ends at line {lines}: it was truncated" in found.message
    assert "Restore audit.jsonl, audit.head and the claims from a backup" in found.message


def test_a_tampered_mac_in_the_remotes_newest_line_fails(team):
    team.promote("ONE")
    commit, (seq, digest, mac) = team.remote_audit_line()
    forged = ("0" if mac[0] != "0" else "1") + mac[1:]
    work = team.tmp / "rewriter"
    git(team.tmp, "clone", "-q", str(team.remote), str(work))
    message = git(work, "log", "-1", "--format=%B").replace(mac, forged)
    signing = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={team.key}"]  # signed with Ingot's key
    git(work, *signing, "commit", "-q", "--amend", "-S", "-m", message)
    git(work, "push", "-q", "--force", "origin", "HEAD:main")
    found = outside(team)
    assert found.state == "broken" and found.seq == int(seq) and found.commit != commit
    assert f"records audit line {seq}" in found.message
    assert f"another MAC {forged[:16]} there, {mac[:16]} in the chain" in found.message
    assert "hash" not in found.message.split("another ")[1].split(":")[0]  # the hash still matches


def test_a_commit_without_ingots_signature_recording_a_later_line_is_not_counted(team):
    team.promote("ONE")
    _, (seq, _, _) = team.remote_audit_line()
    trailer = f"Ingot-Audit: {int(seq) + 50} {'a' * 64} {'b' * 64}"
    team.forge(lambda work: None, f"looks like Ingot\n\n{trailer}\n")  # pushed, unsigned
    found = outside(team)
    assert found.state == "ok" and found.seq == int(seq)
    assert "1 commit(s) recording a later line without a good signature" in found.message
    team.forge(lambda work: None, f"signed with Ingot's key\n\n{trailer}\n", key=team.key)
    found = outside(team)  # the same line under Ingot's own signature does count
    assert found.state == "broken" and found.seq == int(seq) + 50


def test_without_a_remote_it_says_the_check_was_not_made_and_how_to_enable_it(team):
    found = outside(team, GitHistory(True, None, team.key))
    assert found.state == "off"
    assert found.message.startswith("not checked (no GIT_PUSH_REMOTE is set)")
    assert "set GIT_PUSH_REMOTE" in found.message
    off = outside(team, GitHistory(False, "origin", team.key))
    assert off.state == "off" and "GIT_HISTORY is off" in off.message


def test_an_unreachable_remote_is_named_and_nothing_is_claimed_about_the_chain(team):
    team.promote("ONE")
    team.remote.rename(team.remote.with_name("away.git"))
    found = outside(team)
    assert found.state == "unchecked" and found.seq is None
    assert found.message.startswith(f"NOT CHECKED: cannot fetch main from origin ({team.remote})")
    assert "the local checks above stand" in found.message
    git(team.top, "remote", "remove", "origin")
    missing = outside(team)
    assert missing.state == "unchecked" and "GIT_PUSH_REMOTE=origin is not a remote of" in missing.message


def test_a_repointed_remote_fails_when_the_remote_is_pinned_and_is_named_when_it_is_not(team, tmp_path):
    """Whoever can truncate the chain can repoint the repository's `origin` at a copy of the
    remote rewound to the older genuine tip, whose signed commits record the older line. Unpinned,
    that passes, and the ok line says where the URL came from; with AUDIT_REMOTE_URL the check
    fetches from the pinned place and a repointed `origin` fails by itself."""
    home, claim = team.control.runs_dir, claim_path(team.root)
    kept = [home / "audit.jsonl", home / "audit.head", claim]
    older = {path: path.read_bytes() for path in kept}
    old_tip = git(team.top, "rev-parse", "HEAD").strip()
    team.promote("ONE")
    team.promote("TWO")
    for path, data in older.items():
        path.write_bytes(data)
    fake = tmp_path / "fake.git"
    git(tmp_path, "clone", "-q", "--bare", str(team.remote), str(fake))
    git(fake, "update-ref", "refs/heads/main", old_tip)
    git(team.top, "remote", "set-url", "origin", str(fake))
    unpinned = outside(team)
    assert unpinned.state == "ok" and "its URL came from the repository's config" in unpinned.message
    pinned = replace(team.control.git, pinned_url=str(team.remote))
    found = outside(team, pinned)
    assert found.state == "broken", found.message
    assert f"the repository's remote origin points at {fake}, not at AUDIT_REMOTE_URL {team.remote}" in (
        found.message
    )
    git(team.top, "remote", "set-url", "origin", str(team.remote) + "/")  # the same place, written otherwise
    truncated = outside(team, pinned)  # now fetched from the pinned remote: the truncation shows
    assert truncated.state == "broken" and "it was truncated" in truncated.message
    assert truncated.message.startswith("BROKEN: AUDIT_REMOTE_URL (main) records audit line")
    relative = replace(pinned, pinned_url=os.path.relpath(team.remote, team.top))  # read from the work tree
    assert outside(team, relative).message == truncated.message


def test_the_pinned_remote_is_fetched_without_the_repositorys_ssh_command(team, tmp_path):
    """A `core.sshCommand` in the repository's config runs when the remote's URL came from that
    config (its pushes use it too), never for AUDIT_REMOTE_URL."""
    team.promote("ONE")
    ran = tmp_path / "ran"
    git(team.top, "config", "core.sshCommand", f"touch {ran}; false")
    pinned = replace(team.control.git, pinned_url=f"ssh://nobody@127.0.0.1:1{team.remote}")
    git(team.top, "remote", "set-url", "origin", pinned.pinned_url)
    found = outside(team, pinned)
    assert found.state == "unchecked" and not ran.exists(), found.message
    outside(team)  # unpinned: the repository's own ssh command is what its pushes use
    assert ran.exists()
