"""Promotion and rollback: atomic, snapshotted, audited, and safe under SIGKILL at every step."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingot.errors import PromotionError
from mcp_server.registry import Registry
from optimize.control.audit import AuditError, AuditLog
from optimize.control.changes import ChangeControl
from optimize.control.lock import change_lock
from optimize.control.promote import ABSENT, STAGE_PREFIX, Promoter, tree_revision
from tests.conftest import small_tmpfs, write_skill

CHILD = Path(__file__).with_name("crash_child.py")
REPO = Path(__file__).resolve().parents[3]
SCRIPT = b"#!/bin/sh\necho ok\n"


def checked_out(root: Path) -> Path:
    """`root` with the modes a checkout under umask 022 leaves (a copy keeps the source's, which
    another umask could have made group-writable: not the layout of any revision)."""
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def laid_out(folder: Path) -> dict[str, tuple]:
    """Everything in `folder`, hidden entries and empty folders too: each file's bytes and mode,
    each folder's mode, each link's target."""
    state: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        base = Path(dirpath)
        state[base.relative_to(folder).as_posix()] = ("folder", stat.S_IMODE(base.lstat().st_mode))
        for name in [*filenames, *(d for d in dirnames if (base / d).is_symlink())]:
            path, rel = base / name, (base / name).relative_to(folder).as_posix()
            if path.is_symlink():
                state[rel] = ("link", os.readlink(path))
            else:
                state[rel] = ("file", path.read_bytes(), stat.S_IMODE(path.lstat().st_mode))
    return state


def as_approved(files: dict[str, bytes]) -> dict[str, tuple]:
    """The folder a revision of `files` must be on disk, written out here independently of
    promote/layout.py: a file starting with `#!` (or an ELF binary) 0755, any other 0644, every
    folder on a file's path 0755, and nothing else."""
    state: dict[str, tuple] = {".": ("folder", 0o755)}
    for rel, data in files.items():
        state.update({str(parent): ("folder", 0o755) for parent in PurePosixPath(rel).parents})
        runnable = data[:2] == b"#!" or data[:4] == b"\x7fELF"
        state[rel] = ("file", data, 0o755 if runnable else 0o644)
    return state


def skill_files(text: str, extra: dict[str, bytes] | None = None) -> dict[str, bytes]:
    md = f"---\nname: alpha\ndescription: Alpha skill, {text}.\n---\n# Alpha\n\n{text}\n".encode()
    return {"SKILL.md": md, **(extra or {})}


@pytest.fixture
def world(tmp_path):
    root, runs = tmp_path / "skills", tmp_path / "runs"
    root.mkdir()
    promoter = Promoter(runs)
    v1 = skill_files("version one", {"notes/a.txt": b"A1"})
    with change_lock(runs):
        promoter.switch("alpha", root, v1, expected_from=None, action="create", actor="test")
    return root, runs, promoter, v1


def served_revision(root: Path) -> str | None:
    registry = Registry((root,))
    registry.reload()
    skill = registry.skills().get("alpha")
    return skill.revision if skill else None


def test_promotion_switches_the_live_tree_and_snapshots_the_old_one(world):
    root, runs, promoter, v1 = world
    v2 = skill_files("version two")
    with change_lock(runs):
        outcome = promoter.switch(
            "alpha",
            root,
            v2,
            expected_from=tree_revision(v1),
            action="promote",
            actor="test",
            reason="better",
        )
    assert served_revision(root) == tree_revision(v2) == outcome.to_revision
    snapshot = promoter.snapshot_path("alpha", tree_revision(v1))
    assert promoter.read_tree(snapshot, "alpha") == v1
    assert not list(root.glob(f"{STAGE_PREFIX}*"))
    actions = [e.get("action") for e in AuditLog(runs).entries()]
    assert actions == ["create-intent", "create", "promote-intent", "promote"]
    assert AuditLog(runs).verify().ok


