"""The change-control commands, run as real processes against real files."""

from __future__ import annotations

import json
import re
import shutil

from ingot.errors import EXIT_CODES
from ingot.home import establish
from optimize.control.changes import ChangeControl
from tests.conftest import BUNDLED_SKILLS, REPO, write_skill
from tests.ingot.cli.test_errors import error_line
from tests.ingot.cli.test_main import ingot
from tests.optimize.conftest import body_rewrite, ready_body


def setup(tmp_path, library_factory):
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    home = establish((root,))  # the same state home the CLI finds from any folder
    control = ChangeControl(home.path, home.roots, neighbours=library_factory(root).current)
    files = body_rewrite(root, "release-notes")
    control.propose("release-notes", "optimizer", files, ready_body())
    return root, control


def test_pending_approve_history_status_and_audit_verify(tmp_path, library_factory):
    root, control = setup(tmp_path, library_factory)
    args = ("--skills", str(root))
    listed = ingot("pending", *args, cwd=tmp_path)
    assert "release-notes" in listed.stdout and "body change from optimizer" in listed.stdout
    assert listed.stdout.rstrip().endswith("ready: every cell that applies passed")
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


def test_status_names_a_folder_laid_out_otherwise_and_fails_only_where_folders_are_promised(
    tmp_path, library_factory
):
    """A chmod leaves the bytes (and the served revision) alone, so it is not drift; status still
    never calls the folder ok: under LIVE_EDITS=serve it is shown and exits 0 (nothing restores
    it), under quarantine it exits 1 and names the guard."""
    root, control = setup(tmp_path, library_factory)
    control.approve("release-notes", "reviewer", control.queue.get("release-notes").id)
    (root / "release-notes" / "SKILL.md").chmod(0o755)
    shown = ingot("status", "--skills", str(root), cwd=tmp_path)
    line = next(line for line in shown.stdout.splitlines() if line.startswith("release-notes "))
    assert shown.returncode == 0 and "LAID OUT OTHERWISE" in line and "DRIFTED" not in line, shown.stdout
    assert "  its folder: SKILL.md mode 0755, not 0644 (MCP serves the same bytes;" in shown.stdout
    guarded = ingot("status", "--skills", str(root), cwd=tmp_path, LIVE_EDITS="quarantine")
    assert guarded.returncode == 1 and "`ingot guard` now" in guarded.stdout, guarded.stdout
    (root / "release-notes" / "SKILL.md").chmod(0o644)
    assert ingot("status", "--skills", str(root), cwd=tmp_path, LIVE_EDITS="quarantine").returncode == 0


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
    newer, _ = control.propose("release-notes", "optimizer", files, ready_body())
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
    assert proposed.returncode == 0 and "create change of kiln-firing" in proposed.stdout, proposed.stderr
    change_id = control.queue.get("kiln-firing").id
    why = ("--accept-missing", "a first draft, measured once it has traffic")
    unnamed = ingot("approve", "kiln-firing", "--change", change_id, *why, *args, cwd=tmp_path)
    cells = error_line(unnamed, 1).split('--accepting "')[1].split('"')[0]
    assert cells == "held-out A/B,routing impact,sandbox checks", cells
    why += ("--accepting", cells)
    created = ingot("approve", "kiln-firing", "--change", change_id, *why, *args, cwd=tmp_path)
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


