"""SKILL.md as text: split into its frontmatter and body, and rewritten one part at a time.

The split is python-frontmatter's, as the registry reads a skill: its YAML boundary (a line of
three or more dashes and nothing else) and the registry's strict YAML loader. So a `---` inside a
description, inline or on an (indented) line of a block scalar, stays in the frontmatter.
Guarantees: `with_body` keeps the frontmatter byte for byte; `with_description` keeps the body
byte for byte and every other frontmatter key, in its order (their YAML is re-rendered, comments
are not kept). Validating a skill (name, lengths, a body) is `registry.parse_skill_md`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from ingot.errors import SkillInvalid, first_line
from mcp_server.skillspec import StrictYAMLHandler

_HANDLER = StrictYAMLHandler()
BOM = "\ufeff"


@dataclass(frozen=True)
class SkillText:
    """One SKILL.md's text in four verbatim pieces; joined, they are the text again."""

    opening: str  # a byte-order mark if any, and the opening `---` line with its line end
    front: str  # the YAML between the two delimiter lines
    closing: str  # the closing `---` line, with its line end if it has one
    body: str  # everything after the closing line

    @property
    def head(self) -> str:
        return self.opening + self.front + self.closing

    def metadata(self) -> dict[str, Any]:
        """The frontmatter as the registry parses it (a mapping with string keys), in file order."""
        try:
            return _HANDLER.load(self.front)
        except yaml.YAMLError as exc:
            raise SkillInvalid(f"frontmatter is not valid YAML: {first_line(exc)}") from exc


def split(text: str) -> SkillText:
    """SKILL.md text in its parts, or SkillInvalid saying what is missing."""
    rest = text.lstrip(BOM)
    bom = text[: len(text) - len(rest)]
    boundaries = _HANDLER.FM_BOUNDARY.finditer(rest)
    opening = next(boundaries, None)
    if opening is None or opening.start() != 0:
        raise SkillInvalid("SKILL.md must start with YAML frontmatter between '---' lines")
    closing = next(boundaries, None)
    if closing is None:
        raise SkillInvalid("SKILL.md's frontmatter has no closing '---' line")
    front_at = _line_end(rest, 0)
    body_at = _line_end(rest, closing.start())
    return SkillText(
        bom + rest[:front_at],
        rest[front_at : closing.start()],
        rest[closing.start() : body_at],
        rest[body_at:],
    )


def with_description(text: str, description: str) -> str:
    """`text` with its description replaced: the body byte for byte, the other keys in order."""
    parts = split(text)
    meta = parts.metadata()
    meta["description"] = description
    front = _HANDLER.export(meta, sort_keys=False, width=100) + "\n"
    written = parts.opening + front + parts.closing + parts.body
    if split(written).body != parts.body:  # the dumper wrote a delimiter line: never move the body
        raise SkillInvalid("the new description cannot be written without moving the body")
    return written


def with_body(text: str, body: str) -> str:
    """`text` with its body replaced by `body` (after one blank line); the frontmatter byte for byte."""
    head = split(text).head
    return head + ("" if head.endswith("\n") else "\n") + "\n" + body.strip() + "\n"


def _line_end(text: str, at: int) -> int:
    """The index just past the line end of the line holding `at` (the text's end if none)."""
    newline = text.find("\n", at)
    return len(text) if newline < 0 else newline + 1
