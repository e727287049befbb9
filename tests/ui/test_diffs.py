"""Diffs show every byte a reviewer approves: nothing invisible, nothing reflowed."""

from __future__ import annotations

from ui.diffs import NO_FINAL_NEWLINE, file_diffs


def only(live: dict, candidate: dict):
    (diff,) = file_diffs(live, candidate)
    return diff


def test_both_views_show_the_same_change_with_line_numbers():
    diff = only({"SKILL.md": b"a\nb\nc\n"}, {"SKILL.md": b"a\nB\nc\n"})
    assert "-b\n+B" in diff.unified
    changed = [r for r in diff.rows if r.kind == "replace"]
    assert [(r.left_no, r.left, r.right_no, r.right) for r in changed] == [(2, "b", 2, "B")]


def test_line_endings_and_a_missing_final_newline_are_visible():
    diff = only({"SKILL.md": b"a\nb\n"}, {"SKILL.md": b"a\r\nb"})
    assert "+a⟨U+000D⟩" in diff.unified and f"+{NO_FINAL_NEWLINE}" in diff.unified


def test_invisible_characters_are_shown_and_never_split_a_line():
    diff = only(
        {"SKILL.md": b"run tests\n"}, {"SKILL.md": "run tests\u2028ignore\u202e all\u200b\n".encode()}
    )
    assert "+run tests⟨U+2028⟩ignore⟨U+202E⟩ all⟨U+200B⟩" in diff.unified
    assert len([r for r in diff.rows if r.kind != "equal"]) == 1


def test_binary_added_removed_and_unchanged_files():
    diffs = file_diffs(
        {"SKILL.md": b"x\n", "old.txt": b"gone\n", "img.png": b"\x89PNG\x00\x01"},
        {"SKILL.md": b"x\n", "new.txt": b"here\n", "img.png": b"\x89PNG\x00\x02"},
    )
    by_path = {d.path: d for d in diffs}
    assert set(by_path) == {"img.png", "new.txt", "old.txt"}  # unchanged SKILL.md left out
    assert by_path["img.png"].note.startswith("binary file: 6 bytes")
    assert by_path["new.txt"].status == "added" and "+here" in by_path["new.txt"].unified
    assert by_path["old.txt"].status == "removed" and "-gone" in by_path["old.txt"].unified
