"""Diffs show every byte a reviewer approves: nothing invisible, nothing reflowed."""

from __future__ import annotations

from ui.diffs import NO_FINAL_NEWLINE, file_diffs, risk


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


def test_a_new_file_is_diffed_from_dev_null_and_a_removed_one_to_it():
    added = only({}, {"scripts/run.sh": b"echo hi\n"})
    assert added.unified.splitlines()[:2] == ["--- /dev/null", "+++ candidate/scripts/run.sh"]
    removed = only({"notes.md": b"old\n"}, {})
    assert removed.unified.splitlines()[:2] == ["--- live/notes.md", "+++ /dev/null"]
    changed = only({"SKILL.md": b"a\n"}, {"SKILL.md": b"b\n"})
    assert changed.unified.splitlines()[:2] == ["--- live/SKILL.md", "+++ candidate/SKILL.md"]


SKILL = "---\nname: demo\ndescription: Demo things.\n---\n"


def test_the_risk_summary_counts_lines_and_the_share_of_the_body_changed_and_kept():
    live = {"SKILL.md": (SKILL + "# Demo\n\nOne.\nTwo.\nThree.\nFour.\n").encode()}
    kept = {"SKILL.md": (SKILL + "# Demo\n\nOne.\nTwo.\nThree.\nFour.\nFive.\n").encode(), "x.bin": b"\0"}
    summary = risk("demo", live, kept, retention_warn=0.5)
    assert (summary.files, summary.added, summary.removed, summary.binary) == (2, 1, 0, 1)
    assert summary.retained == 1.0 and summary.warning is None
    assert round(summary.body_changed, 3) == round(1 - 12 / 13, 3)  # 6 of 6 and 7 lines match
    gutted = {"SKILL.md": (SKILL + "# Demo\n\nSomething else entirely.\n").encode()}
    summary = risk("demo", live, gutted, retention_warn=0.5)
    assert (summary.added, summary.removed) == (1, 4)
    assert summary.retained == 1 / 5 and "keeps 20%" in summary.warning
    new = risk("demo", {}, kept, retention_warn=0.5)
    assert new.new_skill and new.warning is None and new.body_changed == 1.0


def test_the_risk_of_a_body_without_valid_frontmatter_is_still_measured():
    summary = risk("demo", {"SKILL.md": b"no frontmatter\n"}, {"SKILL.md": b"no frontmatter\nmore\n"}, 0.5)
    assert (summary.added, summary.removed, summary.retained) == (1, 0, 1.0)
