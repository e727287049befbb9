"""The guard under faults: a SIGKILL, or an EIO, at every fault point of one whole tick (keep,
restore, queue) never makes what the guard found approved or served, and the next tick settles
it: the folder holds the approved revision again and the edit is queued exactly once.

Scenarios: an agent's edit to a live skill, a folder planted in the root, a deleted skill,
hidden files added to a live folder, and a folder holding the approved bytes laid out otherwise
(a mode, an empty folder). Each tick runs in a forked child (killpoints.py) on a fresh
copy of the same prepared world; the parent inspects what the child left, then runs the next
tick itself."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from ingot.home import establish
from mcp_server.library import Library
from mcp_server.registry import Limits, Registry
from optimize.control.approved import MARKER, ApprovedRevisions, Pinned
from optimize.control.audit import AuditLog
from optimize.control.changes import ChangeControl
from optimize.control.guard import Guard
from optimize.control.promote import STAGE_PREFIX
from tests.conftest import BUNDLED_SKILLS
from tests.optimize.control import killpoints
from tests.optimize.control.test_promote import checked_out, laid_out

SKILL = "release-notes"
PLANTED = "kiln-firing"
GONE = "csv-data-cleaning"


def folder_bytes(folder: Path) -> dict[str, bytes] | None:
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def served(root: Path, home: Path, name: str) -> str | None:
    """What a pinned library serves for `name` right now: its SKILL.md text (None: not served)."""
    registry = Registry((root,))
    registry.reload()
    pin = Pinned(ApprovedRevisions(AuditLog(home)), home / "revisions", Limits(), home / MARKER)
    skill = pin(registry.skills(), (root,)).get(name)
    return (skill.folder / "SKILL.md").read_text() if skill else None


class Scenario:
    """A protected root (the bundled skills adopted as the baseline), then one thing done to it
    behind Ingot's back; `reset()` puts the world back to that moment, byte for byte."""

    def __init__(self, base: Path, found: str, embedder) -> None:
        self.base, self.found = base, found
        self.world, self.template = base / "w", base / "template"
        self.root = self.world / "skills"
        shutil.copytree(BUNDLED_SKILLS, self.root)
        checked_out(self.root)
        home = establish((self.root,))
        self.home = home.path
        library = Library((self.root,), embedder)
        library.reload()
        self.guard(library.similarity).adopt()
        self.name = {"planted": PLANTED, "deleted": GONE}.get(found, SKILL)
        self.approved = folder_bytes(self.root / self.name) if found != "planted" else None
        self.layout = laid_out(self.root / self.name) if found != "planted" else None
        self.approved_text = served(self.root, self.home, self.name)
        self.approvals = ApprovedRevisions(AuditLog(self.home)).current()
        description = self._act()
        # The similarity is computed once, here: the child never runs the embedding model.
        similarity = library.similarity(self.name, description)
        self.similar_to = lambda _name, _description: similarity
        library.stop_watching()
        shutil.copytree(self.world, self.template, symlinks=True)

    def _act(self) -> str:
        if self.found == "edited":
            skill_md = self.root / SKILL / "SKILL.md"
            skill_md.write_text(skill_md.read_text() + "\nAGENT-EDIT: skip the changelog.\n")
            return "Drafts release notes."  # unused: an edited description is not re-checked here
        if self.found == "planted":
            folder = self.root / PLANTED
            folder.mkdir()
            (folder / "SKILL.md").write_text(
                f"---\nname: {PLANTED}\ndescription: Plans glaze firing schedules for a ceramic kiln.\n"
                "---\n\nRamp slowly.\n"
            )
            return "Plans glaze firing schedules for a ceramic kiln."
        if self.found == "deleted":
            shutil.rmtree(self.root / GONE)
            return ""
        if self.found == "laid-out":  # the approved bytes, other modes and an empty folder
            (self.root / SKILL / "SKILL.md").chmod(0o755)
            (self.root / SKILL / "drafts").mkdir()
            return ""
        (self.root / SKILL / ".agent-notes").write_text("AGENT-EDIT: hidden instructions\n")
        (self.root / SKILL / "references").mkdir(exist_ok=True)
        (self.root / SKILL / "references" / ".cache").write_bytes(b"\x00hidden")
        return ""

    def guard(self, similar_to=None) -> Guard:
        control = ChangeControl(self.home, (self.root,), live_edits="quarantine")
        return Guard(control, similar_to or self.similar_to, settle_s=0, clock=lambda: 4e9)

    def reset(self) -> None:
        shutil.rmtree(self.world)
        shutil.copytree(self.template, self.world, symlinks=True)

    def check_nothing_unapproved(self, where: str) -> None:
        """Whatever the child left: the chain holds, nothing it found is approved or served."""
        audit = AuditLog(self.home)
        assert audit.verify().ok, (where, audit.verify().problem)
        approved = ApprovedRevisions(audit).current().get(self.name, "unapproved")
        baseline = self.approvals.get(self.name, "unapproved")
        # A planted folder is never approved: "approved absent" (None) once the guard removed it.
        assert approved == baseline or (baseline == "unapproved" and approved is None), where
        assert served(self.root, self.home, self.name) == self.approved_text, where

    def check_settled(self, where: str) -> None:
        """After one more tick in this process: the folder is approved again, the edit queued once."""
        guard = self.guard()
        events = guard.check()
        assert not [e for e in events if e.did == "failed"], (where, [str(e) for e in events])
        assert folder_bytes(self.root / self.name) == self.approved, where
        assert self.layout is None or laid_out(self.root / self.name) == self.layout, where
        assert not [p.name for p in self.root.iterdir() if p.name.startswith(STAGE_PREFIX)], where
        self.check_nothing_unapproved(where)
        entries = AuditLog(self.home).entries()
        intents = {e.seq for e in entries if str(e.get("action")).endswith("-intent")}
        assert intents <= {e.get("intent_seq") for e in entries if e.get("outcome")}, where
        pending = guard.control.pending()
        if self.found in ("edited", "planted"):
            assert [c.skill for c in pending] == [self.name], where
            assert b"AGENT-EDIT" in pending[0].files["SKILL.md"] or self.found == "planted", where
        else:
            assert pending == [], where
        kept = [k for k in guard.kept() if k.skill == self.name]
        assert len(kept) == (0 if self.found in ("deleted", "laid-out") else 1), (where, kept)
        if self.found == "hidden":
            assert (kept[0].path / "hidden" / ".agent-notes").read_bytes().startswith(b"AGENT-EDIT")
        assert guard.check() == [], where  # nothing left to do


