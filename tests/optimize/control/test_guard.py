"""Protected live roots (LIVE_EDITS=quarantine) on real files, real kills and a real `ingot serve`:
an edit made straight to a live skill is kept, the approved revision restored and the edit
queued, the served library never hands out an unapproved revision, and a SIGKILL at any step of
a restore leaves the approved revision served."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ingot.errors import PromotionError
from ingot.home import establish
from mcp_server.library import Library
from mcp_server.registry import Limits, Registry
from optimize.control.approved import MARKER, ApprovedRevisions, Pinned
from optimize.control.audit import AuditLog
from optimize.control.changes import ChangeControl
from optimize.control.guard import Guard
from optimize.control.lock import change_lock
from optimize.control.promote import Promoter, tree_revision
from tests.conftest import BUNDLED_SKILLS, free_port, wait_for
from tests.optimize.conftest import ready_body
from tests.optimize.control.test_promote import (
    SCRIPT,
    as_approved,
    checked_out,
    laid_out,
    run_child,
    skill_files,
)

SKILL = "release-notes"


class Clock:
    now = 2e9

    def __call__(self) -> float:
        return self.now


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def world(tmp_path, embedder):
    """A protected root: change control in quarantine mode, a pinned served library, a guard."""
    root = tmp_path / "lib" / "skills"
    checked_out(shutil.copytree(BUNDLED_SKILLS, root))
    home = establish((root,))
    pin = Pinned(
        ApprovedRevisions(AuditLog(home.path)), home.path / "revisions", Limits(), home.path / MARKER
    )
    library = Library((root,), embedder, pin=pin)
    library.reload()
    control = ChangeControl(home.path, home.roots, neighbours=library.current, live_edits="quarantine")
    guard = Guard(control, library.similarity, settle_s=0, clock=Clock())
    assert {e.did for e in guard.adopt()} == {"adopted"}
    library.reload()
    return root, control, library, guard


def test_a_direct_edit_is_never_served_and_is_kept_restored_and_queued(world):
    root, control, library, guard = world
    approved = folder_bytes(root / SKILL)
    revision = library.get(SKILL).revision
    skill_md = root / SKILL / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nAGENT-EDIT: skip the changelog.\n")
    library.reload()
    served = library.get(SKILL)
    assert served.revision == revision and "AGENT-EDIT" not in served.body  # the approved snapshot
    assert b"AGENT-EDIT" not in library.read_file(SKILL, "SKILL.md")
    events = guard.check()
    assert [e.did for e in events] == ["restored", "queued"]
    assert folder_bytes(root / SKILL) == approved  # the folder harnesses read is approved again
    change = control.queue.get(SKILL)
    assert change.source == "direct-edit" and change.kind == "body"
    assert change.champion_revision == revision and "AGENT-EDIT" in change.files["SKILL.md"].decode()
    history = [(e.get("action"), e.get("actor")) for e in control.history(SKILL)]
    assert ("restore", "ingot-guard") in history and ("propose", "direct-edit") in history
    [kept] = guard.kept()
    assert kept.status == "queued" and kept.change_id == change.id
    assert b"AGENT-EDIT" in (kept.path / "files" / "SKILL.md").read_bytes()
    assert guard.check() == []  # settled: nothing left to do
    library.reload()
    assert library.get(SKILL).folder == root / SKILL  # served from its folder again


def test_a_new_folder_is_not_served_until_approved_and_a_deleted_one_is_served_from_its_snapshot(world):
    root, control, library, guard = world
    new = root / "kiln-firing"
    new.mkdir()
    (new / "SKILL.md").write_text(
        "---\nname: kiln-firing\ndescription: Plans glaze firing schedules for a ceramic kiln.\n"
        "---\n\nRamp slowly.\n"
    )
    gone = folder_bytes(root / "csv-data-cleaning")
    shutil.rmtree(root / "csv-data-cleaning")
    library.reload()
    assert "kiln-firing" not in library.skills() and "csv-data-cleaning" in library.skills()
    events = {(e.skill, e.did) for e in guard.check()}
    assert events == {
        ("kiln-firing", "restored"),
        ("kiln-firing", "queued"),
        ("csv-data-cleaning", "restored"),
    }
    assert not new.exists() and folder_bytes(root / "csv-data-cleaning") == gone
    change = control.queue.get("kiln-firing")
    assert change.kind == "create" and change.source == "direct-edit"


def test_a_broken_folder_is_kept_byte_for_byte_and_restored_and_nothing_is_queued(world):
    root, control, library, guard = world
    approved = folder_bytes(root / SKILL)
    (root / SKILL / "SKILL.md").write_bytes(b"\x00\x01 not a skill")
    library.reload()
    assert SKILL in library.skills()
    assert [e.did for e in guard.check()] == ["restored"]
    assert folder_bytes(root / SKILL) == approved and control.pending() == []
    [kept] = guard.kept()
    assert (
        kept.status == "invalid"
        and (kept.path / "files" / "SKILL.md").read_bytes() == b"\x00\x01 not a skill"
    )


def test_an_edit_still_being_written_waits_and_the_library_serves_the_approved_revision_meanwhile(world):
    root, control, library, guard = world
    guard.settle_s, guard.clock = 60, Clock()
    skill_md = root / SKILL / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nhalf")
    guard.clock.now = os.stat(skill_md).st_mtime + 1
    waiting = guard.check()
    assert [(e.skill, e.did) for e in waiting] == [(SKILL, "waiting")] and "half" in skill_md.read_text()
    assert f"served at {library.get(SKILL).revision[:12]}" in waiting[0].detail
    library.reload()
    assert "half" not in library.get(SKILL).body
    guard.clock.now += 120
    assert [e.did for e in guard.check()] == ["restored", "queued"]


def test_a_promotion_is_served_at_once_and_protected_like_the_baseline(world):
    root, control, library, guard = world
    files = control.champion_files(SKILL)
    files["SKILL.md"] += b"\nAPPROVED-MARK: group by theme.\n"
    change, _ = control.propose(SKILL, "operator", files, ready_body())
    control.approve(SKILL, "reviewer", change.id)
    library.reload()
    assert "APPROVED-MARK" in library.get(SKILL).body  # the intent line approved it before the switch
    promoted = folder_bytes(root / SKILL)
    (root / SKILL / "SKILL.md").write_text("---\nname: release-notes\ndescription: Hijacked.\n---\n\nNo.\n")
    assert [e.did for e in guard.check()][0] == "restored"
    assert folder_bytes(root / SKILL) == promoted  # back to the promoted revision, not the baseline


def _ab() -> dict:
    from tests.optimize.conftest import ab

    return ab([0.2, 0.3, 0.2, 0.3, 0.25], [0.9, 0.8, 0.9, 0.85, 0.9])


# -- SIGKILL at every step of a restore -------------------------------------------------------


def protected(base: Path, found: str) -> tuple[Path, Path, str, str]:
    """A root with alpha created by Ingot (approved v1), then changed behind its back: `found`."""
    shutil.rmtree(base, ignore_errors=True)
    root, runs = base / "skills", base / "runs"
    root.mkdir(parents=True)
    v1 = skill_files("version one", {"notes/a.txt": b"A1"})
    with change_lock(runs):
        Promoter(runs).switch("alpha", root, v1, expected_from=None, action="create", actor="test")
    (runs / MARKER).write_text("{}")
    if found == "edited":
        (root / "alpha" / "SKILL.md").write_bytes(skill_files("agent edit")["SKILL.md"])
        (root / "alpha" / "notes" / "extra.txt").write_bytes(b"new file")
    elif found == "invalid":
        (root / "alpha" / "SKILL.md").write_bytes(b"\x00 broken")
    elif found == "deleted":
        shutil.rmtree(root / "alpha")
    return root, runs, tree_revision(v1), v1["SKILL.md"].decode()


def served_alpha(root: Path, runs: Path) -> str | None:
    """What a pinned library serves for alpha right now: its SKILL.md text."""
    registry = Registry((root,))
    registry.reload()
    pin = Pinned(ApprovedRevisions(AuditLog(runs)), runs / "revisions", Limits(), runs / MARKER)
    skill = pin(registry.skills(), (root,)).get("alpha")
    return (skill.folder / "SKILL.md").read_text() if skill else None


@pytest.mark.parametrize("found", ["edited", "invalid", "deleted"])
def test_sigkill_at_every_step_of_a_restore_leaves_the_approved_revision_served(tmp_path, found):
    base = tmp_path / "w"
    root, runs, v1, v1_text = protected(base, found)
    dry = run_child(runs, root, "restore", v1, -1)
    assert dry.returncode == 0, dry.stderr
    approved_bytes = folder_bytes(root / "alpha")
    steps = json.loads(dry.stdout)
    assert any("switch" in s for s in steps) and len(steps) >= 6
    for kill_at in range(len(steps)):
        root, runs, v1, v1_text = protected(base, found)
        before = folder_bytes(root / "alpha") if (root / "alpha").exists() else None
        killed = run_child(runs, root, "restore", v1, kill_at)
        assert killed.returncode == -9, (kill_at, steps[kill_at], killed.stderr)
        assert served_alpha(root, runs) == v1_text, steps[kill_at]  # served: the approved revision
        # ...and the folder harnesses read directly holds one whole tree: what was found, or v1.
        now = folder_bytes(root / "alpha") if (root / "alpha").exists() else None
        assert now in (before, approved_bytes), steps[kill_at]
        assert AuditLog(runs).verify().ok, steps[kill_at]
        with change_lock(runs, wait_s=5):
            promoter = Promoter(runs)
            promoter.recover((root,))
            try:
                disk = promoter.live_revision(root, "alpha")
            except Exception:  # noqa: BLE001 - a broken folder: the guard restores it next
                disk = None
            if disk != v1:  # killed before the switch: the next tick restores
                promoter.restore("alpha", root, v1, actor="test", reason="after the kill")
        assert Promoter(runs).live_revision(root, "alpha") == v1, steps[kill_at]
        assert served_alpha(root, runs) == v1_text
        assert not [p.name for p in root.iterdir() if p.name.startswith(".")], steps[kill_at]
        entries = AuditLog(runs).entries()
        intents = {e.seq for e in entries if str(e.get("action")).endswith("-intent")}
        assert intents <= {e.get("intent_seq") for e in entries if e.get("outcome")}


# -- a real serving process -------------------------------------------------------------------


def test_ingot_serve_in_quarantine_mode_never_hands_an_agent_its_own_unapproved_edit(tmp_path):
    from fastmcp import Client

    root = tmp_path / "lib" / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    approved = folder_bytes(root / SKILL)
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k != "INGOT_HOME"},
        "HF_HUB_OFFLINE": "1",
        "LIVE_EDITS": "quarantine",
        "INBOX_SETTLE_S": "0.3",
        "AUTOPILOT_TICK_S": "0.2",
    }
    log = tmp_path / "serve.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ingot.cli",
            "serve",
            "--no-ui",
            "--skills",
            str(root),
            "--mcp-port",
            str(port),
        ],
        cwd=tmp_path,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )

    async def loaded() -> str:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            result = await client.call_tool("get_skill", {"name": SKILL})
            return json.dumps(result.structured_content)

    def up() -> str | None:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            return asyncio.run(loaded())
        except Exception:  # noqa: BLE001 - not listening yet
            return None

    try:
        assert "AGENT-EDIT" not in wait_for(up, timeout=60, interval=0.2)
        home = establish((root,))
        wait_for(lambda: (home.path / MARKER).exists(), timeout=30)
        skill_md = root / SKILL / "SKILL.md"
        skill_md.write_text(skill_md.read_text() + "\nAGENT-EDIT: skip the changelog.\n")
        control = ChangeControl(home.path, home.roots)

        def settled():
            assert "AGENT-EDIT" not in asyncio.run(loaded())  # never served, at any moment
            change = control.queue.get(SKILL)
            return change if change is not None and folder_bytes(root / SKILL) == approved else None

        change = wait_for(settled, timeout=90, interval=0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    assert change.source == "direct-edit" and "AGENT-EDIT" in change.files["SKILL.md"].decode()


def test_a_deleted_protection_marker_serves_nothing_unapproved_and_adopts_no_new_baseline(world):
    """protected.json only mirrors the chain's `protect` line: deleting it does not unpin the
    served library, and the next tick writes it again without adopting what it finds."""
    root, control, library, guard = world
    approved = library.get(SKILL).revision
    (control.runs_dir / MARKER).unlink()
    skill_md = root / SKILL / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nAGENT-EDIT: skip the changelog.\n")
    planted = root / "kiln-firing"
    planted.mkdir()
    (planted / "SKILL.md").write_text(
        "---\nname: kiln-firing\ndescription: Plans glaze firing schedules for a ceramic kiln.\n"
        "---\n\nRamp.\n"
    )
    library.reload()
    assert library.get(SKILL).revision == approved and "AGENT-EDIT" not in library.get(SKILL).body
    assert "kiln-firing" not in library.skills()
    events = guard.check()
    assert not [e for e in events if e.did == "adopted"], [str(e) for e in events]
    assert (control.runs_dir / MARKER).exists()
    approvals = control.approvals.current()
    assert approvals[SKILL] == approved and approvals.get("kiln-firing") is None
    library.reload()
    assert "kiln-firing" not in library.skills() and "AGENT-EDIT" not in library.get(SKILL).body
    assert [a for a in (e.get("action") for e in control.audit.entries()) if a == "protect"] == ["protect"]


def _forge_approval(chain: Path, skill: str, old: str, new: str) -> None:
    """Write `new` over `old` in the skill's adopt line, without the key (the MAC no longer fits)."""
    lines = chain.read_text().splitlines(keepends=True)
    at = next(i for i, raw in enumerate(lines) if '"adopt"' in raw and f'"{skill}"' in raw and old in raw)
    lines[at] = lines[at].replace(old, new)
    chain.write_text("".join(lines))


