"""Every way into the queue under SIGKILL at each of its fault points: `ingot propose` (displacing
a waiting change, and withheld behind a better one), `ingot evaluate`'s new evidence and
`create_skill`. Whatever instant the kill hits, after recovery a pending record is pending only
if the chain holds its line (so it stays approvable), and the change it displaced is archived
only if the chain says so. The inbox's pass, and `ingot propose` under EIO too, are
test_inbox_faults.py's.

Each writer runs in a forked child (killpoints.py) on a fresh copy of one prepared world."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from ingot.home import establish
from mcp_server.library import Library
from optimize.control.audit import AuditLog
from optimize.control.changes import ChangeControl
from optimize.control.pending import PendingChange
from optimize.control.quarantine import agent_candidate
from tests.conftest import BUNDLED_SKILLS
from tests.optimize.conftest import body_rewrite, ready_body, replay_blocked
from tests.optimize.control import killpoints

SKILL = "release-notes"
AGENT_SKILL = "kiln-firing"
AGENT_DESCRIPTION = "Plans glaze firing schedules for a ceramic kiln."


class World:
    """The bundled skills under change control, with `prepare` done to them; `reset()` puts the
    world back to that moment."""

    def __init__(self, base: Path, embedder, prepare: Callable[[World], None]) -> None:
        self.base, self.world, self.template = base, base / "w", base / "template"
        self.root = self.world / "skills"
        shutil.copytree(BUNDLED_SKILLS, self.root)
        self.home = establish((self.root,)).path
        library = Library((self.root,), embedder)
        library.reload()
        # Computed here, once: the child never runs the embedding model.
        self._similar = {
            SKILL: library.similarity(SKILL, library.get(SKILL).description),
            AGENT_SKILL: library.similarity(AGENT_SKILL, AGENT_DESCRIPTION),
        }
        library.stop_watching()
        prepare(self)
        shutil.copytree(self.world, self.template, symlinks=True)

    def similar_to(self, name: str, _description: str):  # noqa: ANN201 - a Similarity
        return self._similar[name]

    def control(self) -> ChangeControl:
        return ChangeControl(self.home, (self.root,))

    def reset(self) -> None:
        shutil.rmtree(self.world)
        shutil.copytree(self.template, self.world, symlinks=True)

    def lines(self, change_id: str) -> list[str]:
        return [
            str(e.get("action")) for e in AuditLog(self.home).entries() if e.get("change_id") == change_id
        ]

    def settled(self, where: str) -> tuple[ChangeControl, list[PendingChange]]:
        """Recovery, as the next command runs it; then every pending record is approvable as far
        as the chain goes, and nothing is left staged."""
        control = self.control()
        control.recover()
        assert AuditLog(self.home).verify().ok, where
        assert control.queue.staged() == [], where
        pending = control.pending()
        for change in pending:
            control.verifier.check_proposed(change)  # raises if the chain does not hold it
        return control, pending


def waiting(world: World, measurements: dict | None = None, marker: str = "WAITING-MARK") -> None:
    control = world.control()
    control.propose(SKILL, "operator", body_rewrite(world.root, SKILL, marker), measurements or ready_body())


@pytest.fixture(scope="module")
def worlds(tmp_path_factory, embedder) -> dict[str, World]:
    prepare = {
        "propose": waiting,
        "withheld": waiting,
        "evaluate": waiting,
        "create_skill": lambda world: None,
    }
    return {name: World(tmp_path_factory.mktemp(name), embedder, how) for name, how in prepare.items()}


def every_kill(world: World, action: Callable[[], object], check: Callable[[str], None]) -> int:
    world.reset()
    names = killpoints.points(action)
    assert any(n.startswith("audit") for n in names), names
    for at, name in enumerate(names):
        world.reset()
        ended = killpoints.run(action, at, killpoints.KILL)
        assert ended.killed, (at, name, ended.traceback)
        check(f"killed at point {at} ({name})")
    return len(names)


def test_propose_killed_anywhere_leaves_the_new_change_or_the_displaced_one_pending(worlds):
    world = worlds["propose"]
    world.reset()
    first = world.control().queue.get(SKILL).id

    def propose() -> None:
        world.control().propose(SKILL, "operator", body_rewrite(world.root, SKILL, "NEW-MARK"), ready_body())

    def check(where: str) -> None:
        control, pending = world.settled(where)
        [change] = pending
        if change.id == first:  # the new change never reached the chain: the first still waits
            assert control.queue.decided(SKILL, first) is None, where
            assert control.queue.archived(SKILL) == [], where
        else:
            assert b"NEW-MARK" in change.files["SKILL.md"], where
            assert world.lines(change.id) == ["propose"], where
            assert control.queue.decided(SKILL, first)["archived_status"] == "displaced", where

    assert every_kill(world, propose, check) > 20


def test_a_withheld_proposal_killed_anywhere_never_displaces_the_ready_change(worlds):
    world = worlds["withheld"]
    world.reset()
    first = world.control().queue.get(SKILL).id

    def propose() -> None:
        blocked = {**ready_body(), **replay_blocked()}
        world.control().propose(SKILL, "operator", body_rewrite(world.root, SKILL, "WORSE-MARK"), blocked)

    def check(where: str) -> None:
        control, pending = world.settled(where)
        assert [c.id for c in pending] == [first], where
        archived = control.queue.archived(SKILL)
        assert all(r["archived_status"] == "withheld" for r in archived), where
        proposed = [e for e in AuditLog(world.home).entries() if e.get("change_id") not in (None, first)]
        assert len(archived) == len(proposed), where  # archived as withheld exactly when audited

    every_kill(world, propose, check)


def test_new_evidence_killed_anywhere_leaves_the_change_on_audited_evidence(worlds):
    world = worlds["evaluate"]
    world.reset()
    change = world.control().queue.get(SKILL)

    def evaluate() -> None:
        world.control().attach_evidence(SKILL, change.id, ready_body([0.1, 0.1, 0.1, 0.1]), "operator")

    def check(where: str) -> None:
        _, pending = world.settled(where)
        [now] = pending
        assert now.id == change.id, where
        if world.lines(change.id) == ["propose"]:
            assert now.evidence_digest == change.evidence_digest, where
        else:
            assert world.lines(change.id) == ["propose", "evidence"], where
            assert now.evidence_digest != change.evidence_digest, where

    every_kill(world, evaluate, check)


def test_create_skill_killed_anywhere_is_queued_with_its_line_or_not_at_all(worlds):
    world = worlds["create_skill"]

    def create() -> None:
        agent_candidate(
            world.control(),
            AGENT_SKILL,
            AGENT_DESCRIPTION,
            "Ramp slowly.\n",
            world.similar_to,
            note="client a",
        )

    def check(where: str) -> None:
        control, pending = world.settled(where)
        if pending:
            [change] = pending
            assert (change.skill, change.kind, change.source) == (AGENT_SKILL, "create", "agent"), where
            assert world.lines(change.id) == ["propose"], where
        else:
            assert not [e for e in AuditLog(world.home).entries() if e.get("action") == "propose"], where
            create()  # the agent's retry goes through
            assert [c.skill for c in control.pending()] == [AGENT_SKILL], where

    every_kill(world, create, check)


class _Neighbours:
    """The served library's answer, computed once in the parent (the child runs no model)."""

    def __init__(self, similarity) -> None:  # noqa: ANN001 - a Similarity
        self._similarity = similarity

    def similarity(self, _name: str, _description: str):  # noqa: ANN201
        return self._similarity


