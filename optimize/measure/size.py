"""How big a change is, measured from its bytes: what a candidate is called wherever it is listed.

Lines added and removed over every text file, files that differ but are not text, the share of
SKILL.md's body that changed (1 - difflib's line ratio) and the share of the live body's lines
it keeps (retention.py). A search strategy's intent ("a minimal additive edit") describes what
was asked for, not what was done, so a candidate's label is this, never that. Pure; whatever
proposed the change (an agent, an operator, the inbox, the optimizer), the same numbers.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from ingot.errors import SkillInvalid
from mcp_server.registry import parse_skill_md
from mcp_server.skillmd import split
from optimize.measure.retention import retention


@dataclass(frozen=True)
class ChangeSize:
    """A change's size and shape (no evidence needed)."""

    files: int  # files added, removed or modified
    added: int  # text lines added, over every file
    removed: int  # text lines removed
    binary: int  # files that differ but cannot be diffed as text (counted, not measured)
    body_changed: float  # share of SKILL.md's body lines changed
    retained: float | None  # share of the live body's non-blank lines kept; None for a new skill

    @property
    def label(self) -> str:
        """The candidate's name, e.g. "+2 / -86 lines, 98% of the body's lines changed (diff), 2%
        of the live body's lines kept": two different measures, each named."""
        parts = [f"+{self.added} / -{self.removed} lines"]
        if self.binary:
            parts.append(f"{self.binary} binary file(s)")
        if self.retained is None:
            parts.append("a new skill")
        else:
            parts.append(
                f"{self.body_changed:.0%} of the body's lines changed (diff), "
                f"{self.retained:.0%} of the live body's lines kept"
            )
        return ", ".join(parts)


def _lines(data: bytes | None) -> list[str] | None:
    if data is None:
        return []
    if b"\x00" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def body(data: bytes | None, name: str) -> str:
    """SKILL.md's body (after its frontmatter); the whole text when the frontmatter does not parse."""
    if data is None:
        return ""
    text = data.decode("utf-8", "replace")
    try:
        return parse_skill_md(text, name)[2]
    except SkillInvalid:  # admission refuses such a candidate; its size is still worth showing
        try:
            return split(text).body
        except SkillInvalid:  # no frontmatter to split off
            return text


def change_size(name: str, live: Mapping[str, bytes], candidate: Mapping[str, bytes]) -> ChangeSize:
    """The size of replacing `live` with `candidate` (empty `live`: a new skill; empty
    `candidate`: a removal, every line removed)."""
    added = removed = binary = files = 0
    for path in set(live) | set(candidate):
        before, after = live.get(path), candidate.get(path)
        if before == after:
            continue
        files += 1
        old, new = _lines(before), _lines(after)
        if old is None or new is None:
            binary += 1
            continue
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
            if tag != "equal":
                removed += i2 - i1
                added += j2 - j1
    old_body, new_body = body(live.get("SKILL.md"), name), body(candidate.get("SKILL.md"), name)
    matcher = difflib.SequenceMatcher(a=old_body.splitlines(), b=new_body.splitlines(), autojunk=False)
    changed = 1.0 - matcher.ratio() if old_body or new_body else 0.0
    retained = retention(old_body, new_body) if live else None
    return ChangeSize(files, added, removed, binary, changed, retained)
