"""Diffs of a candidate against the live skill, file by file, for the review page.

Each changed file gets a unified diff and side-by-side rows built from the same opcodes, so the
two views always agree. Lines are split on "\n" only, and characters a reviewer could not see
(carriage returns, form feeds, Unicode line separators, zero-width and bidi controls) are shown
as ⟨U+XXXX⟩, with a missing final newline marked, so approved bytes are bytes that were shown.
Binary or undecodable files are described by size and digest instead of being diffed; unchanged
files are left out; an added or removed file is headed /dev/null on its missing side, as git does.
`risk` sums a change up from the same bytes, whatever its source (measure/size.py: lines added
and removed, the share of SKILL.md's body changed and retained), with the reviewer's warning.
HTML escaping is the template's job, not this one's.
"""

from __future__ import annotations

import difflib
import hashlib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from optimize.measure.size import ChangeSize, change_size

CONTEXT = 3
MAX_DIFF_LINES = 4000  # beyond this a file's diff is summarised, to keep the page usable


@dataclass(frozen=True)
class Row:
    """One side-by-side row: kind is equal, replace, delete, insert or skip (elided context)."""

    kind: str
    left_no: int | None
    left: str
    right_no: int | None
    right: str


@dataclass(frozen=True)
class FileDiff:
    path: str
    status: str  # added | removed | modified
    unified: str
    rows: tuple[Row, ...]
    note: str | None = None  # set instead of a diff for binary or very large files


NO_FINAL_NEWLINE = "\\ No newline at end of file"


def _visible(line: str) -> str:
    return "".join(
        f"⟨U+{ord(ch):04X}⟩" if ch != "\t" and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch
        for ch in line
    )


def _text(data: bytes | None) -> list[str] | None:
    if data is None:
        return []
    if b"\x00" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = [_visible(line) for line in text.split("\n")]
    if lines[-1] == "":
        lines.pop()
    else:
        lines.append(NO_FINAL_NEWLINE)
    return lines


def _describe(data: bytes | None) -> str:
    if data is None:
        return "absent"
    return f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]}"


def _rows(old: list[str], new: list[str]) -> tuple[Row, ...]:
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for group in matcher.get_grouped_opcodes(CONTEXT):
        if rows:
            rows.append(Row("skip", None, "…", None, "…"))
        for tag, i1, i2, j1, j2 in group:
            left, right = old[i1:i2], new[j1:j2]
            for k in range(max(len(left), len(right))):
                rows.append(
                    Row(
                        tag,
                        i1 + k + 1 if k < len(left) else None,
                        left[k] if k < len(left) else "",
                        j1 + k + 1 if k < len(right) else None,
                        right[k] if k < len(right) else "",
                    )
                )
    return tuple(rows)


def file_diffs(live: Mapping[str, bytes], candidate: Mapping[str, bytes]) -> list[FileDiff]:
    """Every file that differs between `live` and `candidate`, SKILL.md first."""
    paths = sorted(set(live) | set(candidate), key=lambda p: (p != "SKILL.md", p))
    diffs = []
    for path in paths:
        before, after = live.get(path), candidate.get(path)
        if before == after:
            continue
        status = "added" if before is None else "removed" if after is None else "modified"
        old, new = _text(before), _text(after)
        if old is None or new is None:
            note = f"binary file: {_describe(before)} → {_describe(after)}"
            diffs.append(FileDiff(path, status, "", (), note))
            continue
        if len(old) + len(new) > MAX_DIFF_LINES:
            note = (
                f"too large to show ({len(old)} → {len(new)} lines): {_describe(before)} → {_describe(after)}"
            )
            diffs.append(FileDiff(path, status, "", (), note))
            continue
        # As git shows them: a file that did not exist (or no longer will) is /dev/null.
        before_name = "/dev/null" if before is None else f"live/{path}"
        after_name = "/dev/null" if after is None else f"candidate/{path}"
        unified = "\n".join(difflib.unified_diff(old, new, before_name, after_name, n=CONTEXT, lineterm=""))
        if not unified:  # cannot happen if the rules above are complete; never show "no change"
            note = f"differs in bytes this view cannot show: {_describe(before)} → {_describe(after)}"
            diffs.append(FileDiff(path, status, "", (), note))
            continue
        diffs.append(FileDiff(path, status, unified, _rows(old, new)))
    return diffs


@dataclass(frozen=True)
class Risk:
    """A change's size and shape, from its bytes (measure/size.py), and the warning a reviewer needs."""

    size: ChangeSize
    warning: str | None  # set when the share of the body kept is below RETENTION_WARN, or a removal
    removal: bool = False  # the candidate is nothing: the skill stops being served

    @property
    def added(self) -> int:
        return self.size.added

    @property
    def removed(self) -> int:
        return self.size.removed

    @property
    def files(self) -> int:
        return self.size.files

    @property
    def binary(self) -> int:
        return self.size.binary

    @property
    def body_changed(self) -> float:
        return self.size.body_changed

    @property
    def retained(self) -> float | None:
        return self.size.retained

    @property
    def new_skill(self) -> bool:
        return self.size.retained is None


def risk(name: str, live: Mapping[str, bytes], candidate: Mapping[str, bytes], retention_warn: float) -> Risk:
    """The change-risk summary of replacing `live` with `candidate` (empty `live`: a new skill)."""
    size = change_size(name, live, candidate)
    warning = None
    if live and not candidate:  # nothing new to read: what goes is the whole live skill
        return Risk(
            size,
            f"removes {name}: agents that route to it get no skill from the next request on; "
            "read what it served (every line below is removed) and where its tasks go (routing impact)",
            removal=True,
        )
    if size.retained is not None and size.retained < retention_warn:
        warning = (
            f"keeps {size.retained:.0%} of the live body's lines (below RETENTION_WARN "
            f"{retention_warn:.0%}): read the whole new body, not just the diff"
        )
    return Risk(size, warning)