def test_an_io_error_at_any_point_of_an_approval_is_one_line_that_says_what_is_served(worlds):
    """EIO at every fault point of `approve` (snapshot, stage, intent, switch, outcome, archive,
    autonomy): the error is one Ingot error that says what is served now (never a bare OSError),
    and after recovery the chain, the folder and the queue agree."""
    from ingot.errors import IngotError
    from optimize.control.promote import Promoter

    world = worlds["evaluate"]  # a ready body change waits
    world.reset()
    change = world.control().queue.get(SKILL)
    neighbours = _Neighbours(world.similar_to(SKILL, ""))

    def approve() -> None:
        control = ChangeControl(world.home, (world.root,), neighbours=lambda: neighbours)
        control.approve(SKILL, "reviewer", change.id)

    names = killpoints.points(approve)
    assert "switch: rename" in names and any("autonomy" in n or "audit" in n for n in names)
    for at, name in enumerate(names):
        world.reset()
        ended = killpoints.run(approve, at, killpoints.EIO)
        where = f"EIO at point {at} ({name})"
        live = Promoter(world.home).live_revision(world.root, SKILL)
        if ended.code != 0:
            kind, _, message = ended.error.partition(": ")
            assert kind in {c.__name__ for c in _ingot_errors(IngotError)}, (where, ended.traceback)
            served = "served at" in message or "still served" in message
            assert served and "Input/output error" in message, (where, message)
            assert (live[:12] in message) if live else True, (where, message)
        control, pending = world.settled(where)
        promoted = live == change.candidate_revision
        assert (pending == []) == promoted, where
        entries = AuditLog(world.home).entries()
        done = [
            e for e in entries if e.get("action") == "promote" and str(e.get("outcome")).startswith("done")
        ]
        assert bool(done) == promoted, where


def _ingot_errors(base: type) -> list[type]:
    found = [base]
    for sub in base.__subclasses__():
        found += _ingot_errors(sub)
    return found


@pytest.mark.parametrize("path", ["propose", "evaluate"])
def test_an_io_error_at_any_point_of_a_proposal_or_new_evidence_is_one_line_saying_what_it_left(worlds, path):
    """EIO at every fault point of `propose` and `attach_evidence`: one Ingot error (never a bare
    OSError) naming the I/O error and what it left, and after recovery one change waits, resting
    on what its audit lines say."""
    from ingot.errors import IngotError

    world = worlds[path]
    world.reset()
    first = world.control().queue.get(SKILL)

    def act() -> None:
        if path == "propose":
            world.control().propose(
                SKILL, "operator", body_rewrite(world.root, SKILL, "NEW-MARK"), ready_body()
            )
        else:
            world.control().attach_evidence(SKILL, first.id, ready_body([0.1, 0.1, 0.1, 0.1]), "operator")

    left = {
        "propose": ("nothing was queued", "is in the audit chain"),
        "evaluate": ("it still rests on its earlier evidence", "is in the audit chain"),
    }[path]
    names = killpoints.points(act)
    for at, name in enumerate(names):
        world.reset()
        ended = killpoints.run(act, at, killpoints.EIO)
        where = f"EIO at point {at} ({name})"
        if ended.code != 0:
            kind, _, message = ended.error.partition(": ")
            assert kind in {c.__name__ for c in _ingot_errors(IngotError)}, (where, ended.traceback)
            assert "Input/output error" in message, (where, message)
            if kind == "WriteFailed":
                assert any(words in message for words in left), (where, message)
        _, pending = world.settled(where)
        assert len(pending) == 1, where
