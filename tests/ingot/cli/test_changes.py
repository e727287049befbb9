"""The change-control commands, run as real processes against real files."""

from __future__ import annotations

import shutil

from ingot.home import establish
from optimize.control.changes import ChangeControl
from tests.conftest import BUNDLED_SKILLS, write_skill
from tests.ingot.cli.test_errors import error_line
from tests.ingot.cli.test_main import ingot
from tests.optimize.conftest import ab, body_rewrite


def setup(tmp_path, library_factory):
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    home = establish((root,))  # the same state home the CLI finds from any folder
    control = ChangeControl(home.path, home.roots, neighbours=library_factory(root).current)
    files = body_rewrite(root, "release-notes")
    control.propose(
        "release-notes", "rewrite", "optimizer", files, ab([0.2, 0.3, 0.1, 0.2], [0.9, 0.8, 0.9, 0.8])
    )
    return root, control


def test_pending_approve_history_status_and_audit_verify(tmp_path, library_factory):
    root, control = setup(tmp_path, library_factory)
    args = ("--skills", str(root))
    listed = ingot("pending", *args, cwd=tmp_path)
    assert "release-notes" in listed.stdout and "gate: pass" in listed.stdout
    change_id = control.queue.get("release-notes").id
    unpinned = ingot("approve", "release-notes", *args, cwd=tmp_path)
    assert unpinned.returncode == 2 and "--change" in unpinned.stderr
    approved = ingot("approve", "release-notes", "--change", change_id, *args, cwd=tmp_path)
    assert approved.returncode == 0 and approved.stdout.startswith("promoted release-notes")
    again = ingot("approve", "release-notes", "--change", change_id, *args, cwd=tmp_path)
    assert again.returncode == 3 and "already approved" in again.stderr
    history = ingot("history", "release-notes", *args, cwd=tmp_path)
    assert "promote-intent" in history.stdout and "snapshot " in history.stdout
    status = ingot("status", *args, cwd=tmp_path)
    assert status.returncode == 0 and "audit: ok" in status.stdout
    verify = ingot("audit", "verify", cwd=tmp_path)
    assert verify.returncode == 0 and verify.stdout.startswith("ok: ")


def test_status_exits_non_zero_on_drift_and_audit_verify_names_the_bad_line(tmp_path, library_factory):
    root, control = setup(tmp_path, library_factory)
    control.approve("release-notes", "reviewer", control.queue.get("release-notes").id)
    write_skill(root, "release-notes", "Hand-edited behind Ingot's back.")
    status = ingot("status", "--skills", str(root), cwd=tmp_path)
    assert status.returncode == 1 and "release-notes" in status.stdout and "DRIFTED" in status.stdout
    log = control.runs_dir / "audit.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"actor":"reviewer"', b'"actor":"mallory"')
    log.write_bytes(b"".join(lines))
    verify = ingot("audit", "verify", cwd=tmp_path)
    assert verify.returncode == 1 and "line 2" in verify.stderr


def test_reject_needs_a_reason_and_propose_refuses_escaping_symlinks(tmp_path, library_factory):
    root, control = setup(tmp_path, library_factory)
    change_id = control.queue.get("release-notes").id
    args = ("--change", change_id, "--skills", str(root))
    missing = ingot("reject", "release-notes", *args, cwd=tmp_path)
    assert missing.returncode == 2 and "--reason" in missing.stderr
    done = ingot("reject", "release-notes", "--reason", "too long", *args, cwd=tmp_path)
    assert done.returncode == 0 and "archived at" in done.stdout
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    candidate = write_skill(tmp_path / "cand", "release-notes", "Writes release notes.")
    (candidate / "leak.txt").symlink_to(secret)
    refused = ingot("propose", "release-notes", "--from", str(candidate), "--skills", str(root), cwd=tmp_path)
    assert refused.returncode == 1 and "leaves the skill folder" in refused.stderr


def test_status_shows_whether_the_sandbox_can_run_here(tmp_path, library_factory):
    from tests.fake_docker import fake_engine
    from tests.optimize.conftest import require_bwrap

    require_bwrap()
    root, _ = setup(tmp_path, library_factory)
    args = ("status", "--skills", str(root))
    ready = ingot(*args, cwd=tmp_path)
    assert ready.returncode == 0 and "sandbox: bubblewrap ready: bubblewrap (" in ready.stdout
    broken = ingot(
        *args, cwd=tmp_path, env={"EXEC_SANDBOX": "docker", "DOCKER_HOST": f"unix://{tmp_path}/x.sock"}
    )
    assert broken.returncode == 0  # nothing drifted; the sandbox line says what is wrong
    assert "sandbox: docker NOT READY (no Docker engine answers at unix://" in broken.stdout
    with fake_engine(images=()) as engine:
        pull = ingot(*args, cwd=tmp_path, env={"EXEC_SANDBOX": "docker", "DOCKER_HOST": engine.url})
    assert (
        "NOT READY (image python:3.11-slim is not on the engine: run `docker pull python:3.11-slim`)"
        in pull.stdout
    )
    none = ingot(*args, cwd=tmp_path, env={"EXEC_SANDBOX": "none"})
    assert "sandbox: none NOT READY (EXEC_SANDBOX=none)" in none.stdout


