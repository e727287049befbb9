"""What the reference agent can see and do while it serves one task.

The routed revision's files are readable at /skill/ from bytes checked against that revision
(never the live folder, which may change mid-run), and nothing can write there. /scratch/ holds
what the agent writes (script inputs, notes). Both live in agent state, never on disk.
Scripts run only through Ingot's execution sandbox, with /skill and /scratch mounted read-only;
without a sandbox they are not offered. Only the tools the skill needs are offered: none for a
bare SKILL.md, `read_file` for one with files, plus `write_file` and `execute` for one with
scripts, plus `grep` when a file is longer than one read. Nothing here routes, calls a model or
records a trace (run.py does).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from deepagents.backends import StateBackend
from deepagents.backends.protocol import (
    DeleteResult,
    EditResult,
    ExecuteResponse,
    FileUploadResponse,
    SandboxBackendProtocol,
    WriteResult,
)
from deepagents.backends.utils import create_file_data

from ingot.errors import IngotError, SkillChanged
from ingot.fsutil import check_relative
from mcp_server.registry import SkillFile, manifest_revision, parse_skill_md
from optimize.models.prompting import render

SKILL_ROOT, SCRATCH_ROOT = "/skill/", "/scratch/"
READ_PAGE_LINES = 2000  # deepagents' read_file returns this many lines per call


@dataclass(frozen=True)
class SkillSnapshot:
    """Every file of one revision of a skill, checked to hash to that revision."""

    name: str
    revision: str
    files: Mapping[str, bytes] = field(repr=False)

    @classmethod
    def verified(cls, name: str, revision: str, files: Mapping[str, bytes]) -> SkillSnapshot:
        """The snapshot if `files` are exactly `revision`; `SkillChanged` if they are not."""
        actual = revision_of(files)
        if actual != revision:
            raise SkillChanged(
                f"skill {name!r} changed while it was being loaded (routed {revision[:12]}, "
                f"read {actual[:12]}): run the task again"
            )
        return cls(name, revision, dict(files))

    @classmethod
    def of(cls, name: str, files: Mapping[str, bytes]) -> SkillSnapshot:
        """A snapshot of files that are not served yet (a candidate), named by their content."""
        return cls(name, revision_of(files), dict(files))

    @property
    def body(self) -> str:
        return parse_skill_md(self.files["SKILL.md"].decode("utf-8"), self.name)[2]

    @property
    def extra_files(self) -> tuple[str, ...]:
        return tuple(sorted(p for p in self.files if p != "SKILL.md"))

    @property
    def scripts(self) -> tuple[str, ...]:
        """Files meant to be run: under scripts/ (the Agent Skills layout) or starting with `#!`."""
        return tuple(
            p for p in self.extra_files if p.startswith("scripts/") or self.files[p].startswith(b"#!")
        )


def revision_of(files: Mapping[str, bytes]) -> str:
    """The content revision of a set of files, computed as the registry computes it."""
    return manifest_revision(
        SkillFile(path, hashlib.sha256(data).hexdigest(), len(data)) for path, data in files.items()
    )


class RunOutcome(Protocol):
    status: str
    reason: str
    exit_code: int | None
    stdout: str
    stderr: str


class ScriptRunner(Protocol):
    """The execution sandbox, as the agent sees it (optimize/measure/sandbox.py implements it)."""

    def ready(self) -> tuple[bool, str]: ...

    def run_in(
        self,
        mounts: Mapping[str, Mapping[str, bytes]],
        argv: Sequence[str],
        cwd: str,
        wall_s: float | None = None,
    ) -> RunOutcome: ...


class SkillWorkspace(StateBackend, SandboxBackendProtocol):
    """One backend for the whole run, kept in agent state (never on disk): /skill/ holds the
    snapshot and refuses every write, delete and upload; /scratch/ takes the agent's writes;
    `execute` runs a shell command in the sandbox, working in /skill, with the snapshot and the
    scratch files mounted read-only at the same paths and a private writable /tmp.

    One backend rather than deepagents' CompositeBackend with a read-only route: with routes and
    an execute tool, deepagents tells the model that routed paths are unreachable from the shell,
    which is false here (the sandbox mounts them) and would send it the wrong way."""

    def __init__(self, skill: SkillSnapshot | None, runner: ScriptRunner | None) -> None:
        super().__init__()
        self.skill, self.runner = skill, runner
        self.runs = 0  # execute calls that reached the sandbox

    @property
    def id(self) -> str:
        return "ingot-sandbox"

    def initial_files(self) -> dict[str, Any]:
        """The snapshot as agent-state files under /skill/ (binary files base64-encoded)."""
        files = {}
        for rel, data in (self.skill.files if self.skill else {}).items():
            try:
                files[SKILL_ROOT + rel] = create_file_data(data.decode("utf-8"))
            except UnicodeDecodeError:
                files[SKILL_ROOT + rel] = create_file_data(base64.b64encode(data).decode(), encoding="base64")
        return files

    def write(self, file_path: str, content: str) -> WriteResult:
        refused = _refusal(file_path)
        return WriteResult(error=refused) if refused else super().write(file_path, content)

    def edit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:  # noqa: FBT001, FBT002
        refused = _refusal(file_path)
        return (
            EditResult(error=refused)
            if refused
            else super().edit(file_path, old_string, new_string, replace_all)
        )

    def delete(self, file_path: str) -> DeleteResult:
        refused = _refusal(file_path)
        return DeleteResult(error=refused) if refused else super().delete(file_path)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        if any(_refusal(path) for path, _ in files):
            return [FileUploadResponse(path=path, error="permission_denied") for path, _ in files]
        return super().upload_files(files)

    def _scratch_files(self) -> dict[str, bytes]:
        listed = self.glob("*", SCRATCH_ROOT).matches or []
        paths = [info["path"] for info in listed if info["path"].startswith(SCRATCH_ROOT)]
        return {
            check_relative(got.path.removeprefix(SCRATCH_ROOT)): got.content
            for got in self.download_files(paths)
            if got.content is not None and got.path
        }

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        if self.runner is None or self.skill is None:
            return ExecuteResponse(output="Error: no sandbox is available here, so nothing can be run")
        try:
            scratch = self._scratch_files()
        except IngotError as exc:
            return ExecuteResponse(output=f"Error: {exc}")
        self.runs += 1
        outcome = self.runner.run_in(
            {SKILL_ROOT.rstrip("/"): self.skill.files, SCRATCH_ROOT.rstrip("/"): scratch},
            ["sh", "-c", command],
            cwd=SKILL_ROOT.rstrip("/"),
            wall_s=float(timeout) if timeout else None,
        )
        output = outcome.stdout + outcome.stderr
        if outcome.status == "inconclusive" or outcome.exit_code is None or outcome.exit_code > 128:
            output += f"\n[sandbox: {outcome.reason}]"
        return ExecuteResponse(output=output, exit_code=outcome.exit_code)


def _refusal(path: str) -> str | None:
    """Why a write to `path` is refused, or None: only /scratch/ is writable."""
    if path.startswith(SCRATCH_ROOT):
        return None
    if path.startswith(SKILL_ROOT):
        return f"Error: {path} is part of the served skill and read-only; write under {SCRATCH_ROOT}"
    return f"Error: write under {SCRATCH_ROOT} (the skill at {SKILL_ROOT} is read-only)"


@dataclass(frozen=True)
class Workspace:
    backend: SkillWorkspace
    tools: tuple[str, ...]  # filesystem tools offered to the model (possibly none)
    prompt: str  # what the system prompt says about the workspace ("" when nothing is offered)
    files: dict[str, Any]  # the agent state's files at the start of the run

    @property
    def middleware_tools(self) -> list[str]:
        """deepagents' FilesystemMiddleware insists on read_file; it is hidden when not offered."""
        return sorted({"read_file", *self.tools})