def test_a_stale_champion_is_refused_and_nothing_changes(world):
    root, runs, promoter, v1 = world
    with change_lock(runs), pytest.raises(PromotionError, match="was made against"):
        promoter.switch(
            "alpha", root, skill_files("v2"), expected_from="0" * 64, action="promote", actor="test"
        )
    assert served_revision(root) == tree_revision(v1)


@pytest.mark.parametrize("bad", ["../escape.txt", "/etc/passwd", "a/../../x", ".hidden", "a\\b"])
def test_candidate_paths_that_leave_the_folder_are_refused(world, bad):
    root, runs, promoter, v1 = world
    with change_lock(runs), pytest.raises(PromotionError, match="plain relative path"):
        promoter.switch(
            "alpha",
            root,
            {**skill_files("v2"), bad: b"x"},
            expected_from=tree_revision(v1),
            action="promote",
            actor="test",
        )
    assert served_revision(root) == tree_revision(v1)


@pytest.mark.parametrize("name", ["../alpha", "Alpha", "a/b", "", "x" * 65])
def test_skill_names_that_could_traverse_are_refused(world, name):
    root, runs, promoter, _ = world
    with change_lock(runs), pytest.raises(PromotionError, match="not a valid skill name"):
        promoter.switch(name, root, skill_files("v2"), expected_from=None, action="create", actor="t")


def test_rollback_restores_the_previous_revision_byte_for_byte(world):
    root, runs, promoter, v1 = world
    with change_lock(runs):
        promoter.switch(
            "alpha", root, skill_files("v2"), expected_from=tree_revision(v1), action="promote", actor="test"
        )
        promoter.rollback("alpha", root, tree_revision(v1), actor="test", reason="regression")
    assert served_revision(root) == tree_revision(v1)
    assert promoter.read_tree(root / "alpha", "alpha") == v1


def test_promotion_and_rollback_lay_each_file_out_with_the_mode_its_bytes_give_whatever_the_umask(world):
    """A revision names bytes only, so its folder's modes come from them: a script (`#!`) or an
    ELF binary is runnable, nothing else is, folders are 0755; live, snapshot and rollback alike,
    under a private umask (0600 files without it) and a group one."""
    root, runs, promoter, v1 = world
    v2 = skill_files(
        "version two",
        {"scripts/run.sh": SCRIPT, "scripts/lib/table.txt": b"#not a script", "bin/tool": b"\x7fELF\x02"},
    )
    umask = os.umask(0o077)
    try:
        with change_lock(runs):
            promoter.switch("alpha", root, v2, expected_from=tree_revision(v1), action="promote", actor="t")
        assert laid_out(root / "alpha") == as_approved(v2)
        assert laid_out(promoter.snapshot_path("alpha", tree_revision(v2))) == as_approved(v2)
        assert laid_out(promoter.snapshot_path("alpha", tree_revision(v1))) == as_approved(v1)
        os.umask(0o002)
        with change_lock(runs):
            promoter.rollback("alpha", root, tree_revision(v1), actor="t", reason="back")
            assert laid_out(root / "alpha") == as_approved(v1)
            promoter.rollback("alpha", root, tree_revision(v2), actor="t", reason="forward again")
    finally:
        os.umask(umask)
    assert laid_out(root / "alpha") == as_approved(v2)
    assert laid_out(root / "alpha")["scripts/run.sh"][2] == 0o755  # runnable as `scripts/run.sh`


