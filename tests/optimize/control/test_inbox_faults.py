"""The inbox pass and `ingot propose` under a SIGKILL, and under EIO, at every fault point.

Inbox: whatever point a pass dies or fails at, the chain holds at most one `propose` line per
candidate revision, and after the next pass (run as it comes, with no separate recovery) the
candidate is queued (or withheld, or withdrawn) exactly once, nothing is staged or half-written,
and a pass after that has nothing to do. Scenarios: a new skill, a rewrite displacing the inbox's
earlier change, a candidate withheld behind a ready change, and a deleted candidate.
Propose (the path `ingot propose --no-evaluate` takes: read the folder, admission, `propose`):
the next command's recovery leaves no temp file or unfinished evidence folder, says so in one
log line, and the change is pending exactly when the chain holds its line.

Each run is a forked child (killpoints.py) on a fresh copy of one prepared world. Every test
counts the points it tried and the ones that were safe and prints them (`pytest -s` shows
"kill points, inbox (create): SIGKILL 45 tried, 45 safe ..."); a point that is not safe fails
the test with every such point listed."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ingot.errors import IngotError
from ingot.fsutil import TEMP_NAME
from ingot.home import establish
from mcp_server.library import Library
from optimize.control.audit import AuditLog
from optimize.control.changes import ChangeControl
from optimize.control.inbox import Inbox
from optimize.control.promote import STAGE_PREFIX, tree_revision
from optimize.control.quarantine import admit, read_candidate
from tests.conftest import BUNDLED_SKILLS
from tests.optimize.conftest import body_rewrite, checks, ready_body
from tests.optimize.control import killpoints

SKILL, NEW = "release-notes", "kiln-firing"
NEW_DESCRIPTION = "Plans glaze firing schedules for a ceramic kiln."
REPO = Path(__file__).resolve().parents[3]


def write_candidate(folder: Path, line: str) -> None:
    if not folder.exists():
        shutil.copytree(BUNDLED_SKILLS / SKILL, folder)
    (folder / "SKILL.md").write_text((BUNDLED_SKILLS / SKILL / "SKILL.md").read_text() + f"\n{line}\n")


def leftovers(base: Path) -> list[str]:
    """Everything a killed write may leave half-done anywhere under `base`: write_atomic's temp
    files, unfinished evidence folders, staged records, stage folders in a skills root."""
    found = []
    for path in base.rglob("*"):
        name, parts = path.name, path.relative_to(base).parts
        if any(p.startswith(".tmp-") for p in parts[:-1]):
            continue  # inside an unfinished evidence folder: that folder is what is left
        unfinished = name.startswith(".tmp-") and path.parent.parent.name == "evidence"
        if (
            TEMP_NAME.match(name)
            or unfinished
            or path.parent.name == ".staged"
            or name.startswith(STAGE_PREFIX)
        ):
            found.append(str(path.relative_to(base)))
    return sorted(found)


class World:
    """The bundled skills under change control and a candidate folder, with `prepare` done to it;
    `reset()` puts it back to that moment, byte for byte."""

    def __init__(self, base: Path, embedder, prepare: Callable[[World], None]) -> None:
        self.world, self.template = base / "w", base / "template"
        self.root, self.candidates = self.world / "skills", self.world / "candidates"
        shutil.copytree(BUNDLED_SKILLS, self.root)
        self.candidates.mkdir()
        self.home = establish((self.root,)).path
        library = Library((self.root,), embedder)
        library.reload()
        # Computed here, once: the child never runs the embedding model.
        self._similar = {
            SKILL: library.similarity(SKILL, library.get(SKILL).description),
            NEW: library.similarity(NEW, NEW_DESCRIPTION),
        }
        library.stop_watching()
        prepare(self)
        shutil.copytree(self.world, self.template, symlinks=True)

    def similar_to(self, name: str, _description: str):  # noqa: ANN201 - a Similarity
        return self._similar[name]

    def control(self) -> ChangeControl:
        return ChangeControl(self.home, (self.root,))

    def inbox(self) -> Inbox:
        return Inbox(self.control(), (self.candidates,), self.similar_to, settle_s=0, clock=lambda: 4e9)

    def reset(self) -> None:
        shutil.rmtree(self.world)
        shutil.copytree(self.template, self.world, symlinks=True)

    def proposals(self) -> list:
        return [e for e in AuditLog(self.home).entries() if e.get("action") == "propose"]


class Tally:
    """Points tried and safe, per fault, for one writer and scenario; printed, then asserted."""

    def __init__(self, writer: str) -> None:
        self.writer, self.tried, self.unsafe = writer, {}, []

    def point(self, fault: str, where: str, problems: list[str]) -> None:
        self.tried[fault] = self.tried.get(fault, 0) + 1
        if problems:
            self.unsafe.append(f"{where}: {'; '.join(problems)}")

    def report(self) -> None:
        said = "; ".join(
            f"{'SIGKILL' if fault == killpoints.KILL else 'EIO'} {n} tried, "
            f"{n - sum(u.startswith(fault) for u in self.unsafe)} safe"
            for fault, n in self.tried.items()
        )
        print(f"\nkill points, {self.writer}: {said}")
        assert self.unsafe == [], "\n".join(self.unsafe)


def every_point(
    world: World, action: Callable[[], object], tally: Tally, check: Callable[[], list[str]]
) -> None:
    """Run `action` killed, then failed with EIO, at each of its fault points; `check` (run in this
    process, after the fault) returns what is wrong."""
    world.reset()
    names = killpoints.points(action)
    assert any(n.startswith("audit") for n in names) or tally.writer.endswith("(withdraw)"), names
    for fault in (killpoints.KILL, killpoints.EIO):
        for at, name in enumerate(names):
            world.reset()
            ended = killpoints.run(action, at, fault)
            problems = []
            if fault == killpoints.KILL and not ended.killed:
                problems.append(f"the child was not killed ({ended.error})")
            if fault == killpoints.EIO:
                kind = ended.error.split(":", 1)[0]
                if ended.killed or (ended.code != 0 and kind not in ("WriteFailed", "AuditError", "OSError")):
                    problems.append(f"EIO ended it badly: {ended.traceback or ended.error}")
            tally.point(fault, f"{fault} at point {at} ({name})", problems + check())


# -- the inbox ---------------------------------------------------------------------------------


def _create(world: World) -> None:
    folder = world.candidates / NEW
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        f"---\nname: {NEW}\ndescription: {NEW_DESCRIPTION}\n---\n\nRamp slowly.\n"
    )


def _rewrite(world: World) -> None:
    write_candidate(world.candidates / SKILL, "INBOX-FIRST: group the changes by theme.")
    [event] = world.inbox().scan()
    assert event.did == "queued"
    write_candidate(world.candidates / SKILL, "INBOX-MARK: group the changes by audience.")


def _withheld(world: World) -> None:
    world.control().propose(SKILL, "operator", body_rewrite(world.root, SKILL, "READY-MARK"), ready_body())
    write_candidate(world.candidates / SKILL, "INBOX-MARK: group the changes by audience.")


def _withdraw(world: World) -> None:
    write_candidate(world.candidates / SKILL, "INBOX-MARK: group the changes by theme.")
    [event] = world.inbox().scan()
    assert event.did == "queued"
    shutil.rmtree(world.candidates / SKILL)


INBOX = {"create": _create, "rewrite": _rewrite, "withheld": _withheld, "withdraw": _withdraw}


@pytest.fixture(scope="module")
def inbox_worlds(tmp_path_factory, embedder) -> dict[str, World]:
    return {name: World(tmp_path_factory.mktemp(name), embedder, how) for name, how in INBOX.items()}


def inbox_problems(world: World, scenario: str, before: int) -> list[str]:
    """After the faulted pass: the next pass, as it comes; then what must hold."""
    problems = []
    try:
        world.inbox().scan()
    except (IngotError, OSError) as exc:
        return [f"the next pass failed: {exc}"]
    audit = AuditLog(world.home)
    if not audit.verify().ok:
        return [f"the chain does not verify: {audit.verify().problem}"]
    lines = world.proposals()
    revisions = [(e.get("origin"), e.get("to_revision")) for e in lines]
    if len(revisions) != len(set(revisions)):
        problems.append(f"two propose lines for one candidate: {revisions}")
    control = world.control()
    pending = control.pending()
    new_lines = lines[before:]
    if scenario == "withdraw":
        if new_lines or pending:
            problems.append(f"a deleted candidate left {len(new_lines)} new lines, {len(pending)} pending")
    elif len(new_lines) != 1:
        problems.append(f"{len(new_lines)} propose lines for the candidate, not one")
    else:
        [line] = new_lines
        withheld = str(line.get("reason") or "").startswith("withheld")
        if scenario == "withheld":
            waiting = [c for c in pending if b"READY-MARK" in c.files["SKILL.md"]]
            archived = control.queue.decided(SKILL, line.get("change_id")) or {}
            if not withheld or not waiting or archived.get("archived_status") != "withheld":
                problems.append("the candidate was not withheld exactly once behind the ready change")
        else:
            ids = [c.id for c in pending]
            if withheld or ids != [line.get("change_id")]:
                problems.append(
                    f"the candidate is not the one pending change ({ids}, line {line.get('change_id')})"
                )
    for change in pending:
        try:
            control.verifier.check_proposed(change)
        except IngotError as exc:
            problems.append(f"not approvable: {exc}")
    if left := leftovers(world.world):
        problems.append(f"left behind: {left}")
    if again := world.inbox().scan():
        problems.append(f"a third pass still did something: {[str(e) for e in again]}")
    return problems


@pytest.mark.parametrize("scenario", INBOX)
def test_an_inbox_pass_faulted_at_any_point_queues_each_candidate_exactly_once(inbox_worlds, scenario):
    world = inbox_worlds[scenario]
    world.reset()
    before = len(world.proposals())
    tally = Tally(f"inbox ({scenario})")
    every_point(world, lambda: world.inbox().scan(), tally, lambda: inbox_problems(world, scenario, before))
    tally.report()


def test_two_passes_at_once_propose_a_candidate_once(inbox_worlds):
    """A pass that read the chain before another pass proposed the candidate does not propose it
    again: `propose` checks the candidate's origin under the lock."""
    world = inbox_worlds["create"]
    world.reset()
    other = world.inbox()
    first = world.inbox()
    first.similar_to = lambda name, description: (other.scan(), world.similar_to(name, description))[1]
    assert first.scan() == []  # the other pass, run from inside this one, queued it first
    [line] = world.proposals()
    assert line.get("origin") == str(world.candidates / NEW)
    assert [c.id for c in world.control().pending()] == [line.get("change_id")]