def tools_for(skill: SkillSnapshot | None, runner: ScriptRunner | None) -> tuple[str, ...]:
    """The filesystem tools this skill needs (see the module docstring for the rules)."""
    if skill is None or not skill.extra_files:
        return ()
    tools = ["read_file"]
    if any(skill.files[p].count(b"\n") >= READ_PAGE_LINES for p in skill.extra_files):
        tools.append("grep")
    if skill.scripts and runner is not None and runner.ready()[0]:
        tools += ["write_file", "execute"]
    return tuple(tools)


def _prompt(skill: SkillSnapshot, tools: tuple[str, ...], runner: ScriptRunner | None, wall_s: float) -> str:
    listing = "\n".join(f"- {SKILL_ROOT}{p} ({len(skill.files[p])} bytes)" for p in skill.extra_files)
    if "execute" in tools:
        scripts = render("agent_workspace_scripts", wall_s=f"{wall_s:g}", scratch=SCRATCH_ROOT)
    elif skill.scripts:
        why = "no sandbox is configured" if runner is None else runner.ready()[1]
        scripts = render("agent_workspace_no_scripts", why=why)
    else:
        scripts = ""
    return "\n\n" + render("agent_workspace", root=SKILL_ROOT, files=listing, scripts=scripts)


def workspace(skill: SkillSnapshot | None, runner: ScriptRunner | None, wall_s: float = 10.0) -> Workspace:
    """The backend, tool list and prompt for serving one task with `skill`."""
    tools = tools_for(skill, runner)
    backend = SkillWorkspace(skill if tools else None, runner if "execute" in tools else None)
    prompt = _prompt(skill, tools, runner, wall_s) if skill is not None and tools else ""
    return Workspace(backend, tools, prompt, backend.initial_files())
