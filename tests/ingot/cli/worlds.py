"""Libraries on disk for running the read-only commands against, and a way to prove they wrote
nothing: a fresh root no command has managed, or a root whose state home holds a chain, a
snapshot, a pending change, a vector cache, a trace, a golden and an autonomy ceiling.

A world is one folder: the root, its state home, the working folder and the commands' HOME and
TMPDIR all sit under `top`, so `snapshot(top)` sees every file a command could write. Worlds are
built with the writers (ChangeControl in this process, `ingot propose` in a child that exits,
so the vector cache is checkpointed and closed before any reader runs)."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ingot.home import default_home, establish
from mcp_server.embedding import CachedEmbedder
from mcp_server.library import Library
from optimize.control.changes import ChangeControl
from optimize.control.goldens_admin import GoldenAdmin
from optimize.control.lock import change_lock
from optimize.models.traces import LocalTraceStore, TraceRecord
from tests.conftest import BUNDLED_SKILLS, write_skill
from tests.optimize.conftest import body_rewrite, ready_body

SKILL = "release-notes"  # the skill a managed world has changed, blessed and delegated
INVALID = "wrong-name"  # a folder whose SKILL.md names another skill: skipped, with its reason
TASK = "Draft release notes for 2.0 from the merged pull requests"


@dataclass(frozen=True)
class World:
    top: Path
    root: Path
    golden: str | None = None  # a golden id, in a managed world
    change: str | None = None  # the pending change's id, in a managed world
    env: dict[str, str] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return default_home(self.root)


def _folders(top: Path) -> dict[str, str]:
    """HOME, TMPDIR and the working folder inside the world, so a write to any is seen."""
    for name in ("work", "user", "tmp"):
        (top / name).mkdir(parents=True, exist_ok=True)
    return {"HOME": str(top / "user"), "TMPDIR": str(top / "tmp")}


def fresh(top: Path) -> World:
    """A copy of the bundled skills plus one invalid folder; no state home, no claim."""
    root = top / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    write_skill(root, "other-name", "Mismatch.", folder=INVALID)
    return World(top, root, env=_folders(top))


def managed(top: Path, embedder: CachedEmbedder) -> World:
    """`fresh`, then managed: one approved change (chain, snapshots), one pending, a vector
    cache written by `ingot propose`, a recorded run blessed as a golden, an autonomy ceiling."""
    world = fresh(top)
    root = world.root
    home = establish((root,))
    control = ChangeControl(home.path, home.roots, neighbours=Library((root,), embedder).current)
    first, _ = control.propose(SKILL, "optimizer", body_rewrite(root, SKILL), ready_body())
    control.approve(SKILL, "reviewer", first.id)
    live = control.live_revision(SKILL)
    messages = (
        {"role": "system", "content": "<skill>release notes</skill>"},
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": "Here are the notes."},
    )
    record = TraceRecord(
        TASK, "Here are the notes.", "match", SKILL, live, "agent-model", harness="cli", messages=messages
    )
    LocalTraceStore(home.path / "traces.jsonl").append(record)
    stored, _ = GoldenAdmin(control).bless(record, "reviewer")
    with change_lock(control.runs_dir, control.lock_wait_s):
        control.autonomy.allow(SKILL, "body", "supervised", "reviewer")
    draft = top / "draft" / SKILL
    draft.parent.mkdir()
    shutil.copytree(root / SKILL, draft)
    (draft / "SKILL.md").write_text((draft / "SKILL.md").read_text() + "\nSECOND: one more rule.\n")
    proposed = ingot(world, "propose", SKILL, "--from", str(draft), "--no-evaluate")
    assert proposed.returncode == 0, proposed.stderr
    assert (home.path / "cache" / "vectors.sqlite").is_file()
    assert not (home.path / "cache" / "vectors.sqlite-wal").exists()  # closed: readers open it immutable
    change = control.queue.get(SKILL)
    assert change is not None
    return World(top, root, stored.id, change.id, world.env)


def ingot(world: World, *args: str, as_nobody: bool = False, **env: str) -> subprocess.CompletedProcess:
    """Run the CLI in the world's working folder with SKILLS_DIRS set to its root. `as_nobody`:
    without root's power to ignore permissions (a user namespace mapping us to nobody), so a
    folder made read-only with `read_only` really is."""
    environment = {k: v for k, v in os.environ.items() if k not in ("INGOT_HOME", "SKILLS_DIRS")}
    environment |= {"HF_HUB_OFFLINE": "1", "SKILLS_DIRS": str(world.root), **world.env, **env}
    prefix = ["unshare", "--map-user=65534", "--map-group=65534"] if as_nobody and os.geteuid() == 0 else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "ingot.cli", *args],
        cwd=world.top / "work",
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )


def can_drop_root() -> bool:
    """Whether `as_nobody` makes permissions bind: we are not root, or a user namespace works."""
    if os.geteuid() != 0:
        return True
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--map-user=65534", "--map-group=65534", "true"], capture_output=True, check=False
    )
    return probe.returncode == 0


def read_only(top: Path) -> None:
    """Take every write bit off every file and folder under `top` (and `top` itself)."""
    for path in [top, *top.rglob("*")]:
        if not path.is_symlink():
            path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)


def writable(top: Path) -> None:
    """Give the owner back write access, so the test's temporary folder can be removed."""
    for path in [top, *top.rglob("*")]:
        if not path.is_symlink():
            path.chmod(stat.S_IMODE(path.stat().st_mode) | 0o200)


def snapshot(top: Path) -> dict[str, tuple]:
    """Every path under `top` with its type, mode, size, mtime (ns) and, for a file, its
    SHA-256: equal snapshots mean nothing was created, removed, renamed or written (a file made
    and deleted again still changes its folder's mtime)."""
    found: dict[str, tuple] = {}
    for path in [top, *top.rglob("*")]:
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(info.st_mode) else None
        found[str(path.relative_to(top))] = (info.st_mode, info.st_size, info.st_mtime_ns, digest)
    return found


def changed(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """The paths added, removed or changed between two snapshots, each with what happened."""
    return sorted(
        f"{'added' if p not in before else 'removed' if p not in after else 'changed'} {p}"
        for p in before.keys() | after.keys()
        if before.get(p) != after.get(p)
    )