def test_a_stage_not_laid_out_as_written_is_refused_and_nothing_changes(tmp_path):
    """A stage whose modes are not what was written (here changed under it before its folder is
    fsynced; a filesystem that ignores chmod would do the same) is never switched in: the
    served folder would differ from its revision's layout and the guard would restore it forever."""
    root, runs = tmp_path / "skills", tmp_path / "runs"
    root.mkdir()
    v1 = skill_files("one")
    with change_lock(runs):
        Promoter(runs).switch("alpha", root, v1, expected_from=None, action="create", actor="t")
    before = laid_out(root / "alpha")

    def chmod_the_stage(step: str) -> None:
        if step == "stage: fsync folder":
            for stage in root.glob(f"{STAGE_PREFIX}alpha-*"):
                (stage / "scripts" / "run.sh").chmod(0o644)

    v2 = skill_files("two", {"scripts/run.sh": SCRIPT})
    with change_lock(runs), pytest.raises(PromotionError, match=r"scripts/run.sh mode 0644, not 0755"):
        Promoter(runs, on_step=chmod_the_stage).switch(
            "alpha", root, v2, expected_from=tree_revision(v1), action="promote", actor="t"
        )
    assert laid_out(root / "alpha") == before
    assert [p.name for p in root.iterdir()] == ["alpha"]


def test_a_tampered_snapshot_is_not_restored(world):
    root, runs, promoter, v1 = world
    with change_lock(runs):
        promoter.switch(
            "alpha", root, skill_files("v2"), expected_from=tree_revision(v1), action="promote", actor="test"
        )
    (promoter.snapshot_path("alpha", tree_revision(v1)) / "notes" / "a.txt").write_bytes(b"evil")
    with change_lock(runs), pytest.raises(PromotionError, match="no longer hashes"):
        promoter.rollback("alpha", root, tree_revision(v1), actor="test", reason="r")


def test_an_unwritable_audit_log_blocks_the_promotion(world):
    root, runs, promoter, v1 = world
    audit = runs / "audit.jsonl"
    saved = audit.read_bytes()
    audit.unlink()
    audit.mkdir()  # any write to the log now fails, whoever we run as
    try:
        with change_lock(runs), pytest.raises(AuditError, match="audit log"):
            promoter.switch(
                "alpha",
                root,
                skill_files("v2"),
                expected_from=tree_revision(v1),
                action="promote",
                actor="test",
            )
    finally:
        audit.rmdir()
        audit.write_bytes(saved)
    assert served_revision(root) == tree_revision(v1)
    assert not list(root.glob(f"{STAGE_PREFIX}*"))


@pytest.fixture
def tiny_disk(tmp_path):
    """A 512 KiB filesystem: room for a 200 KB candidate twice (its snapshot and its stage)."""
    yield from small_tmpfs(tmp_path / "tiny", "512k")


def test_a_full_disk_during_staging_changes_nothing(tiny_disk):
    root, runs = tiny_disk / "skills", tiny_disk / "runs"
    root.mkdir()
    promoter = Promoter(runs)
    v1 = skill_files("version one")
    with change_lock(runs):
        promoter.switch("alpha", root, v1, expected_from=None, action="create", actor="test")
    filler = tiny_disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
        except OSError:
            pass
    big = skill_files("version two", {"big.bin": b"x" * 200_000})
    with change_lock(runs), pytest.raises(OSError):
        promoter.switch("alpha", root, big, expected_from=tree_revision(v1), action="promote", actor="test")
    assert served_revision(root) == tree_revision(v1)
    assert not list(root.glob(f"{STAGE_PREFIX}*"))
    filler.unlink()
    assert AuditLog(runs).verify().ok
    with change_lock(runs):  # space is back: the same promotion now goes through
        promoter.switch("alpha", root, big, expected_from=tree_revision(v1), action="promote", actor="test")
    assert served_revision(root) == tree_revision(big)