# -- ingot propose -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def propose_world(tmp_path_factory, embedder) -> World:
    def prepare(world: World) -> None:
        control = world.control()  # a change that waits with its admission checks only: displaced
        control.propose(SKILL, "operator", body_rewrite(world.root, SKILL, "WAITING-MARK"), checks())
        write_candidate(world.world / "mine", "OPERATOR-MARK: link each entry to its pull request.")

    return World(tmp_path_factory.mktemp("propose"), embedder, prepare)


def operator_propose(world: World) -> None:
    """What `ingot propose SKILL --from DIR --no-evaluate` does once its library is open."""
    control = world.control()
    files, description = read_candidate(world.world / "mine", SKILL, control)
    admit(control, SKILL, files, "operator", world.similar_to(SKILL, description), None)


class Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def propose_problems(world: World, before: int) -> list[str]:
    """After the faulted propose: the next command's recovery; then what must hold."""
    left = leftovers(world.world)
    said = Said()
    logging.getLogger("optimize.control.changes").addHandler(said)
    try:
        world.control().recover()
    finally:
        logging.getLogger("optimize.control.changes").removeHandler(said)
    problems = []
    if after := leftovers(world.world):
        problems.append(f"left behind after recovery: {after}")
    removed = [line for line in said.lines if line.startswith("recovery removed")]
    temps = [p for p in left if ".staged/chg-" not in p]  # a staged record is settled, not removed
    if temps and (len(removed) != 1 or not all(Path(t).name in removed[0] for t in temps)):
        problems.append(f"recovery did not say what it removed in one line ({temps}: {said.lines})")
    if not temps and removed:
        problems.append(f"recovery said it removed something when nothing was left: {removed}")
    control = world.control()
    candidate = tree_revision(read_candidate(world.world / "mine", SKILL, control)[0])
    lines = [e for e in world.proposals()[before:] if e.get("to_revision") == candidate]
    [pending] = control.pending()
    is_new = pending.candidate_revision == candidate
    if len(lines) > 1 or is_new != bool(lines):
        problems.append(
            f"{len(lines)} propose lines, and the new change is {'' if is_new else 'not '}pending"
        )
    return problems


