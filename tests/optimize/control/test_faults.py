"""Faults end in one clear line and a safe state: a full disk during approve and rollback, status
right after a SIGKILL, recovery's own temp files, and exact exit codes for decided changes.

Real processes (`python -m ingot.cli`) on real filesystems: a 1 MiB tmpfs fills up for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingot.home import establish
from mcp_server.registry import Registry
from optimize.control.audit import AuditLog
from optimize.control.changes import ChangeControl
from optimize.control.lock import change_lock
from optimize.control.promote import Promoter, tree_revision
from tests.conftest import small_tmpfs, write_skill
from tests.optimize.conftest import ready_body, skill_md
from tests.optimize.control.test_promote import CHILD, REPO


def ingot(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "INGOT_HOME"} | {"HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ingot.cli", *args],
        cwd=cwd,
        env=base | env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def one_clean_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def served(root: Path, name: str = "alpha") -> str | None:
    registry = Registry((root,))
    registry.reload()
    skill = registry.skills().get(name)
    return skill.revision if skill else None


@pytest.fixture
def tiny_disk(tmp_path):
    yield from small_tmpfs(tmp_path / "tiny", "1m")


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def world_on(disk: Path) -> tuple[Path, ChangeControl]:
    root = disk / "lib" / "skills"
    write_skill(root, "alpha", "Alpha does alpha things.", "# Alpha\n\nStep one.\n")
    home = establish((root,))
    return root, ChangeControl(home.path, home.roots)


def big_rewrite(control: ChangeControl) -> str:
    files = {
        "SKILL.md": skill_md("alpha", "Alpha does alpha things.", "Step one, better."),
        "references/big.txt": b"x" * 120_000,
    }
    change, _ = control.propose("alpha", "optimizer", files, ready_body())
    return change.id


def test_a_full_disk_during_approve_is_one_line_and_changes_nothing(tiny_disk):
    root, control = world_on(tiny_disk)
    change_id = big_rewrite(control)
    before = served(root)
    filler = fill(tiny_disk)
    done = ingot("approve", "alpha", "--change", change_id, "--skills", str(root), cwd=tiny_disk)
    assert done.returncode == 1
    line = one_clean_line(done)
    assert "No space left on device" in line and "Nothing was changed" in line and before[:12] in line
    assert served(root) == before and control.queue.get("alpha").id == change_id
    filler.unlink()
    again = ingot("approve", "alpha", "--change", change_id, "--skills", str(root), cwd=tiny_disk)
    assert again.returncode == 0, again.stderr
    assert served(root) == control.queue.decided("alpha", change_id)["candidate_revision"]
    assert AuditLog(control.runs_dir).verify().ok


def test_a_full_disk_during_rollback_is_one_line_and_changes_nothing(tiny_disk):
    root, control = world_on(tiny_disk)
    original = served(root)
    change_id = big_rewrite(control)
    control.approve("alpha", "reviewer", change_id)
    promoted = served(root)
    filler = fill(tiny_disk)
    pin = ("--live", promoted[:12], "--skills", str(root))
    done = ingot("rollback", "alpha", original[:12], *pin, cwd=tiny_disk)
    assert done.returncode == 1
    line = one_clean_line(done)
    assert "No space left on device" in line and "Nothing was changed" in line
    assert served(root) == promoted
    filler.unlink()
    assert ingot("rollback", "alpha", original[:12], *pin, cwd=tiny_disk).returncode == 0
    assert served(root) == original


def _alpha_at_v1(base: Path) -> tuple[Path, Path, Path]:
    root = base / "lib" / "skills"
    write_skill(root, "alpha", "Alpha does alpha things.", "# Alpha\n\nStep one.\n")
    home = establish((root,))
    with change_lock(home.path):  # one audited revision, so drift would be reported
        Promoter(home.path).switch(
            "alpha",
            root,
            {"SKILL.md": skill_md("alpha", "Alpha.", "v1")},
            expected_from=served(root),
            action="promote",
            actor="test",
        )
    candidate = base / "candidate"
    candidate.mkdir()
    (candidate / "SKILL.md").write_bytes(skill_md("alpha", "Alpha.", "v2"))
    return root, home.path, candidate


def _child(home: Path, root: Path, candidate: Path, kill_at: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(CHILD), str(home), str(root), "alpha", "promote", str(candidate), str(kill_at)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _killed_between_switch_and_outcome(tmp_path: Path) -> tuple[Path, ChangeControl, str]:
    dry_root, dry_home, dry_candidate = _alpha_at_v1(tmp_path / "dry")
    steps = json.loads(_child(dry_home, dry_root, dry_candidate, -1).stdout)
    root, home, candidate = _alpha_at_v1(tmp_path / "real")
    assert _child(home, root, candidate, steps.index("cleanup: remove displaced tree")).returncode == -9
    return root, ChangeControl(home, (root,)), tree_revision({"SKILL.md": skill_md("alpha", "Alpha.", "v2")})


def test_status_right_after_a_sigkill_says_recovery_pending_not_drifted(tmp_path):
    root, control, v2 = _killed_between_switch_and_outcome(tmp_path)
    assert served(root) == v2  # switched, outcome not yet recorded
    status = ingot("status", "--skills", str(root), cwd=tmp_path)
    assert status.returncode == 0, status.stdout
    assert "RECOVERY PENDING" in status.stdout and "DRIFTED" not in status.stdout
    assert "recovery pending: an interrupted change to alpha" in status.stdout
    control.recover()
    after = ingot("status", "--skills", str(root), cwd=tmp_path)
    assert after.returncode == 0 and "alpha" in after.stdout and "RECOVERY" not in after.stdout


def test_recovery_removes_the_temp_files_a_killed_write_left(tmp_path):
    root, control, _ = _killed_between_switch_and_outcome(tmp_path)
    left = [
        control.runs_dir / ".audit.head.k1ll3d_x.tmp",
        control.runs_dir / "pending" / ".alpha.json.abcdefgh.tmp",
    ]
    for path in left:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"half a write")
    keep = control.runs_dir / "pending" / "notes.tmp"  # not a name write_atomic makes
    keep.write_text("mine")
    control.recover()
    assert not any(p.exists() for p in left) and keep.exists()


def test_re_approving_a_just_approved_change_is_a_conflict_not_a_missing_change(tmp_path, library_factory):
    root = tmp_path / "lib" / "skills"
    write_skill(root, "alpha", "Alpha does alpha things.", "# Alpha\n\nStep one.\n")
    home = establish((root,))
    control = ChangeControl(home.path, home.roots, neighbours=library_factory(root).current)
    ids = []
    for text in ("First.", "Second.", "Third."):  # decided within one second of each other
        change, _ = control.propose(
            "alpha",
            "optimizer",
            {"SKILL.md": skill_md("alpha", "Alpha does alpha things.", text)},
            ready_body(),
            measured_against=control.live_revision("alpha"),
        )
        ids.append(change.id)
        if text == "Second.":
            control.reject("alpha", "not this one", "reviewer", change.id)
        else:
            control.approve("alpha", "reviewer", change.id)
    first = ingot("approve", "alpha", "--change", ids[0], "--skills", str(root), cwd=tmp_path)
    assert first.returncode == 3 and "already approved" in first.stderr
    second = ingot("approve", "alpha", "--change", ids[1], "--skills", str(root), cwd=tmp_path)
    assert second.returncode == 3 and "already rejected" in second.stderr
    seqs = [r["decision_seq"] for r in control.queue.archived("alpha") if r["id"] in ids]
    assert len(set(seqs)) == 3 and seqs == sorted(seqs)


def test_a_write_refused_during_recovery_is_one_line_and_the_next_command_finishes_it(tmp_path):
    """The kill left an intent without its outcome; recovery's own write is refused (the chain
    made immutable with chattr +i: EPERM even for root, a real fault on ext4)."""
    root, control, v2 = _killed_between_switch_and_outcome(tmp_path)
    chain = control.runs_dir / "audit.jsonl"
    if subprocess.run(["chattr", "+i", str(chain)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available on this filesystem")
    v1 = next(r for r in control.snapshots("alpha") if r not in (v2, "absent"))
    rollback = ("rollback", "alpha", v1[:12], "--live", v2[:12], "--skills", str(root))
    try:
        done = ingot(*rollback, cwd=tmp_path)  # a write settles what the kill left first
    finally:
        subprocess.run(["chattr", "-i", str(chain)], check=True)
    assert done.returncode == 1
    line = one_clean_line(done)
    assert "cannot write the audit log" in line and "Operation not permitted; nothing was changed" in line
    assert (
        served(root) == v2
        and "RECOVERY PENDING" in ingot("status", "--skills", str(root), cwd=tmp_path).stdout
    )
    assert ingot(*rollback, cwd=tmp_path).returncode == 0  # recovery finishes, then the rollback
    status = ingot("status", "--skills", str(root), cwd=tmp_path)
    assert served(root) == v1 and "RECOVERY" not in status.stdout and AuditLog(control.runs_dir).verify().ok


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs: room for the bundled skills, their state home and little else."""
    yield from small_tmpfs(tmp_path / "small", "4m")


