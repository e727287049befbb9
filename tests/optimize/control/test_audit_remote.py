"""The audit chain checked against the pushed history: real git, real SSH signing keys, a real
state home with claims beside its root.

The limit this closes: a chain truncated to an older genuine head with the claims put back passes
every local check (the claims remember only what they were restored to). The remote's commits
record each promotion's audit line with its hash and MAC, and the remote is not in the home."""

from __future__ import annotations

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