def test_a_body_change_with_no_model_is_approved_only_naming_the_missing_cells(tmp_path):
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    args = ("--skills", str(root))
    folder = tmp_path / "edit" / "release-notes"
    shutil.copytree(root / "release-notes", folder)
    (folder / "SKILL.md").write_text((folder / "SKILL.md").read_text() + "\nCheck every entry.\n")
    proposed = ingot("propose", "release-notes", "--from", str(folder), *args, cwd=tmp_path)
    assert proposed.returncode == 0, proposed.stderr
    assert "body change of release-notes" in proposed.stdout and "+2 / -0 lines" in proposed.stdout
    assert "needs-acknowledgement (body change)" in proposed.stdout
    assert "  held-out A/B    missing  no agent or judge model configured" in proposed.stdout
    change_id = (
        establish((root,)).path.joinpath("pending", "release-notes.json").read_text().split('"id": "')[1][:16]
    )
    refused = ingot("approve", "release-notes", "--change", change_id, *args, cwd=tmp_path)
    line = error_line(refused, 1)
    assert "needs acknowledgement" in line and "held-out A/B (no agent or judge model configured" in line
    assert '--accept-missing "REASON"' in line
    reason = "a typo fix; no model configured here"
    unnamed = ingot(
        "approve", "release-notes", "--change", change_id, "--accept-missing", reason, *args, cwd=tmp_path
    )
    assert "--accept-missing needs the cells it accepts" in error_line(unnamed, 1)
    cells = error_line(unnamed, 1).split('--accepting "')[1].split('"')[0]
    bogus = ingot(
        "approve", "release-notes", "--change", change_id, "--accept-missing", reason,
        "--accepting", f"{cells},bogus", *args, cwd=tmp_path,
    )  # fmt: skip
    assert "unknown cell(s) 'bogus'" in error_line(bogus, 1)
    partial = ingot(
        "approve", "release-notes", "--change", change_id, "--accept-missing", reason,
        "--accepting", cells.split(",")[0], *args, cwd=tmp_path,
    )  # fmt: skip
    assert "missing now and you did not accept" in error_line(partial, 3)
    assert "Check every entry." not in (root / "release-notes" / "SKILL.md").read_text()
    done = ingot(
        "approve", "release-notes", "--change", change_id, "--accept-missing", reason,
        "--accepting", cells, *args, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("promoted release-notes"), done.stderr
    assert "Check every entry." in (root / "release-notes" / "SKILL.md").read_text()
    home = establish((root,))
    intent = next(
        e
        for e in ChangeControl(home.path, home.roots).history("release-notes")
        if e.get("action") == "promote-intent"
    )
    assert intent.get("acceptance_reason") == reason and "held-out A/B" in intent.get("accepted_missing")
    history = ingot("history", "release-notes", *args, cwd=tmp_path).stdout
    assert f"accepted missing held-out A/B, replay, routing impact, cost: {reason}" in history


def test_a_withheld_proposal_says_so_and_exits_with_the_conflict_code(tmp_path, library_factory):
    root, control = setup(tmp_path, library_factory)  # a ready change waits
    waiting = control.queue.get("release-notes").id
    folder = tmp_path / "edit" / "release-notes"
    shutil.copytree(root / "release-notes", folder)
    (folder / "SKILL.md").write_text((folder / "SKILL.md").read_text() + "\nAnother idea.\n")
    done = ingot("propose", "release-notes", "--from", str(folder), "--skills", str(root), cwd=tmp_path)
    line = error_line(done, 3)
    assert line.startswith(
        f"Error: withheld: a better change is waiting ({waiting}); reject or approve it first"
    )
    assert "pending chg-" not in done.stdout and "is now chg-" not in done.stderr
    assert control.queue.get("release-notes").id == waiting
    (archived,) = [r for r in control.queue.archived("release-notes") if r["archived_status"] == "withheld"]
    assert archived["id"] in line
    approve = ingot(
        "approve", "release-notes", "--change", archived["id"], "--skills", str(root), cwd=tmp_path
    )
    assert "was withheld (audit line" in error_line(approve, 3)  # the chain's word, not the file's
    status = ingot("status", "--skills", str(root), cwd=tmp_path)
    assert status.returncode == 0 and "ARCHIVE" not in status.stdout  # the archive agrees with the chain


def test_pending_json_carries_each_change_s_passport_and_size(tmp_path, library_factory):
    import json

    root, control = setup(tmp_path, library_factory)
    listed = ingot("pending", "--json", "--skills", str(root), cwd=tmp_path)
    (entry,) = json.loads(listed.stdout)
    assert entry["kind"] == "body" and entry["passport"]["state"] == "ready"
    assert [c["cell"] for c in entry["passport"]["cells"]][:2] == ["held-out A/B", "replay"]
    assert entry["size"]["added"] == 2 and entry["size"]["removed"] == 0


def test_a_removal_is_proposed_measured_approved_and_undone_from_the_command_line(tmp_path):
    import json

    import yaml

    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    routing = [
        {"task": "Draft the release notes for v2.4 from the merged PRs", "expected": "release-notes"},
        {"task": "Tune this slow PostgreSQL query", "expected": "postgres-query-tuning"},
        {"task": "Write a commit message for this diff", "expected": "git-commit-messages"},
        {
            "task": "Write a conventional commit message for the staged changes",
            "expected": "git-commit-messages",
        },
        {"task": "Harden this Dockerfile for production", "expected": "dockerfile-hardening"},
        {"task": "Write a blameless postmortem for the outage", "expected": "incident-postmortem"},
    ]
    (tasks / "release-notes.yaml").write_text(
        yaml.safe_dump({"train": ["a"], "holdout": ["b"], "routing": routing})
    )
    args = ("--skills", str(root))
    env = {"TASKS_DIR": str(tasks)}
    both = ingot(
        "propose", "release-notes", "--remove", "--from", str(root / "release-notes"), *args, cwd=tmp_path
    )
    assert both.returncode == 2 and "--remove" in both.stderr
    proposed = ingot(
        "propose", "release-notes", "--remove", "--note", "superseded", *args, cwd=tmp_path, **env
    )
    assert proposed.returncode == 0, proposed.stderr
    assert "removal change of release-notes" in proposed.stdout and "-> absent" in proposed.stdout
    assert "evaluated chg-" in proposed.stdout and "ready (removal change)" in proposed.stdout
    assert re.search(r"^  routing impact  pass +no other skill loses its routes", proposed.stdout, re.M)
    (entry,) = json.loads(ingot("pending", "--json", *args, cwd=tmp_path).stdout)
    assert entry["kind"] == "removal" and entry["to"] == "absent"
    live = ChangeControl(establish((root,)).path, (root,)).live_revision("release-notes")
    done = ingot("approve", "release-notes", "--change", entry["change"], *args, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith(f"removed release-notes (was {live[:12]})")
    assert not (root / "release-notes").exists()
    status = ingot("status", *args, cwd=tmp_path)
    assert status.returncode == 0 and "release-notes  absent  removed by Ingot" in status.stdout
    back = ingot("rollback", "release-notes", live[:12], "--live", "absent", *args, cwd=tmp_path)
    assert back.returncode == 0, back.stderr
    assert (root / "release-notes" / "SKILL.md").is_file()
    assert ingot("audit", "verify", cwd=tmp_path).returncode == 0


def test_approving_a_displaced_change_is_one_conflict_whether_or_not_another_waits(tmp_path, library_factory):
    root, control = setup(tmp_path, library_factory)
    args = ("--skills", str(root))
    seen = control.queue.get("release-notes").id
    newer, _ = control.propose(
        "release-notes", "optimizer", body_rewrite(root, "release-notes", "NEWER-RULE"), ready_body()
    )
    waiting = error_line(ingot("approve", "release-notes", "--change", seen, *args, cwd=tmp_path), 3)
    assert f"was displaced by {newer.id} (audit line" in waiting and f"is now {newer.id}" in waiting
    control.reject("release-notes", "not this one either", "ana", newer.id)
    none = error_line(ingot("approve", "release-notes", "--change", seen, *args, cwd=tmp_path), 3)
    assert f"was displaced by {newer.id}" in none and "'release-notes' has no pending change" in none
    status = ingot("status", *args, cwd=tmp_path)  # displaced and rejected: the archive agrees
    assert status.returncode == 0 and "ARCHIVE" not in status.stdout, status.stdout
    # The table `ingot --help` prints and docs/cli.md show say the same of code 3.
    meaning = dict(EXIT_CODES)[3]
    assert "displaced" in meaning and "whether or not another change waits" in meaning
    table = (REPO / "docs" / "cli.md").read_text()
    for code, said in EXIT_CODES:
        assert f"| {code} | {said} |" in table, code


def test_a_forged_archive_record_neither_blocks_a_genuine_approval_nor_passes_as_one(
    tmp_path, library_factory
):
    root, control = setup(tmp_path, library_factory)
    args = ("--skills", str(root))
    genuine = control.queue.get("release-notes")
    archive = control.queue.archive_folder / "release-notes"
    archive.mkdir(parents=True)
    forged = {"id": genuine.id, "archived_status": "approved", "archived_by": "mallory", "archived_at": "now"}
    (archive / f"{genuine.id}.json").write_text(json.dumps(forged))
    never = "chg-00000000abcd"  # an id no proposal ever had, "approved" by the same hand
    (archive / f"{never}.json").write_text(json.dumps({**forged, "id": never}))
    status = ingot("status", *args, cwd=tmp_path)
    assert status.returncode == 1, status.stdout  # said loudly, and believed by nothing
    loud = [line for line in status.stdout.splitlines() if line.startswith("ARCHIVE ")]
    assert len(loud) == 2 and all("says 'approved', but the audit chain holds no decision" in x for x in loud)
    passed = ingot("approve", "release-notes", "--change", never, *args, cwd=tmp_path)
    assert f"no change '{never}' was ever queued" in error_line(passed, 2)  # not "already approved"
    approved = ingot("approve", "release-notes", "--change", genuine.id, *args, cwd=tmp_path)
    assert approved.returncode == 0 and approved.stdout.startswith("promoted release-notes"), approved.stderr
    assert control.live_revision("release-notes") == genuine.candidate_revision
    again = error_line(ingot("approve", "release-notes", "--change", genuine.id, *args, cwd=tmp_path), 3)
    assert "already approved by " in again and "mallory" not in again and "(audit line" in again