def _route_cli(root: Path, cwd: Path) -> tuple[dict, str]:
    from tests.ingot.cli.test_main import ingot

    done = ingot(
        "route",
        "--skills",
        str(root),
        "--json",
        "Draft release notes for v3.1",
        cwd=cwd,
        LIVE_EDITS="quarantine",
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout), done.stderr


def test_an_audit_line_forged_without_the_key_approves_nothing(world, tmp_path):
    """Only a chain that verifies approves: an adopt line rewritten to name an agent's edit is
    not believed by the serving library nor by a fresh `ingot route`, and neither is a state
    home stripped of its chain, key and marker (the claim beside the root remembers it)."""
    root, control, library, _ = world
    approved = library.get(SKILL).revision
    skill_md = root / SKILL / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nAGENT-EDIT: skip the changelog.\n")
    edited = tree_revision(folder_bytes(root / SKILL))
    _forge_approval(control.audit.path, SKILL, approved, edited)
    assert not control.audit.verify().ok
    library.reload()
    assert library.get(SKILL).revision == approved and "AGENT-EDIT" not in library.get(SKILL).body
    decision, stderr = _route_cli(root, tmp_path)
    assert decision.get("revision") != edited and "does not verify" in stderr
    for name in ("audit.jsonl", "audit.head", "audit.key", MARKER):
        (control.runs_dir / name).unlink()
    decision, stderr = _route_cli(root, tmp_path)
    assert decision.get("revision") != edited and "does not verify" in stderr


