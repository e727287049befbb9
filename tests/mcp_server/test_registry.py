"""Registry: discovery, Agent Skills validation, content-addressed revisions, bad input."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingot.errors import SkillChanged, SkillNotFound
from mcp_server.registry import Limits, Registry, manifest_revision, read_skill
from mcp_server.skillfiles import read_served_file
from tests.conftest import BUNDLED_SKILLS, write_skill


def scan(*roots: Path, limits: Limits | None = None) -> Registry:
    registry = Registry(tuple(roots), limits or Limits())
    registry.reload()
    return registry


def reasons(registry: Registry) -> dict[str, str]:
    return {p.folder.name: p.reason for p in registry.problems()}


def test_bundled_example_skills_are_all_valid_and_varied():
    registry = scan(BUNDLED_SKILLS)
    assert registry.problems() == []
    assert len(registry.skills()) >= 6
    for skill in registry.skills().values():
        assert len(skill.revision) == 64 and skill.body.strip()


def test_a_multi_file_skill_lists_every_file_in_its_manifest(tmp_path):
    write_skill(
        tmp_path, "alpha", "Alpha things.", files={"scripts/run.sh": "echo hi\n", "data.bin": b"\x00\x01\x02"}
    )
    skill = scan(tmp_path).skills()["alpha"]
    assert [f.path for f in skill.files] == ["SKILL.md", "data.bin", "scripts/run.sh"]
    assert skill.revision == manifest_revision(skill.files)


def test_first_root_wins_a_duplicate_name_with_a_warning(tmp_path, caplog):
    first, second = tmp_path / "a", tmp_path / "b"
    write_skill(first, "same", "From the first root.")
    write_skill(second, "same", "From the second root.")
    with caplog.at_level(logging.WARNING):
        registry = scan(first, second)
    assert registry.skills()["same"].description == "From the first root."
    assert "duplicate skill 'same'" in caplog.text


def test_dot_folders_and_dot_files_are_skipped(tmp_path):
    write_skill(tmp_path, "hidden", "Hidden.", folder=".hidden")
    path = write_skill(tmp_path, "seen", "Seen.")
    (path / ".DS_Store").write_bytes(b"junk")
    registry = scan(tmp_path)
    assert list(registry.skills()) == ["seen"]
    assert [f.path for f in registry.skills()["seen"].files] == ["SKILL.md"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("---\nname: bad\ndescription: [unclosed\n---\nbody\n", "not valid YAML"),
        ("no frontmatter at all\n", "must start with YAML frontmatter"),
        ("---\n- a\n- b\n---\nbody\n", "must be a YAML mapping"),
        ("---\ndescription: no name\n---\nbody\n", "needs a 'name'"),
        ("---\nname: bad\n---\nbody\n", "needs a 'description'"),
        ("---\nname: bad\ndescription: ok\n---\n   \n", "no body"),
        ("---\nname: Bad_Name\ndescription: ok\n---\nbody\n", "lowercase letters"),
        ("---\nname: bad--name\ndescription: ok\n---\nbody\n", "single"),
        ("---\nname: other\ndescription: ok\n---\nbody\n", "must equal the folder name"),
        ("---\nname: bad\ndescription: ok\nmetadata:\n  - 1\n---\nbody\n", "'metadata' must be a mapping"),
        ("---\na: &x [1]\nb: *x\nname: bad\ndescription: ok\n---\nbody\n", "aliases"),
        ("---\na: &x [*x]\nname: bad\ndescription: ok\n---\nbody\n", "aliases"),
        (
            "---\na: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
            "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
            "name: bad\ndescription: ok\n---\nbody\n",
            "aliases",
        ),
    ],
)
def test_malformed_skill_md_is_skipped_with_a_reason(tmp_path, content, expected):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "SKILL.md").write_text(content)
    write_skill(tmp_path, "good", "Still served.")
    registry = scan(tmp_path)
    assert list(registry.skills()) == ["good"]
    assert expected in reasons(registry)["bad"]


def test_a_two_megabyte_description_is_refused_by_size_or_by_length(tmp_path):
    huge = "x" * (2 << 20)
    write_skill(tmp_path, "huge", huge)
    assert "over the 1048576-byte file limit" in reasons(scan(tmp_path))["huge"]
    roomy = Limits(max_file_bytes=4 << 20)
    assert "the limit is 1024" in reasons(scan(tmp_path, limits=roomy))["huge"]


def test_binary_and_non_utf8_skill_md_are_refused(tmp_path):
    (tmp_path / "binary").mkdir()
    (tmp_path / "binary" / "SKILL.md").write_bytes(b"---\nname: binary\x00\n---\n")
    (tmp_path / "latin").mkdir()
    (tmp_path / "latin" / "SKILL.md").write_bytes(
        "---\nname: latin\ndescription: café\n---\nb\n".encode("latin-1")
    )
    found = reasons(scan(tmp_path))
    assert "binary" in found["binary"]
    assert "not valid UTF-8" in found["latin"]


def test_a_symlink_leaving_the_folder_is_refused_but_an_inner_one_is_fine(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not serve")
    root = tmp_path / "root"
    escape = write_skill(root, "escape", "Escapes.")
    (escape / "leak.txt").symlink_to(secret)
    inner = write_skill(root, "inner", "Inner link.", files={"a.txt": "A"})
    (inner / "b.txt").symlink_to(inner / "a.txt")
    registry = scan(root)
    assert "symlink that leaves the skill folder" in reasons(registry)["escape"]
    assert [f.path for f in registry.skills()["inner"].files] == ["SKILL.md", "a.txt", "b.txt"]


def test_device_files_and_pipes_are_refused(tmp_path):
    path = write_skill(tmp_path, "pipe", "Has a FIFO.")
    os.mkfifo(path / "fifo")
    assert "not a regular file" in reasons(scan(tmp_path))["pipe"]


def test_a_folder_without_skill_md_is_reported(tmp_path):
    (tmp_path / "empty-folder").mkdir()
    assert reasons(scan(tmp_path))["empty-folder"] == "no SKILL.md in the folder"


def test_empty_and_missing_roots_serve_nothing_without_failing(tmp_path):
    registry = scan(tmp_path, tmp_path / "does-not-exist")
    assert registry.skills() == {} and registry.problems() == []


def test_reload_counts_added_changed_removed_and_invalid(tmp_path):
    registry = Registry((tmp_path,))
    write_skill(tmp_path, "one", "One.")
    write_skill(tmp_path, "two", "Two.")
    write_skill(tmp_path, "gone", "Gone soon.")
    assert registry.reload().counts() == {"added": 3, "changed": 0, "removed": 0, "invalid": 0}
    write_skill(tmp_path, "one", "One, edited.")
    shutil.rmtree(tmp_path / "gone")
    (tmp_path / "two" / "SKILL.md").write_text("---\nname: [broken\n---\n")
    write_skill(tmp_path, "three", "Three.")
    report = registry.reload()
    assert (report.added, report.changed, report.removed) == (("three",), ("one",), ("gone",))
    assert len(report.invalid) == 1 and "still serving the last valid revision" in report.invalid[0].reason


def test_a_broken_edit_keeps_the_last_valid_revision_serving_until_fixed(tmp_path):
    registry = Registry((tmp_path,))
    write_skill(tmp_path, "notes", "Writes notes.")
    registry.reload()
    good = registry.skills()["notes"].revision
    (tmp_path / "notes" / "SKILL.md").write_text("")  # an editor's truncate, before its write
    assert registry.reload().counts()["changed"] == 0
    assert registry.skills()["notes"].revision == good
    write_skill(tmp_path, "notes", "Writes notes, edited.")
    assert registry.reload().changed == ("notes",) and registry.problems() == []


def test_reading_a_file_checks_it_against_the_served_revision(tmp_path):
    path = write_skill(tmp_path, "alpha", "Alpha.", files={"notes.md": "v1"})
    skill = scan(tmp_path).skills()["alpha"]
    assert read_served_file(skill, "notes.md") == b"v1"
    (path / "notes.md").write_text("v2")
    with pytest.raises(SkillChanged, match="changed on disk"):
        read_served_file(skill, "notes.md")
    with pytest.raises(SkillNotFound):
        read_served_file(skill, "../secret")
    (path / "notes.md").unlink()
    with pytest.raises(SkillChanged, match="gone from disk"):
        read_served_file(skill, "notes.md")


def test_a_listed_file_swapped_for_a_pipe_or_a_link_is_refused_without_blocking(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    path = write_skill(tmp_path / "root", "alpha", "Alpha.", files={"a.md": "A", "b.md": "private"})
    skill = scan(tmp_path / "root").skills()["alpha"]
    (path / "a.md").unlink()
    os.mkfifo(path / "a.md")
    with pytest.raises(SkillChanged, match="not a regular file"):
        read_served_file(skill, "a.md")  # returns at once: O_NONBLOCK
    (path / "b.md").unlink()
    (path / "b.md").symlink_to(secret)  # same bytes, but outside the folder
    with pytest.raises(SkillChanged, match="leaves the skill folder"):
        read_served_file(skill, "b.md")


file_names = st.lists(
    st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8})?\.txt", fullmatch=True), min_size=1, max_size=5, unique=True
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=file_names, data=st.data())
def test_revision_changes_iff_a_byte_changes_and_ignores_order_and_mtime(tmp_path_factory, names, data):
    names = [n for n in names if not any(n.startswith(o[:-4] + "/") for o in names)]
    contents = {n: data.draw(st.binary(max_size=64)) for n in names}
    order = data.draw(st.permutations(list(contents)))

    def build(folder_root: Path, files: dict[str, bytes], sequence: list[str]) -> str:
        folder = write_skill(folder_root, "prop", "Property skill.")
        for name in sequence:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(files[name])
            os.utime(folder / name, (data.draw(st.integers(1, 2**31)),) * 2)
        return read_skill(folder_root, folder, Limits()).revision

    base = build(tmp_path_factory.mktemp("a"), contents, list(contents))
    assert build(tmp_path_factory.mktemp("b"), contents, order) == base
    victim = data.draw(st.sampled_from(list(contents)))
    changed = dict(contents)
    flip = bytearray(changed[victim] or b"\x00")
    position = data.draw(st.integers(0, len(flip) - 1))
    flip[position] ^= data.draw(st.integers(1, 255))
    changed[victim] = bytes(flip)
    assert build(tmp_path_factory.mktemp("c"), changed, list(changed)) != base


def test_a_watcher_reload_reads_only_the_folders_holding_the_changed_paths(tmp_path):
    registry = Registry((tmp_path,))
    for name in ("one", "two", "three"):
        write_skill(tmp_path, name, f"Skill {name}.")
    registry.reload()
    write_skill(tmp_path, "one", "One, edited.")
    write_skill(tmp_path, "two", "Two, edited but not reported.")
    report = registry.reload([tmp_path / "one" / "SKILL.md"])
    assert report.changed == ("one",)
    assert registry.skills()["two"].description == "Skill two."
    (tmp_path / "three" / "SKILL.md").unlink()
    (tmp_path / "three").rmdir()
    assert registry.reload([tmp_path / "three"]).removed == ("three",)
    # A path outside every skill folder (here: the root itself) means a full re-scan.
    assert registry.reload([tmp_path]).changed == ("two",)


def test_odd_folders_are_skipped_with_reasons_and_never_break_the_scan(tmp_path):
    root = tmp_path / "root"
    loop = write_skill(root, "looping", "Has a symlink loop.")
    (loop / "a.txt").symlink_to(loop / "b.txt")
    (loop / "b.txt").symlink_to(loop / "a.txt")
    badname = write_skill(root, "badname", "Has a non-UTF-8 file name.")
    (badname / os.fsdecode(b"\xff.txt")).write_text("x")
    (root / "keys").mkdir()
    (root / "keys" / "SKILL.md").write_text("---\nname: keys\ndescription: ok\non: demand\n---\nbody\n")
    binary = root / "binary-value"
    binary.mkdir()
    (binary / "SKILL.md").write_text(
        "---\nname: binary-value\ndescription: ok\nx: !!binary aGVsbG8=\n---\nb\n"
    )
    infinite = root / "infinite"
    infinite.mkdir()
    (infinite / "SKILL.md").write_text("---\nname: infinite\ndescription: ok\nx: .inf\n---\nbody\n")
    hidden = write_skill(root, "hidden-link", "Links to a dot file.", files={".env": "API_KEY=abc"})
    (hidden / "env.txt").symlink_to(hidden / ".env")
    elsewhere = write_skill(tmp_path / "elsewhere", "linked", "A skill folder that is a symlink.")
    (root / "linked").symlink_to(elsewhere)
    write_skill(root, "fine", "Still served.")
    registry = scan(root)
    assert list(registry.skills()) == ["fine"]
    found = reasons(registry)
    assert "broken or looping symlink" in found["looping"]
    assert "not valid UTF-8" in found["badname"]
    assert "is not a string" in found["keys"]
    assert "explicit YAML tag" in found["binary-value"]
    assert "not finite" in found["infinite"]
    assert "hidden file" in found["hidden-link"]
    assert "skill folder is a symlink" in found["linked"]


def test_adding_removing_or_renaming_a_file_changes_the_revision(tmp_path):
    path = write_skill(tmp_path, "alpha", "Alpha.", files={"a.md": "same"})
    base = read_skill(tmp_path, path, Limits()).revision
    (path / "b.md").write_text("new")
    added = read_skill(tmp_path, path, Limits()).revision
    (path / "b.md").unlink()
    assert read_skill(tmp_path, path, Limits()).revision == base
    (path / "a.md").rename(path / "c.md")
    renamed = read_skill(tmp_path, path, Limits()).revision
    assert len({base, added, renamed}) == 3


def test_a_missing_root_is_warned_about_once_not_on_every_rescan(tmp_path, caplog):
    caplog.set_level("INFO", logger="mcp_server.registry")
    root = tmp_path / "skills"
    registry = Registry((root,))
    for _ in range(5):  # a watcher rescans every tick while the root is gone
        registry.reload()
    assert [r.getMessage() for r in caplog.records].count(
        f"skills root {root} does not exist; serving nothing from it meanwhile"
    ) == 1
    write_skill(root, "alpha", "Alpha does alpha things.")
    assert registry.reload().added == ("alpha",)
    assert any(r.getMessage() == f"skills root {root} is back" for r in caplog.records)
    shutil.rmtree(root)
    registry.reload()
    assert sum("does not exist" in r.getMessage() for r in caplog.records) == 2  # gone again: said again
