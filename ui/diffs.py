"""Diffs of a candidate against the live skill, file by file, for the review page.

Each changed file gets a unified diff and side-by-side rows built from the same opcodes, so the
two views always agree. Binary or undecodable files are described by size and digest instead of
being diffed; unchanged files are left out. Escaping is the template's job, not this module's.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

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


def _text(data: bytes | None) -> list[str] | None:
    if data is None:
        return []
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


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
        unified = "\n".join(
            difflib.unified_diff(old, new, f"live/{path}", f"candidate/{path}", n=CONTEXT, lineterm="")
        )
        diffs.append(FileDiff(path, status, unified, _rows(old, new)))
    return diffs