def test_guard_and_route_on_a_full_disk_say_one_line_and_the_guard_restores_once_there_is_room(small_disk):
    """No sqlite traceback: the vector cache is only a cache (routing answers without it), and a
    guard that cannot keep or restore exits non-zero with one Error line saying what is served."""
    import shutil

    from tests.conftest import BUNDLED_SKILLS

    root = small_disk / "lib" / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    quarantine = {"LIVE_EDITS": "quarantine", "INBOX_SETTLE_S": "0"}
    adopted = ingot("guard", "--skills", str(root), cwd=small_disk, **quarantine)
    assert adopted.returncode == 0, adopted.stderr
    approved = (root / "release-notes" / "SKILL.md").read_bytes()
    (root / "release-notes" / "SKILL.md").write_bytes(approved + b"\nAGENT-EDIT: skip the changelog.\n")
    shutil.rmtree(small_disk / "lib" / ".ingot" / "skills" / "cache")  # the cache must be written again
    filler = fill(small_disk)
    guarded = ingot("guard", "--skills", str(root), cwd=small_disk, **quarantine)
    assert guarded.returncode == 1 and "Traceback" not in guarded.stderr, guarded.stderr
    error = [line for line in guarded.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "MCP serves their approved revisions meanwhile" in error[0], guarded.stderr
    routed = ingot(
        "route", "Draft the release notes for v2.4", "--skills", str(root), cwd=small_disk, **quarantine
    )
    assert routed.returncode == 0 and "Traceback" not in routed.stderr, routed.stderr
    assert routed.stdout.startswith("match: release-notes") and "cannot be used" in routed.stderr
    filler.unlink()
    healed = ingot("guard", "--skills", str(root), cwd=small_disk, **quarantine)
    assert healed.returncode == 0 and "restored" in healed.stdout, healed.stderr
    assert (root / "release-notes" / "SKILL.md").read_bytes() == approved


def test_a_guard_that_cannot_take_the_change_lock_says_what_is_served_in_one_line(tmp_path):
    """An OSError before any restore (here the lock file is a folder, as root cannot be denied
    a write): exit 1, one Error line naming the file and what MCP serves, no traceback."""
    import shutil

    from tests.conftest import BUNDLED_SKILLS

    root = tmp_path / "lib" / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    quarantine = {"LIVE_EDITS": "quarantine", "INBOX_SETTLE_S": "0"}
    assert ingot("guard", "--skills", str(root), cwd=tmp_path, **quarantine).returncode == 0
    lock = establish((root,)).path / "change.lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()
    guarded = ingot("guard", "--skills", str(root), cwd=tmp_path, **quarantine)
    assert guarded.returncode == 1, guarded.stderr
    line = one_clean_line(guarded)
    assert "the guard stopped" in line and str(lock) in line and "MCP serves the approved revisions" in line
