"""Commands that only read write nothing: no state home, no claim beside the root, no vector
cache, no lock, not even a temporary file, whether the root was never managed or has a state
home full of history; and they still answer when every folder is read-only.

Each command runs as a real process. The main assertion is a snapshot of the whole world (every
path, mode, size, mtime and digest) before and after; root ignores permissions, so the
read-only runs drop it in a user namespace (skipped where none can be made)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ingot.home import claim_path
from tests.ingot.cli import worlds
from tests.ingot.cli.worlds import SKILL, TASK, World

# Each read-only command, and the exit code it gives on these worlds (nothing drifted).
COMMANDS = {
    "skills": ("skills",),
    "route": ("route", TASK),
    "status": ("status",),
    "history": ("history", SKILL),
    "traces": ("traces",),
    "pending": ("pending",),
    "calibrate": ("calibrate",),
    "autonomy": ("autonomy",),
    "goldens": ("goldens", "list"),
    "audit-verify": ("audit", "verify"),
}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> World:
    return worlds.fresh(tmp_path_factory.mktemp("fresh"))


@pytest.fixture(scope="module")
def managed(tmp_path_factory: pytest.TempPathFactory, embedder) -> World:
    return worlds.managed(tmp_path_factory.mktemp("managed"), embedder)


@pytest.fixture(scope="module")
def locked_fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    world = worlds.fresh(tmp_path_factory.mktemp("locked-fresh"))
    worlds.read_only(world.top)
    yield world
    worlds.writable(world.top)


@pytest.fixture(scope="module")
def locked_managed(tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[World]:
    world = worlds.managed(tmp_path_factory.mktemp("locked-managed"), embedder)
    worlds.read_only(world.top)
    yield world
    worlds.writable(world.top)


def _run_unchanged(world: World, args: tuple[str, ...], **options) -> str:
    before = worlds.snapshot(world.top)
    done = worlds.ingot(world, *args, **options)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert worlds.changed(before, worlds.snapshot(world.top)) == [], args
    return done.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_command_on_a_root_never_managed_creates_nothing(fresh, command):
    _run_unchanged(fresh, COMMANDS[command])
    assert not fresh.home.exists() and not claim_path(fresh.root).exists()


@pytest.mark.parametrize("command", [*COMMANDS, "goldens-show"])
def test_a_read_only_command_on_a_managed_root_writes_nothing(managed, command):
    args = ("goldens", "show", managed.golden) if command == "goldens-show" else COMMANDS[command]
    _run_unchanged(managed, args)


@pytest.mark.parametrize("command", ["skills", "route"])
def test_quarantined_serving_is_read_without_writing(managed, command):
    shown = _run_unchanged(managed, COMMANDS[command], LIVE_EDITS="quarantine")
    assert SKILL in shown


needs_nobody = pytest.mark.skipif(not worlds.can_drop_root(), reason="no user namespace to drop root in")


@needs_nobody
@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_command_answers_from_read_only_folders(locked_fresh, command):
    _run_unchanged(locked_fresh, COMMANDS[command], as_nobody=True)


@needs_nobody
@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_command_answers_from_a_read_only_state_home(locked_managed, command):
    _run_unchanged(locked_managed, COMMANDS[command], as_nobody=True)


def test_listing_skills_does_not_claim_the_root_for_its_default_home(tmp_path):
    """The bug: `ingot skills` created the default state home and claimed the root, so the next
    command with another INGOT_HOME was refused ("managed by the state home ...")."""
    world = worlds.fresh(tmp_path)
    assert worlds.ingot(world, "skills").returncode == 0
    assert not world.home.exists() and not claim_path(world.root).exists()
    elsewhere = str(tmp_path / "elsewhere")
    for args in (("route", TASK), ("status",)):
        done = worlds.ingot(world, *args, INGOT_HOME=elsewhere)
        assert done.returncode == 0, done.stderr
    assert not Path(elsewhere).exists()