def run_child(runs: Path, root: Path, mode: str, arg: str, kill_at: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(CHILD), str(runs), str(root), "alpha", mode, arg, str(kill_at)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def fresh_world(
    base: Path, with_alpha: bool = True
) -> tuple[Path, Path, dict[str, bytes], dict[str, bytes], Path]:
    shutil.rmtree(base, ignore_errors=True)
    root, runs = base / "skills", base / "runs"
    root.mkdir(parents=True)
    promoter = Promoter(runs)
    v1 = skill_files("version one", {"notes/a.txt": b"A1"})
    if with_alpha:  # created by Ingot: it has an absent snapshot
        with change_lock(runs):
            promoter.switch("alpha", root, v1, expected_from=None, action="create", actor="test")
    v2 = skill_files("version two", {"notes/a.txt": b"A2", "notes/b.txt": b"B2"})
    candidate = base / "candidate"
    for rel, data in v2.items():
        (candidate / rel).parent.mkdir(parents=True, exist_ok=True)
        (candidate / rel).write_bytes(data)
    return root, runs, v1, v2, candidate


# promote: live v1 -> v2; rollback: live v2 -> snapshot v1; create: nothing -> v2 (a new skill,
# recorded as an absent snapshot first); remove: live v1 -> absent (the undo of a creation);
# removal: live v1 -> absent (an approved removal change, a promotion of nothing).
@pytest.mark.parametrize("mode", ["promote", "rollback", "create", "remove", "removal"])
def test_sigkill_at_every_step_leaves_one_complete_revision_and_recovers(tmp_path, mode):
    base = tmp_path / "w"

    def prepared():
        root, runs, v1, v2, candidate = fresh_world(base, with_alpha=mode != "create")
        if mode == "rollback":  # live v2, roll back to v1
            with change_lock(runs):
                Promoter(runs).switch(
                    "alpha", root, v2, expected_from=tree_revision(v1), action="promote", actor="test"
                )
            return root, runs, tree_revision(v2), tree_revision(v1), tree_revision(v1)
        if mode == "create":
            return root, runs, None, tree_revision(v2), str(candidate)
        if mode in ("remove", "removal"):
            return root, runs, tree_revision(v1), None, ABSENT
        return root, runs, tree_revision(v1), tree_revision(v2), str(candidate)

    child_mode = {"create": "promote", "remove": "rollback"}.get(mode, mode)
    root, runs, old, new, arg = prepared()
    dry = run_child(runs, root, child_mode, arg, -1)
    assert dry.returncode == 0, dry.stderr
    steps = json.loads(dry.stdout)
    assert len(steps) >= 10 and any("switch" in s or "remove:" in s for s in steps)
    assert served_revision(root) == new
    for kill_at in range(len(steps)):
        root, runs, old, new, arg = prepared()
        killed = run_child(runs, root, child_mode, arg, kill_at)
        assert killed.returncode == -9, (kill_at, steps[kill_at], killed.stderr)
        assert served_revision(root) in {old, new}, steps[kill_at]
        assert AuditLog(runs).verify().ok, steps[kill_at]
        before_recovery = ChangeControl(runs, (root,)).status()  # `ingot status` right after the kill
        assert not before_recovery.drifted, (steps[kill_at], before_recovery.skills)
        with change_lock(runs, wait_s=5):  # the dead child's lock is gone
            Promoter(runs).recover((root,))
        assert AuditLog(runs).verify().ok
        assert not [p.name for p in root.iterdir() if p.name.startswith(".")], steps[kill_at]
        assert not list((runs / "revisions").glob("*/.tmp-*")), steps[kill_at]
        assert not [p.name for p in runs.iterdir() if p.name.endswith(".tmp")], steps[kill_at]
        after = ChangeControl(runs, (root,)).status()
        assert not any(s.recovery_pending for s in after.skills) and not after.drifted, steps[kill_at]
        entries = AuditLog(runs).entries()
        intents = {e.seq for e in entries if str(e.get("action")).endswith("-intent")}
        assert intents <= {e.get("intent_seq") for e in entries if e.get("outcome")}
        live = served_revision(root)
        with change_lock(runs):  # the next operation works from whatever is live
            Promoter(runs).switch(
                "alpha",
                root,
                skill_files(f"after kill {kill_at}"),
                expected_from=live,
                action="promote",
                actor="test",
            )


def test_a_new_skill_records_an_absent_snapshot_and_rolling_back_to_it_removes_it(tmp_path):
    root, runs = tmp_path / "skills", tmp_path / "runs"
    root.mkdir()
    promoter = Promoter(runs)
    v1 = skill_files("version one", {"notes/a.txt": b"A1"})
    with change_lock(runs):
        promoter.switch("alpha", root, v1, expected_from=None, action="promote", actor="test")
    assert promoter.absent_recorded("alpha")
    with change_lock(runs):
        outcome = promoter.rollback("alpha", root, ABSENT, actor="test", reason="undo")
    assert outcome.to_revision is None and outcome.from_revision == tree_revision(v1)
    assert not (root / "alpha").exists() and served_revision(root) is None
    assert not [p.name for p in root.iterdir()]  # no trash folder left behind
    last = AuditLog(runs).entries()[-1]
    assert (
        last.get("action") == "rollback" and last.get("outcome") == "done" and last.get("to_revision") is None
    )
    status = ChangeControl(runs, (root,)).status()
    assert [(s.name, s.removed, s.drifted) for s in status.skills] == [("alpha", True, False)]
    # The removal is itself undoable: the removed revision was snapshotted, byte for byte.
    with change_lock(runs):
        promoter.rollback("alpha", root, tree_revision(v1), actor="test", reason="redo")
    assert promoter.read_tree(root / "alpha", "alpha") == v1
    assert not ChangeControl(runs, (root,)).status().drifted


def test_a_skill_ingot_did_not_create_has_no_absent_snapshot_even_with_a_planted_marker(world):
    root, runs, promoter, v1 = world
    write_skill(root, "beta", "Beta, made by hand.")
    marker = promoter.snapshot_path("beta", ABSENT)
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"schema_version": 1, "skill": "beta", "root": str(root)}))
    assert not promoter.absent_recorded("beta")  # the chain holds no creation of beta by Ingot
    with change_lock(runs), pytest.raises(PromotionError, match="Ingot did not create it"):
        promoter.rollback("beta", root, ABSENT, actor="test", reason="r")
    assert (root / "beta" / "SKILL.md").exists()


