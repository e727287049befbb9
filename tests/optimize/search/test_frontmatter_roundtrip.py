"""A description holding `---` (inline, or as a line of a block scalar) survives every optimize
pass, run as the real `ingot` commands against the scripted model server: the candidate SKILL.md
is the frontmatter it had byte for byte (body pass), or the body it had byte for byte with only
the description replaced (description pass), and the `---` line is still inside the description
when the candidate is parsed as the registry parses it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mcp_server.registry import parse_skill_md
from mcp_server.skillmd import split, with_body, with_description
from optimize.control.pending import PendingChange, PendingQueue
from optimize.models.traces import LocalTraceStore, TraceRecord
from tests.conftest import BUNDLED_SKILLS
from tests.scripted_llm import ScriptedLLM, scripted_llm
from tests.scripted_llm import grade_json as grade

SKILL = "release-notes"
INLINE = (
    "---\n"
    "name: release-notes\n"
    "description: Writes release notes --- grouped by theme --- from merged pull requests.\n"
    "license: Apache-2.0\n"
    "---\n"
)
BLOCK = (
    "---\n"
    "name: release-notes\n"
    "description: |\n"
    "  Writes release notes from merged pull requests.\n"
    "  ---\n"
    "  Use it when a version ships.\n"
    "license: Apache-2.0\n"
    "---\n"
)
BODY = "# Notes\n\nSEED-MARK: list every commit.\n---\nThe line above is a rule in the body.\n"
REWRITE = "# Notes\n\nNEW-MARK: group by theme.\n---\nA rule, then the last line.\n"
# The teacher's new descriptions: one with `---` inline, one with a line that is exactly `---`.
DESCRIBED = (
    "Drafts user-facing release notes and changelog entries from merged pull requests --- grouped by "
    "theme. Use when the user asks for release notes, a changelog or a summary of what changed in a version."
)
DESCRIBED_LINES = (
    "Drafts user-facing release notes from merged pull requests, grouped by theme.\n"
    "---\n"
    "Use when the user asks for release notes or a changelog for a version."
)
# Each frontmatter with the new description in place: the other keys as they were, in their order.
DESCRIBED_HEAD = (
    "---\n"
    "name: release-notes\n"
    "description: Drafts user-facing release notes and changelog entries from merged pull requests"
    " --- grouped\n"
    "  by theme. Use when the user asks for release notes, a changelog or a summary of what changed"
    " in a version.\n"
    "license: Apache-2.0\n"
    "---\n"
)
DESCRIBED_LINES_HEAD = (
    "---\n"
    "name: release-notes\n"
    "description: 'Drafts user-facing release notes from merged pull requests, grouped by theme.\n"
    "\n"
    "  ---\n"
    "\n"
    "  Use when the user asks for release notes or a changelog for a version.'\n"
    "license: Apache-2.0\n"
    "---\n"
)
ROUTING = [
    {"task": "Draft release notes for v3.1 from the merged pull requests", "expected": SKILL},
    {"task": "Summarise what changed in this release for customers", "expected": SKILL},
    {"task": "Turn the merged PRs into a user-facing changelog entry", "expected": SKILL},
    {"task": "Write release notes for version 2.4", "expected": SKILL},
    {"task": "Write a conventional commit message for this fix", "expected": "git-commit-messages"},
    {"task": "Write a blameless postmortem for yesterday's outage", "expected": "incident-postmortem"},
    {"task": "Shrink and harden our Dockerfile for production", "expected": "dockerfile-hardening"},
    {"task": "Plan a three-day itinerary for Lisbon", "expected": None},
    {"task": "Recommend three novels like Dune", "expected": None},
]
HEADS = pytest.mark.parametrize("head", [INLINE, BLOCK], ids=["inline", "block-scalar"])
# (the seed frontmatter, the description the teacher proposes, the frontmatter that must result)
DESCRIPTIONS = pytest.mark.parametrize(
    ("head", "described", "described_head"),
    [(INLINE, DESCRIBED, DESCRIBED_HEAD), (BLOCK, DESCRIBED_LINES, DESCRIBED_LINES_HEAD)],
    ids=["inline", "block-scalar"],
)


def library_with(tmp_path: Path, head: str) -> tuple[Path, Path, Path]:
    """Three bundled skills and release-notes written as `head` + BODY, its task set (train,
    holdout, routing cases) and an empty state home: (skills root, tasks folder, state home)."""
    root, tasks, home = tmp_path / "skills", tmp_path / "tasks", tmp_path / "home"
    for name in ("git-commit-messages", "incident-postmortem", "dockerfile-hardening"):
        shutil.copytree(BUNDLED_SKILLS / name, root / name)
    (root / SKILL).mkdir()
    (root / SKILL / "SKILL.md").write_bytes((head + BODY).encode())
    tasks.mkdir()
    task_set = {
        "train": [f"Notes for 1.{i}" for i in range(4)],
        "holdout": [f"Notes for 2.{i}" for i in range(5)],
        "routing": ROUTING,
    }
    (tasks / f"{SKILL}.yaml").write_text(yaml.safe_dump(task_set))
    home.mkdir()
    return root, tasks, home


def ingot(server: ScriptedLLM, tasks: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    """`ingot ARGS` as a process, every model role served by `server`, one candidate per pass."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "API_KEY"},
        "BASE_URL": server.url,
        "AGENT_MODEL": "agent-model",
        "TEACHER_MODEL": "teacher-model",
        "JUDGE_MODEL": "judge-model",
        "TASKS_DIR": str(tasks),
        "INGOT_HOME": str(home),
        "OPTIMIZE_CANDIDATES": "1",
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "ingot.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=home.parent,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def queued(home: Path) -> PendingChange:
    (change,) = PendingQueue(home).all()
    assert change.skill == SKILL
    return change