def test_ingot_propose_faulted_at_any_point_leaves_nothing_after_the_next_command(propose_world):
    world = propose_world
    world.reset()
    before = len(world.proposals())
    tally = Tally("propose")
    every_point(world, lambda: operator_propose(world), tally, lambda: propose_problems(world, before))
    tally.report()


def test_the_next_command_removes_a_killed_propose_staged_temp_file_and_says_so(propose_world):
    """The case found by hand: `ingot propose` killed at the fsync of its staged record left a
    `.chg-….json.….tmp` that no command removed. The next real `ingot` command removes it and
    says so in one line."""
    world = propose_world
    world.reset()
    names = killpoints.points(lambda: operator_propose(world))
    world.reset()
    at = next(i for i, n in enumerate(names) if re.fullmatch(r"fsync chg-[0-9a-f]{12}\.json", n))
    assert killpoints.run(lambda: operator_propose(world), at).killed
    [temp] = [p for p in leftovers(world.home) if p.startswith("pending/.staged/")]
    assert re.fullmatch(r"pending/\.staged/\.chg-[0-9a-f]{12}\.json\.\w{8}\.tmp", temp)
    waiting = world.control().queue.get(SKILL)
    env = {k: v for k, v in os.environ.items() if k != "INGOT_HOME"} | {"HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "ingot.cli", "reject", SKILL, "--change", waiting.id, "--reason", "not now"]
        + ["--skills", str(world.root)],
        cwd=world.world,
        env=env | {"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "recovery removed" in line]
    assert len(said) == 1 and Path(temp).name in said[0], done.stderr
    assert leftovers(world.world) == []
