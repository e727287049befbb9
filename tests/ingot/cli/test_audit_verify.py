"""`ingot audit verify` as a person runs it: the local checks, then the chain against the pushed
history (GIT_PUSH_REMOTE), each in one line, with the exit code EXIT_CODES documents for each
outcome. Real git, real SSH signing keys, a real state home with claims beside its root
(tests/optimize/control/team.py); the check itself is tested in test_audit_remote.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ingot.home import claim_path
from tests.optimize.control.team import Team, make_team


@pytest.fixture
def team(tmp_path, library_factory) -> Team:
    built = make_team(tmp_path, None, claimed=True)
    built.control.neighbours = library_factory(built.root).current
    return built


def verify(team: Team, **env: str) -> subprocess.CompletedProcess:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("INGOT_", "GIT_", "SKILLS_"))}
    settings = {"INGOT_HOME": str(team.control.runs_dir), "GIT_SIGNING_KEY": str(team.key)}
    return subprocess.run(
        [sys.executable, "-m", "ingot.cli", "audit", "verify", "--skills", str(team.root)],
        cwd=team.tmp,
        env={**keep, **settings, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_audit_verify_checks_the_chain_against_the_remote_and_exits_by_what_it_found(team):
    home, claim = team.control.runs_dir, claim_path(team.root)
    older = {p: p.read_bytes() for p in (home / "audit.jsonl", home / "audit.head", claim)}
    team.promote("ONE")
    _, (seq, _, _) = team.remote_audit_line()

    genuine = verify(team, GIT_PUSH_REMOTE="origin")
    assert genuine.returncode == 0, genuine.stderr
    local, remote = genuine.stdout.splitlines()
    assert local.startswith("ok: ") and remote.startswith(f"outside: ok: the chain holds audit line {seq} ")
    assert remote.endswith("set AUDIT_REMOTE_URL to pin it")
    pinned = verify(team, GIT_PUSH_REMOTE="origin", AUDIT_REMOTE_URL=str(team.remote))
    assert pinned.returncode == 0 and "outside: ok: the chain holds audit line" in pinned.stdout
    assert "AUDIT_REMOTE_URL (main)" in pinned.stdout and "to pin it" not in pinned.stdout
    elsewhere = verify(team, GIT_PUSH_REMOTE="origin", AUDIT_REMOTE_URL=str(team.tmp / "other.git"))
    assert elsewhere.returncode == 1
    assert elsewhere.stderr.startswith("outside: BROKEN: the repository's remote")

    alone = verify(team)
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.splitlines()[1].startswith("outside: not checked (no GIT_PUSH_REMOTE is set)")
    assert "set GIT_PUSH_REMOTE" in alone.stdout and alone.stderr == ""

    away = team.remote.with_name("away.git")
    team.remote.rename(away)
    unreachable = verify(team, GIT_PUSH_REMOTE="origin")
    assert unreachable.returncode == 4
    assert unreachable.stdout.startswith("ok: ")  # the local result is still reported
    assert unreachable.stderr.startswith("outside: NOT CHECKED: cannot fetch main from origin")
    away.rename(team.remote)

    for path, data in older.items():
        path.write_bytes(data)
    truncated = verify(team, GIT_PUSH_REMOTE="origin")
    assert truncated.returncode == 1
    assert truncated.stdout.startswith("ok: ")  # every local check passes a truncated chain...
    said = truncated.stderr  # ...this one does not
    assert said.startswith(f"outside: BROKEN: origin (main) records audit line {seq} ")
    assert "Restore audit.jsonl, audit.head and the claims" in said
    assert len(said.strip().splitlines()) == 1  # one line, no traceback