def test_typos_in_skills_and_change_ids_are_one_line_with_the_nearest_names(tmp_path, library_factory):
    root, control = setup(tmp_path, library_factory)
    change_id = control.queue.get("release-notes").id
    typo = change_id[:-1] + ("0" if change_id[-1] != "0" else "1")
    args = ("--skills", str(root))
    cases = [
        (("history", "relase-notes"), "no skill named 'relase-notes' (did you mean 'release-notes'?)"),
        (("approve", "relase-notes", "--change", change_id), "did you mean 'release-notes'?"),
        (("evaluate", "release-notes", "--change", typo), f"did you mean '{change_id}'?"),
        (
            ("reject", "release-notes", "--change", typo, "--reason", "r"),
            f"the pending change is {change_id}",
        ),
        (("rollback", "release-notes", "abcdef12", "--live", "absent"), "matches 0 snapshots"),
        (("propose", "relase-notes", "--from", str(root / "release-notes")), "add --new"),
    ]
    for argv, expected in cases:
        assert expected in error_line(ingot(*argv, *args, cwd=tmp_path), 2), argv
    # a real skill with no events is said to be one, not an empty answer
    quiet = ingot("history", "csv-data-cleaning", *args, cwd=tmp_path)
    assert quiet.returncode == 0 and "no change-control events yet" in quiet.stdout
    # a candidate folder that declares another skill says so, whatever the folder is called
    folder = tmp_path / "drafts" / "whatever"
    shutil.copytree(root / "release-notes", folder)
    done = ingot("propose", "git-commit-messages", "--from", str(folder), *args, cwd=tmp_path)
    assert "declares the skill 'release-notes', not 'git-commit-messages'" in error_line(done, 1)
    assert control.queue.get("release-notes").id == change_id  # nothing was queued or decided


def test_reject_is_pinned_to_the_change_that_was_reviewed(tmp_path, library_factory):
    root, control = setup(tmp_path, library_factory)
    seen = control.queue.get("release-notes").id
    files = body_rewrite(root, "release-notes", "NEWER-RULE")
    newer, _ = control.propose(
        "release-notes", "rewrite", "optimizer", files, ab([0.2, 0.3, 0.1, 0.2], [0.9, 0.8, 0.9, 0.9])
    )
    args = ("--reason", "too long", "--skills", str(root))
    done = ingot("reject", "release-notes", "--change", seen, *args, cwd=tmp_path)
    assert "is now" in error_line(done, 3) and control.queue.get("release-notes").id == newer.id


def test_an_approved_new_skill_is_undone_from_the_command_line(tmp_path, library_factory):
    root, control = setup(tmp_path, library_factory)
    args = ("--skills", str(root))
    candidate = write_skill(tmp_path / "drafts", "kiln-firing", "Plans glaze firings for an electric kiln.")
    proposed = ingot(
        "propose", "kiln-firing", "--new", "--from", str(candidate), "--no-evaluate", *args, cwd=tmp_path
    )
    assert proposed.returncode == 0 and "new skill kiln-firing" in proposed.stdout, proposed.stderr
    change_id = control.queue.get("kiln-firing").id
    created = ingot("approve", "kiln-firing", "--change", change_id, *args, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    live = control.live_revision("kiln-firing")
    history = ingot("history", "kiln-firing", *args, cwd=tmp_path).stdout
    assert "snapshot absent  removes the skill (it did not exist before)" in history
    assert f"ingot rollback kiln-firing REVISION --live {live[:12]}" in history
    stale = ingot("rollback", "kiln-firing", "absent", "--live", "0" * 12, *args, cwd=tmp_path)
    assert "not the 000000000000 you saw" in error_line(stale, 3) and (root / "kiln-firing").is_dir()
    removed = ingot("rollback", "kiln-firing", "absent", "--live", live[:12], *args, cwd=tmp_path)
    assert removed.returncode == 0 and removed.stdout.startswith(f"removed kiln-firing (was {live[:12]})")
    assert not (root / "kiln-firing").exists()
    assert "kiln-firing" not in ingot("skills", *args, cwd=tmp_path).stdout
    status = ingot("status", *args, cwd=tmp_path)
    assert status.returncode == 0 and "kiln-firing  absent  removed by Ingot" in status.stdout
    restored = ingot("rollback", "kiln-firing", live[:12], "--live", "absent", *args, cwd=tmp_path)
    assert restored.returncode == 0 and control.live_revision("kiln-firing") == live