def served_description(skill_md: bytes) -> str:
    return parse_skill_md(skill_md.decode("utf-8"), SKILL)[1]


@HEADS
def test_the_served_skill_reads_the_whole_description_and_the_body_keeps_its_rule_line(head):
    _, description, body, _ = parse_skill_md(head + BODY, SKILL)
    assert "---" in description and body == BODY.strip()
    assert split(head + BODY).body == BODY and split(head + BODY).head == head


@DESCRIPTIONS
def test_rewriting_the_description_keeps_the_body_and_the_other_keys_in_order(
    head, described, described_head
):
    text = with_description(head + BODY, described)
    assert text == described_head + BODY
    assert list(split(text).metadata()) == ["name", "description", "license"]
    assert parse_skill_md(text, SKILL)[1] == described
    assert with_body(head + BODY, REWRITE) == head + "\n" + REWRITE


@HEADS
def test_ingot_optimize_keeps_the_frontmatter_byte_for_byte(head, tmp_path):
    root, tasks, home = library_with(tmp_path, head)
    with scripted_llm() as server:
        server.script_optimizer(REWRITE)
        done = ingot(server, tasks, home, "optimize", SKILL, "--skills", str(root))
    assert "queued chg-" in done.stdout, done.stdout
    change = queued(home)
    assert change.kind == "body"
    assert change.files["SKILL.md"] == (head + "\n" + REWRITE).encode()
    assert served_description(change.files["SKILL.md"]) == served_description((head + BODY).encode())
    assert "---" in served_description(change.files["SKILL.md"])


@DESCRIPTIONS
def test_ingot_optimize_description_replaces_only_the_description(head, described, described_head, tmp_path):
    root, tasks, home = library_with(tmp_path, head)
    with scripted_llm() as server:
        server.add(model="teacher-model", reply=json.dumps({"descriptions": [described]}))
        done = ingot(server, tasks, home, "optimize", SKILL, "--description", "--skills", str(root))
    assert "description change" in done.stdout, done.stdout
    change = queued(home)
    assert change.kind == "description"
    assert change.files["SKILL.md"] == (described_head + BODY).encode()
    assert served_description(change.files["SKILL.md"]) == described


@DESCRIPTIONS
def test_ingot_loop_composes_the_new_body_and_description_without_moving_either(
    head, described, described_head, tmp_path
):
    root, tasks, home = library_with(tmp_path, head)
    LocalTraceStore(home / "traces.jsonl").append(
        TraceRecord("Notes for 1.0", "bad notes", "match", SKILL, "r", "agent-model")
    )
    with scripted_llm() as server:
        server.add(model="judge-model", user_contains="bad notes", reply=grade(0.2))
        server.add(
            model="teacher-model",
            user_contains="A router picks agent skills",
            reply=json.dumps({"descriptions": [described]}),
        )
        server.script_optimizer(REWRITE)
        done = ingot(server, tasks, home, "loop", "--skills", str(root))
    assert f"{SKILL}  0.20  optimized:" in done.stdout and "composed with" in done.stdout, done.stdout
    change = queued(home)
    assert change.kind == "both"
    assert change.files["SKILL.md"] == (described_head + "\n" + REWRITE).encode()
    assert served_description(change.files["SKILL.md"]) == described
