"""What a change changes, and which evidence applies to it: the one table.

A change is classified by its bytes against the live skill, whoever made it (an agent, an
operator, the inbox, the optimizer): `create` (nothing is live under its name), `removal` (the
skill stops being served), `description` (only the frontmatter `description` moves), `body` (the
body, another frontmatter key or any other file moves) or `both` (the description and anything
else). `APPLIES` says, for every kind, which passport cell applies and why the others cannot;
the passport, approval, autonomy, `ingot --help` and ARCHITECTURE.md all read this one table.
Pure: no files, no settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ingot.errors import IngotError
from mcp_server.registry import parse_skill_md

KINDS = ("create", "body", "description", "both", "removal")
CELLS = ("held-out A/B", "replay", "routing impact", "sandbox checks", "safety", "cost")

APPLIES_ALWAYS = "applies"
# The sandbox cell applies only where code runs: skill scripts, or the task set's `check:` specs.
IF_CODE_RUNS = "applies when code runs"

_NO_BODY = "the served body is unchanged"
APPLIES: Mapping[str, Mapping[str, str]] = {
    "create": {
        "held-out A/B": APPLIES_ALWAYS,  # against no skill at all
        "replay": "n/a: a new skill has no blessed runs to replay",
        "routing impact": APPLIES_ALWAYS,
        "sandbox checks": IF_CODE_RUNS,
        "safety": APPLIES_ALWAYS,
        "cost": "n/a: nothing is served in its place to compare the cost with",
    },
    "body": dict.fromkeys(CELLS[:3], APPLIES_ALWAYS)
    | {"sandbox checks": IF_CODE_RUNS, "safety": APPLIES_ALWAYS, "cost": APPLIES_ALWAYS},
    "description": {
        "held-out A/B": f"n/a: {_NO_BODY}; routing impact measures a description",
        "replay": f"n/a: {_NO_BODY}, so are its blessed runs' answers",
        "routing impact": APPLIES_ALWAYS,
        "sandbox checks": "n/a: a description runs no code",
        "safety": APPLIES_ALWAYS,
        "cost": f"n/a: {_NO_BODY}, so is its serving cost",
    },
    "both": dict.fromkeys(CELLS[:3], APPLIES_ALWAYS)
    | {"sandbox checks": IF_CODE_RUNS, "safety": APPLIES_ALWAYS, "cost": APPLIES_ALWAYS},
    "removal": {
        "held-out A/B": "n/a: nothing is served in its place to measure",
        "replay": "n/a: nothing will serve its blessed runs",
        "routing impact": APPLIES_ALWAYS,  # where its requests go now, and that no other skill loses
        "sandbox checks": "n/a: a removal runs no code",
        "safety": "n/a: a removal adds no text to serve",
        "cost": "n/a: nothing is served in its place",
    },
}

# What autonomy may learn per kind: a `both` change needs the trust of both classes; a removal
# is never automatic (no evidence can say a skill is no longer wanted).
AUTONOMY_CLASSES: Mapping[str, tuple[str, ...]] = {
    "create": ("create",),
    "body": ("body",),
    "description": ("description",),
    "both": ("body", "description"),
    "removal": (),
}


def why_not_applicable(kind: str, cell: str) -> str | None:
    """Why `cell` cannot apply to a `kind` change, or None when it applies (perhaps conditionally)."""
    rule = APPLIES[kind][cell]
    return rule.removeprefix("n/a: ") if rule.startswith("n/a: ") else None


def table_rows() -> list[tuple[str, ...]]:
    """The table as rows (cell, then one column per kind): for `ingot --help` and the docs."""
    return [(cell, *(_short(APPLIES[kind][cell]) for kind in KINDS)) for cell in CELLS]


def _short(rule: str) -> str:
    return "n/a" if rule.startswith("n/a") else ("if code runs" if rule == IF_CODE_RUNS else "applies")


@dataclass(frozen=True)
class Changes:
    """What a candidate changes relative to the live files."""

    description: bool
    body: bool
    frontmatter: bool  # a frontmatter key other than the description (routing policy, ...)
    files: tuple[str, ...]  # other files added, removed or edited
    new: bool = False  # nothing is live: everything is new
    removed: bool = False  # no candidate: the skill stops being served

    @property
    def kind(self) -> str:
        if self.new:
            return "create"
        if self.removed:
            return "removal"
        rest = self.body or self.frontmatter or bool(self.files)
        if self.description:
            return "both" if rest else "description"
        return "body"

    def as_json(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "body": self.body,
            "frontmatter": self.frontmatter,
            "files": list(self.files),
            "new": self.new,
            "removed": self.removed,
            "kind": self.kind,
        }


def what_changes(
    champion: Mapping[str, bytes] | None, candidate: Mapping[str, bytes] | None, skill: str
) -> Changes:
    """Compare the candidate's files with the live ones, part by part (parsed, so re-quoting the
    frontmatter is no change). An unparseable side counts as changing everything it holds."""
    if candidate is None:
        return Changes(False, False, False, tuple(sorted(champion or ())), removed=True)
    if champion is None:
        return Changes(True, True, True, tuple(sorted(p for p in candidate if p != "SKILL.md")), new=True)
    before, after = _parts(champion, skill), _parts(candidate, skill)
    others = tuple(
        sorted(
            path
            for path in set(champion) | set(candidate)
            if path != "SKILL.md" and champion.get(path) != candidate.get(path)
        )
    )
    if before is None or after is None:
        return Changes(True, True, True, others)
    return Changes(before[0] != after[0], before[1] != after[1], before[2] != after[2], others)


def _parts(files: Mapping[str, bytes], skill: str) -> tuple[str, str, dict[str, Any]] | None:
    """(description, body, every other frontmatter key) of SKILL.md, or None if it cannot be read."""
    try:
        _, description, body, meta = parse_skill_md(files["SKILL.md"].decode("utf-8"), skill)
    except (KeyError, UnicodeDecodeError, IngotError):
        return None
    return description, body, {k: v for k, v in meta.items() if k != "description"}


def kind_of(evidence: Mapping[str, Any]) -> str:
    """The kind of change an evidence bundle was measured for, from what it records it changes;
    a bundle from before `changes` recorded a kind ("rewrite": every cell applies, as `both`)."""
    changes = evidence.get("changes")
    if isinstance(changes, Mapping) and changes.get("kind") in KINDS:
        return str(changes["kind"])
    if isinstance(changes, Mapping) and "description" in changes and "body" in changes:
        legacy = Changes(
            bool(changes.get("description")),
            bool(changes.get("body")),
            False,
            tuple(changes.get("files") or ()),
            bool(changes.get("new")),
        )
        return legacy.kind
    recorded = evidence.get("kind")
    return str(recorded) if recorded in KINDS else "both"
