"""The agent's workspace: which tools a skill gets, the snapshot's integrity, and what is writable."""

from __future__ import annotations

import pytest

from agent.workspace import (
    SkillSnapshot,
    SkillWorkspace,
    revision_of,
    tools_for,
    workspace,
)
from ingot.errors import SkillChanged

SKILL_MD = b"---\nname: demo\ndescription: A demo skill for workspace tests.\n---\n# Demo\n\nSteps.\n"


class Ready:
    """A stand-in runner that reports ready or not; tools_for only asks `ready()`."""

    def __init__(self, ok: bool = True) -> None:
        self.ok = ok

    def ready(self) -> tuple[bool, str]:
        return self.ok, "ready" if self.ok else "bwrap cannot start here"

    def run_in(self, *args, **kwargs):  # pragma: no cover - never reached by these tests
        raise AssertionError("not run")


def snap(**extra: bytes) -> SkillSnapshot:
    return SkillSnapshot.of("demo", {"SKILL.md": SKILL_MD, **extra})


def test_only_the_tools_a_skill_needs_are_offered():
    assert tools_for(None, Ready()) == ()
    assert tools_for(snap(), Ready()) == ()  # the body is already in the system prompt
    assert tools_for(snap(**{"references/a.md": b"ref\n"}), Ready()) == ("read_file",)
    long = b"line\n" * 2000
    assert tools_for(snap(**{"references/a.md": long}), Ready()) == ("read_file", "grep")
    scripted = snap(**{"scripts/run.py": b"print(1)\n"})
    assert tools_for(scripted, Ready()) == ("read_file", "write_file", "execute")
    assert tools_for(scripted, Ready(False)) == ("read_file",)  # no sandbox, no execute
    assert tools_for(scripted, None) == ("read_file",)
    assert tools_for(snap(**{"tool.sh": b"#!/bin/sh\necho\n"}), Ready())[-1] == "execute"


def test_a_snapshot_is_accepted_only_if_its_files_are_the_routed_revision():
    files = {"SKILL.md": SKILL_MD, "references/a.md": b"ref\n"}
    revision = revision_of(files)
    assert SkillSnapshot.verified("demo", revision, files).revision == revision
    with pytest.raises(SkillChanged, match="changed while it was being loaded"):
        SkillSnapshot.verified("demo", revision, {**files, "references/a.md": b"edited\n"})


def test_the_revision_is_the_registrys(tmp_path, make_skill):
    from mcp_server.registry import Limits, read_skill_files

    folder = make_skill(tmp_path, "demo", "A demo skill.", files={"references/a.md": "ref\n"})
    skill, files = read_skill_files(tmp_path, folder, Limits())
    assert revision_of(files) == skill.revision


def test_only_scratch_is_writable():
    backend = SkillWorkspace(snap(**{"references/a.md": b"ref\n"}), None)
    assert "read-only" in backend.write("/skill/references/a.md", "x").error
    assert "read-only" in backend.edit("/skill/SKILL.md", "Steps", "x").error
    assert "read-only" in backend.delete("/skill/SKILL.md").error
    assert "write under /scratch/" in backend.write("/elsewhere.txt", "x").error
    assert [r.error for r in backend.upload_files([("/skill/x", b"1")])] == ["permission_denied"]


def test_the_snapshot_is_in_agent_state_binary_files_included():
    ws = workspace(snap(**{"references/a.md": b"ref\n", "assets/logo.png": b"\x89PNG\x00\xff"}), None)
    assert set(ws.files) == {"/skill/SKILL.md", "/skill/references/a.md", "/skill/assets/logo.png"}
    assert ws.files["/skill/assets/logo.png"]["encoding"] == "base64"
    assert "/skill/references/a.md (4 bytes)" in ws.prompt


def test_a_bare_skill_puts_nothing_in_state_and_says_nothing_about_files():
    ws = workspace(snap(), Ready())
    assert (ws.tools, ws.files, ws.prompt) == ((), {}, "")


def test_scripts_without_a_sandbox_are_described_as_not_runnable():
    ws = workspace(snap(**{"scripts/run.py": b"print(1)\n"}), Ready(False))
    assert ws.tools == ("read_file",) and "cannot be run here (bwrap cannot start here)" in ws.prompt