def test_a_removed_skill_put_back_by_hand_is_drift(world):
    root, runs, promoter, v1 = world
    with change_lock(runs):
        promoter.rollback("alpha", root, ABSENT, actor="test", reason="undo")
    assert not ChangeControl(runs, (root,)).status().drifted
    for rel, data in v1.items():
        (root / "alpha" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "alpha" / rel).write_bytes(data)
    drifted = ChangeControl(runs, (root,)).status().drifted
    assert [(s.name, s.removed, s.live_revision) for s in drifted] == [("alpha", True, tree_revision(v1))]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.dictionaries(
        st.from_regex(r"[a-z]{1,6}(/[a-z]{1,6})?\.md", fullmatch=True),
        st.binary(max_size=200) | st.binary(max_size=200).map(lambda b: b"#!" + b),
        max_size=4,
    )
)
def test_promote_then_rollback_restores_the_tree_digest(tmp_path_factory, extra):
    base = tmp_path_factory.mktemp("prop")
    extra = {k: v for k, v in extra.items() if not any(k.startswith(o[:-3] + "/") for o in extra)}
    root, runs = base / "skills", base / "runs"
    root.mkdir()
    promoter = Promoter(runs)
    v1 = skill_files("one", extra)
    with change_lock(runs):
        promoter.switch("alpha", root, v1, expected_from=None, action="create", actor="t")
        promoter.switch(
            "alpha", root, skill_files("two"), expected_from=tree_revision(v1), action="promote", actor="t"
        )
        promoter.rollback("alpha", root, tree_revision(v1), actor="t", reason="prop")
    assert promoter.read_tree(root / "alpha", "alpha") == v1
    assert served_revision(root) == tree_revision(v1)
    assert laid_out(root / "alpha") == as_approved(v1)  # modes too, not only the digest