def test_a_restore_the_system_refuses_names_the_error_the_folder_and_what_to_do_and_the_next_tick_restores(
    world,
):
    """renameat2 failing for a reason other than an unsupported filesystem (here a real ENOENT:
    the staged copy vanishes just before the switch) is a failed write, not "the filesystem may not
    support it": the errno text, the live folder, what is still served and what to do."""
    from ingot import faults
    from optimize.control.promote import STAGE_PREFIX

    root, control, library, guard = world
    approved = folder_bytes(root / SKILL)
    skill_md = root / SKILL / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\nAGENT-EDIT: skip the changelog.\n")

    def lose_the_stage(step: str) -> None:
        if step == "switch: rename":
            for stage in root.glob(f"{STAGE_PREFIX}*"):
                shutil.rmtree(stage)

    faults.install(lose_the_stage)
    try:
        events = guard.check()
    finally:
        faults.install(None)
    failed = [str(e) for e in events if e.did == "failed"]
    assert len(failed) == 1, [str(e) for e in events]
    line = failed[0]
    assert "may not support" not in line, line
    assert f"No such file or directory ({root / SKILL})" in line, line
    assert "Nothing was changed" in line and "is still served" in line and "then retry" in line, line
    # The next tick settles the interrupted restore and finishes the job.
    assert [e.did for e in guard.check()][-2:] == ["restored", "queued"]
    assert folder_bytes(root / SKILL) == approved