SCENARIOS = ("edited", "planted", "deleted", "hidden", "laid-out")


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory, embedder) -> dict[str, Scenario]:
    return {found: Scenario(tmp_path_factory.mktemp(found), found, embedder) for found in SCENARIOS}


@pytest.mark.parametrize("found", SCENARIOS)
def test_a_tick_without_faults_keeps_restores_and_queues(scenarios, found):
    scenario = scenarios[found]
    scenario.reset()
    assert scenario.approved_text is None or "AGENT-EDIT" not in scenario.approved_text
    scenario.check_nothing_unapproved("before the tick")
    scenario.check_settled("one clean tick")


@pytest.mark.parametrize("found", SCENARIOS)
def test_sigkill_at_every_fault_point_of_a_guard_tick_never_approves_or_serves_what_it_found(
    scenarios, found
):
    scenario = scenarios[found]
    scenario.reset()
    names = killpoints.points(lambda: scenario.guard().check())
    assert any("switch" in n for n in names) and any("audit" in n for n in names), names
    for at, name in enumerate(names):
        scenario.reset()
        ended = killpoints.run(lambda: scenario.guard().check(), at, killpoints.KILL)
        where = f"killed at point {at} ({name})"
        assert ended.killed, (where, ended.traceback)
        scenario.check_nothing_unapproved(where)
        scenario.check_settled(where)


@pytest.mark.parametrize("found", SCENARIOS)
def test_eio_at_every_fault_point_of_a_guard_tick_is_reported_and_the_next_tick_settles_it(scenarios, found):
    scenario = scenarios[found]
    scenario.reset()
    names = killpoints.points(lambda: scenario.guard().check())

    def tick() -> None:
        events = scenario.guard().check()
        failed = [str(e) for e in events if e.did == "failed"]
        print("\n".join(failed))

    for at, name in enumerate(names):
        scenario.reset()
        ended = killpoints.run(tick, at, killpoints.EIO)
        where = f"EIO at point {at} ({name})"
        assert not ended.killed, where
        # Either the tick said it failed (a `failed` event, or an error naming the I/O error),
        # or it finished in spite of it: the fault hit a step that is allowed to fail.
        if ended.code != 0:
            assert "Input/output error" in ended.error, (where, ended.traceback)
            assert ended.error.split(":", 1)[0] in ("WriteFailed", "AuditError", "PromotionConflict"), (
                where,
                ended.traceback,
            )
        # A line that says what is still served names what MCP serves: the approved revision
        # (a planted folder: nothing), never what the guard found in the folder.
        approved = scenario.approvals.get(scenario.name) or "nothing"
        for said in re.findall(r"([0-9a-f]{12}|nothing) is still served", ended.stdout + ended.error):
            assert said == approved[:12], (where, ended.stdout, ended.error)
        scenario.check_nothing_unapproved(where)
        scenario.check_settled(where)


def test_an_aborted_restore_gives_approval_back_to_the_approved_revision_not_to_what_it_found(
    scenarios,
):
    """The rule itself, without a child: an intent to restore, settled as aborted."""
    from optimize.control.approved import approved_revisions

    scenario = scenarios["edited"]
    scenario.reset()
    audit = AuditLog(scenario.home)
    v1 = scenario.approvals[SKILL]
    before = audit.entries()
    intent = audit.append(
        action="restore-intent", skill=SKILL, from_revision="f" * 64, to_revision=v1, actor="t"
    )
    audit.append(
        action="restore",
        skill=SKILL,
        from_revision="f" * 64,
        to_revision=v1,
        actor="t",
        outcome="aborted (interrupted before the switch)",
        intent_seq=intent.seq,
    )
    assert approved_revisions(audit.entries())[SKILL] == v1
    planted = audit.append(action="restore-intent", skill="x-new", from_revision="e" * 64, actor="t")
    audit.append(
        action="restore",
        skill="x-new",
        from_revision="e" * 64,
        actor="t",
        outcome="aborted (interrupted before the switch)",
        intent_seq=planted.seq,
    )
    assert "x-new" not in approved_revisions(audit.entries())
    assert len(audit.entries()) == len(before) + 4
    assert os.path.exists(scenario.home / "audit.jsonl")
