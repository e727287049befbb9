"""What the Library and skill pages show about each served skill, as typed records.

Per skill: its revision and root, whether a change waits or the folder drifted, its task set's
counts (train, holdout, routing), how many evaluations (evidence bundles) and blessed runs
(goldens) it has, and its latest live score from mining with the n and date it rests on. A count
that cannot be read says why instead of showing zero. The skill page adds the body rendered and
every file with its size (text shown, binary described). Nothing here writes. Task-set counts are
kept per file and re-read only when the file's size or modification time changes: parsing 1,000
task sets took most of the Library's time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from markupsafe import Markup

from mcp_server.registry import Skill
from optimize.control.status import SkillStatus
from optimize.measure.mining import LiveScore, latest
from optimize.measure.taskset import TaskSetError, load_task_set
from ui.markdown import render

DESCRIPTION_CHARS = 160
MAX_SHOWN_BYTES = 200_000  # a file larger than this is described, not shown


@dataclass(frozen=True)
class TaskCounts:
    train: int
    holdout: int
    routing: int


@dataclass(frozen=True)
class Row:
    """One skill as the Library lists it."""

    skill: Skill
    status: SkillStatus | None  # None: served but never seen by change control
    tasks: TaskCounts | None
    tasks_note: str | None  # why there are no counts: no task set, or one that does not parse
    evaluations: int  # evidence bundles recorded for the skill
    goldens: int  # active blessed runs replayed against every change
    score: LiveScore | None  # latest mined live score

    @property
    def summary(self) -> str:
        return shorten(self.skill.description, DESCRIPTION_CHARS)


@dataclass(frozen=True)
class FileView:
    path: str
    size: int
    text: str | None  # None: binary, undecodable or too large to show
    note: str = ""


@dataclass(frozen=True)
class SkillPage:
    row: Row
    body: Markup  # SKILL.md's body, rendered (raw HTML escaped)
    files: tuple[FileView, ...]


def shorten(text: str, limit: int) -> str:
    """`text` on one line, cut at the last word boundary before `limit` with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:.") + "…"


def component_text(value: object) -> str:
    """A routing score component as a person reads it (`ingot route` prints the same): counts as
    integers, scores to 4 places, flags as yes/no, lists and maps spelled out, empty ones as "none"."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {component_text(v)}" for k, v in value.items()) or "none"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(component_text(v) for v in value) or "none"
    return str(value)


_Counted = tuple[TaskCounts | None, str | None]
_counted: dict[Path, tuple[tuple[int, int, int], _Counted]] = {}  # path -> (stat stamp, counts)
_counted_lock = threading.Lock()


def _tasks(tasks_dir: Path | None, name: str) -> _Counted:
    if tasks_dir is None:
        return None, "no task-set folder configured (TASKS_DIR)"
    path = tasks_dir / f"{name}.yaml"
    try:
        info = os.stat(path)
    except OSError:
        info = None
    if info is None or not path.is_file():
        return None, "no task set: `ingot optimize` drafts one for you to review"
    stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
    with _counted_lock:
        known = _counted.get(path)
    if known is not None and known[0] == stamp:
        return known[1]
    try:
        tasks = load_task_set(tasks_dir, name)
        counted: _Counted = (TaskCounts(len(tasks.train), len(tasks.holdout), len(tasks.routing)), None)
    except TaskSetError as exc:
        counted = (None, str(exc))
    with _counted_lock:
        _counted[path] = (stamp, counted)
    return counted


def row(
    skill: Skill,
    status: SkillStatus | None,
    runs_dir: Path,
    tasks_dir: Path | None,
    goldens: Mapping[str, int],
) -> Row:
    tasks, note = _tasks(tasks_dir, skill.name)
    bundles = runs_dir / "evidence" / skill.name
    evaluations = sum(1 for _ in bundles.glob("*/evidence.json")) if bundles.is_dir() else 0
    return Row(
        skill,
        status,
        tasks,
        note,
        evaluations,
        goldens.get(skill.name, 0),
        latest(runs_dir / "mining", skill.name),
    )


def page(row: Row) -> SkillPage:
    """The skill page: its body rendered and its files as they are served."""
    files = []
    for entry in row.skill.files:
        path = row.skill.folder / entry.path
        if entry.size > MAX_SHOWN_BYTES:
            files.append(FileView(entry.path, entry.size, None, "too large to show here"))
            continue
        try:
            data = path.read_bytes()
            text = None if b"\0" in data else data.decode("utf-8")
            note = "binary" if text is None else ""
        except UnicodeDecodeError:
            text, note = None, "not UTF-8 text"
        except OSError as exc:
            text, note = None, f"cannot be read now: {exc.strerror}"
        files.append(FileView(entry.path, entry.size, text, note))
    return SkillPage(row, render(row.skill.body), tuple(files))