# -- the whole folder: bytes, modes, hidden entries, empty folders, links ---------------------


def files_of(folder: Path) -> dict[str, bytes]:
    """The files a revision of `folder` names: every regular non-hidden file, by path."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
        and not p.is_symlink()
        and not any(x.startswith(".") for x in p.relative_to(folder).parts)
    }


def served_revisions(root: Path, home: Path) -> dict[str, str]:
    """What a pinned library (MCP's) serves: each skill's revision."""
    registry = Registry((root,))
    registry.reload()
    pin = Pinned(ApprovedRevisions(AuditLog(home)), home / "revisions", Limits(), home / MARKER)
    return {name: skill.revision for name, skill in pin(registry.skills(), (root,)).items()}


def test_the_guard_holds_every_folder_to_its_approved_bytes_and_layout_and_says_at_only_when_true(tmp_path):
    """The approved revision names bytes; its folder is those bytes laid out as promote/ writes
    them (a `#!` file 0755, any other 0644, folders 0755, nothing hidden, no empty folder, no
    link). Each kind is added, changed, chmodded or deleted behind Ingot's back; after one `ingot
    guard` every folder is exactly that again (bytes and modes, checked by a walk of the whole
    folder), the guard said what it found, MCP served the approved revision throughout, and "at
    its approved revision" is printed only by the run that finds nothing."""
    from tests.ingot.cli.test_main import ingot

    root = tmp_path / "lib" / "skills"
    checked_out(shutil.copytree(BUNDLED_SKILLS, root))
    for name in ("release-notes", "csv-data-cleaning", "dockerfile-hardening"):
        (root / name / "scripts").mkdir(mode=0o755)
        (root / name / "scripts" / "run.sh").write_bytes(SCRIPT)
        (root / name / "scripts" / "notes.txt").write_bytes(b"plain notes\n")
        (root / name / "scripts" / "run.sh").chmod(0o755)
    templates = root / "python-packaging" / "templates"
    shutil.copyfile(templates / "pyproject.toml", templates / "copy.toml")
    # When protection starts, some folders hold what their revision's layout does not.
    (root / "release-notes" / "scripts" / "run.sh").chmod(0o644)  # a script that cannot run
    (root / "release-notes" / ".notes").write_text("hidden notes\n")
    (root / "release-notes" / "drafts").mkdir()
    (root / "csv-data-cleaning" / "scripts" / "notes.txt").chmod(0o755)
    (root / "git-commit-messages" / ".notes").write_text("deleted before the guard looks\n")
    approved = {folder.name: files_of(folder) for folder in root.iterdir()}
    home = establish((root,)).path

    def guard() -> list[str]:
        done = ingot(
            "guard", "--skills", str(root), cwd=tmp_path, LIVE_EDITS="quarantine", INBOX_SETTLE_S="0"
        )
        assert done.returncode == 0 and "Traceback" not in done.stderr, (done.stdout, done.stderr)
        return [line for line in done.stdout.splitlines() if not line.startswith(("direct edits", "  kept"))]

    def status() -> dict:
        """`ingot status --json` under quarantine; its exit code agrees with its "ok"."""
        done = ingot("status", "--json", "--skills", str(root), cwd=tmp_path, LIVE_EDITS="quarantine")
        report = json.loads(done.stdout)
        assert done.returncode == (0 if report["ok"] else 1), (done.stdout, done.stderr)
        return report

    def held(said: list[str], found: dict[str, str], where: str) -> None:
        """Each skill in `found` was restored saying that; the others were not touched; every
        folder is its approved revision, laid out; the approvals never moved."""
        restored = {line.split(" ", 1)[0]: line for line in said if " restored: " in line}
        assert set(restored) == set(found), (where, said)
        for name, words in found.items():
            assert f"restored: at {approvals[name][:12]}; " in restored[name] and words in restored[name], (
                where,
                restored[name],
            )
        assert ("every live skill is at its approved revision" in said) == (not found), (where, said)
        for name, files in approved.items():
            assert laid_out(root / name) == as_approved(files), (where, name)
        assert ApprovedRevisions(AuditLog(home)).current() == approvals, where
        assert served_revisions(root, home) == approvals, where

    assert {line.split(" ", 2)[1] for line in guard()} == {"adopted:"}
    approvals = dict(ApprovedRevisions(AuditLog(home)).current())
    assert approvals == {name: tree_revision(files) for name, files in approved.items()}
    (root / "git-commit-messages" / ".notes").unlink()  # gone before any check: nothing to do there
    held(
        guard(),
        {
            "release-notes": "hidden files (.notes)",
            "csv-data-cleaning": "laid out otherwise: scripts/notes.txt mode 0755, not 0644",
        },
        "the first check after the baseline",
    )
    assert (home / "direct-edits" / "release-notes").exists()  # the hidden file was kept aside

    changes = {  # chmods and additions; every skill's files stay its approved revision's bytes
        "release-notes": (lambda f: (f / ".notes").write_text("new hidden notes\n"), "hidden files (.notes)"),
        "csv-data-cleaning": (
            lambda f: (f / "scripts" / "run.sh").chmod(0o644),
            "laid out otherwise: scripts/run.sh mode 0644, not 0755",
        ),
        "dockerfile-hardening": (
            lambda f: (f / "scripts" / "notes.txt").chmod(0o755),
            "laid out otherwise: scripts/notes.txt mode 0755, not 0644",
        ),
        "git-commit-messages": (
            lambda f: (f / "drafts").mkdir(),
            "laid out otherwise: folder drafts/ holds no file of the revision",
        ),
        "incident-postmortem": (
            lambda f: (f / "SKILL.md").chmod(0o755),
            "laid out otherwise: SKILL.md mode 0755, not 0644",
        ),
        "postgres-query-tuning": (
            lambda f: (f / "SKILL.md").chmod(0o600),
            "laid out otherwise: SKILL.md mode 0600, not 0644",
        ),
        "python-packaging": (
            lambda f: (
                (f / "templates" / "copy.toml").unlink(),
                (f / "templates" / "copy.toml").symlink_to("pyproject.toml"),
            ),
            "laid out otherwise: templates/copy.toml is a link, not a file",
        ),
    }
    for name, (change, _) in changes.items():
        change(root / name)
    assert served_revisions(root, home) == approvals  # MCP serves the approved revision meanwhile
    # `ingot status` says the same before the guard runs: not "ok", and exit 1 under quarantine.
    shown = status()
    assert shown["ok"] is False, shown
    assert {s["name"]: s["state"] for s in shown["skills"] if s["state"] != "ok"} == {
        name: "laid-out-otherwise" for name in changes
    }
    for name, (_, words) in changes.items():
        said = "; ".join(next(s["layout"] for s in shown["skills"] if s["name"] == name))
        assert words.removeprefix("laid out otherwise: ").removeprefix("hidden files (").rstrip(")") in said
    held(guard(), {name: words for name, (_, words) in changes.items()}, "chmods and additions")
    shown = status()
    assert shown["ok"] is True and {s["state"] for s in shown["skills"]} == {"ok"}, shown

    changes = {  # edits and deletions
        "release-notes": (
            lambda f: (
                (f / "scripts" / ".cache").mkdir() or (f / "scripts" / ".cache" / "state").write_bytes(b"x")
            ),
            "hidden files (scripts/.cache)",
        ),
        "csv-data-cleaning": (
            lambda f: (f / "scripts" / "run.sh").write_bytes(b"echo no interpreter line\n"),
            "out-of-band edit (edited)",
        ),
        "dockerfile-hardening": (lambda f: (f / "scripts" / "run.sh").unlink(), "out-of-band edit (edited)"),
        "git-commit-messages": (
            lambda f: (f / "SKILL.md").unlink(),
            "out-of-band edit (invalid (no SKILL.md",
        ),
        "incident-postmortem": (
            lambda f: (
                (f / "SKILL.md").write_bytes((f / "SKILL.md").read_bytes() + b"\nEdited.\n")
                or (f / "SKILL.md").chmod(0o755)
            ),
            "out-of-band edit (edited)",
        ),
        "postgres-query-tuning": (
            lambda f: (f / "a" / "b").mkdir(parents=True),
            "laid out otherwise: folder a/ holds no file of the revision; folder a/b/ holds no file",
        ),
        "python-packaging": (
            lambda f: (f / "templates" / "empty").mkdir(),
            "laid out otherwise: folder templates/empty/ holds no file of the revision",
        ),
    }
    for name, (change, _) in changes.items():
        change(root / name)
    assert served_revisions(root, home) == approvals
    held(guard(), {name: words for name, (_, words) in changes.items()}, "edits and deletions")
    assert held(guard(), {}, "nothing changed since") is None


def test_sigkill_at_every_step_of_a_restore_that_fixes_only_modes_and_folders_is_settled_by_what_is_on_disk(
    tmp_path,
):
    """A restore that keeps the revision (the files were the approved bytes, laid out otherwise)
    cannot be settled by the revision alone: recovery calls it done only if the folder is laid
    out as the revision now, aborted otherwise, and the next restore finishes it."""
    base = tmp_path / "w"
    v1 = skill_files("version one", {"scripts/run.sh": SCRIPT})

    def prepare() -> tuple[Path, Path]:
        shutil.rmtree(base, ignore_errors=True)
        root, runs = base / "skills", base / "runs"
        root.mkdir(parents=True)
        with change_lock(runs):
            Promoter(runs).switch("alpha", root, v1, expected_from=None, action="create", actor="test")
        (runs / MARKER).write_text("{}")
        (root / "alpha" / "scripts" / "run.sh").chmod(0o644)
        (root / "alpha" / "drafts").mkdir()
        return root, runs

    root, runs = prepare()
    found, approved = laid_out(root / "alpha"), as_approved(v1)
    assert found != approved
    dry = run_child(runs, root, "restore", tree_revision(v1), -1)
    assert dry.returncode == 0, dry.stderr
    assert laid_out(root / "alpha") == approved
    steps = json.loads(dry.stdout)
    assert any("switch" in s for s in steps), steps
    outcomes = set()
    for kill_at in range(len(steps)):
        root, runs = prepare()
        killed = run_child(runs, root, "restore", tree_revision(v1), kill_at)
        assert killed.returncode == -9, (kill_at, steps[kill_at], killed.stderr)
        now = laid_out(root / "alpha")
        assert now in (found, approved), steps[kill_at]  # one whole tree
        assert served_alpha(root, runs) == v1["SKILL.md"].decode(), steps[kill_at]
        with change_lock(runs, wait_s=5):
            promoter = Promoter(runs)
            promoter.recover((root,))
            settled = [e for e in AuditLog(runs).entries() if e.get("actor") == "ingot-recovery"]
            if settled:
                said = str(settled[-1].get("outcome"))
                assert said.startswith("done" if now == approved else "aborted"), (steps[kill_at], said)
                outcomes.add(said.split(" ", 1)[0])
            if laid_out(root / "alpha") != approved:  # what the guard's next tick does
                promoter.restore("alpha", root, tree_revision(v1), actor="test", reason="after the kill")
            else:
                with pytest.raises(PromotionError, match="already at its approved revision"):
                    promoter.restore("alpha", root, tree_revision(v1), actor="test", reason="nothing to do")
        assert laid_out(root / "alpha") == approved, steps[kill_at]
        assert not [p.name for p in root.iterdir() if p.name.startswith(".")], steps[kill_at]
        entries = AuditLog(runs).entries()
        intents = {e.seq for e in entries if str(e.get("action")).endswith("-intent")}
        assert intents <= {e.get("intent_seq") for e in entries if e.get("outcome")}
    assert outcomes == {"done", "aborted"}  # kills on both sides of the switch were settled
