"""Agent Skills validity = the reference. A generated corpus of tricky skill folders is judged by
skills-ref 0.1.1 (the spec's reference validator) and by Ingot's one set of rules
(mcp_server/skillspec.py). They agree, or the disagreement is one of the documented choices
below, each for a stated reason. And one set of rules means one verdict on every served surface:
a folder Ingot serves is one fastmcp's SEP-2640 provider accepts, and a folder Ingot skips is
absent from the tools, `skills/list` and `resources/list` alike, with a warning naming it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from fastmcp.skills import Skill as FastMCPSkill
from fastmcp.skills.models import ListSkillsParams, ListSkillsRequest, ListSkillsResult, SkillFrontmatter
from mcp.client import Client
from skills_ref.validator import validate as reference_validate

from mcp_server.registry import Limits, SkillInvalid, read_skill
from tests.conftest import running_mcp

D = "description: Fills in PDF forms from a spreadsheet of values.\n"
B = "\n# Steps\n\n1. Do it.\n"


def fm(name: str, front: str, body: str = B) -> str:
    return f"---\nname: {name}\n{front}---\n{body}"


# folder name -> SKILL.md text. The cases, and the edges around each rule.
CASES: dict[str, str] = {
    "plain": fm("plain", D),
    "compat-ok": fm("compat-ok", D + "compatibility: Needs Python 3.11 and network access.\n"),
    "compat-long": fm("compat-long", D + "compatibility: " + "x" * 501 + "\n"),
    "compat-500": fm("compat-500", D + "compatibility: " + "x" * 500 + "\n"),
    "compat-list": fm("compat-list", D + "compatibility:\n  - linux\n  - mac\n"),
    "compat-empty": fm("compat-empty", D + "compatibility: ''\n"),
    "license-ok": fm("license-ok", D + "license: Apache-2.0\n"),
    "license-number": fm("license-number", D + "license: 2024\n"),
    "license-null": fm("license-null", D + "license:\n"),
    "dup-name": "---\nname: dup-name\nname: other\n" + D + "---\n" + B,
    "dup-nested": fm("dup-nested", D + "metadata:\n  a: x\n  a: y\n"),
    "extra-field": fm("extra-field", D + "category: testing\n"),
    "flow-metadata": fm("flow-metadata", D + "metadata: {version: '1.0'}\n"),
    "flow-tools": fm("flow-tools", D + "allowed-tools: [Read, Grep]\n"),
    "alias-scalar": fm(
        "alias-scalar", "description: &d Fills in PDF forms from a spreadsheet.\nmetadata:\n  copy: *d\n"
    ),
    "alias-map": fm("alias-map", D + "metadata: &m\n  a: b\nx: *m\n"),
    "bom-crlf": ("\ufeff" + fm("bom-crlf", D)).replace("\n", "\r\n"),
    "crlf": fm("crlf", D).replace("\n", "\r\n"),
    "bom": "\ufeff" + fm("bom", D),
    "café-notes": fm("café-notes", D),
    "Upper": fm("Upper", D),
    "double--hyphen": fm("double--hyphen", D),
    "-lead": fm("-lead", D),
    "trail-": fm("trail-", D),
    "mismatch": fm("other-name", D),
    "n" * 64: fm("n" * 64, D),
    "n" * 65: fm("n" * 65, D),
    "desc-1024": fm("desc-1024", "description: " + "d" * 1024 + "\n"),
    "desc-long": fm("desc-long", "description: " + "d" * 1025 + "\n"),
    "desc-empty": fm("desc-empty", "description: ''\n"),
    "desc-missing": fm("desc-missing", ""),
    "name-missing": "---\n" + D + "---\n" + B,
    "no-front": "# just a body\n",
    "unclosed": "---\nname: unclosed\n" + D + B,
    "metadata-list": fm("metadata-list", D + "metadata:\n  - a\n"),
    "metadata-number": fm("metadata-number", D + "metadata:\n  version: 1\n"),
    "metadata-nested": fm("metadata-nested", D + "metadata:\n  a:\n    b: c\n"),
    "tools-string": fm("tools-string", D + "allowed-tools: Read Grep\n"),
    "tools-list": fm("tools-list", D + "allowed-tools:\n  - Read\n  - Grep\n"),
    "block-dashes": fm("block-dashes", "description: |\n  Fills PDF forms.\n  ---\n  Also merges them.\n"),
    "inline-dashes": fm("inline-dashes", "description: Fills PDF forms --- and merges them.\n"),
    "folded-desc": fm("folded-desc", "description: >\n  Fills PDF forms\n  from values.\n"),
    "empty-body": fm("empty-body", D, ""),
    "name-number": "---\nname: 123\n" + D + "---\n" + B,
    "desc-bool": fm("desc-bool", "description: yes\n"),
    "desc-number": fm("desc-number", "description: 42\n"),
    "null-desc": fm("null-desc", "description: null\n"),
    "desc-spaces": fm("desc-spaces", "description: '   '\n"),
    "key-int": fm("key-int", D + "1: x\n"),
    "front-list": "---\n- a\n- b\n---\n" + B,
    "front-empty": "---\n---\n" + B,
    "date-meta": fm("date-meta", D + "metadata:\n  created: 2024-01-01\n"),
    "quoted-date-meta": fm("quoted-date-meta", D + "metadata:\n  created: '2024-01-01'\n"),
    "tab-indent": fm("tab-indent", D + "metadata:\n\ta: b\n"),
    "ｆｕｌｌ": fm("ｆｕｌｌ", D),
    "trailing-space-name": "---\nname: 'trailing-space-name '\n" + D + "---\n" + B,
    "quoted-name": '---\nname: "quoted-name"\n' + D + "---\n" + B,
    "dashes-then-text": "--- \nname: dashes-then-text\n" + D + "---\n" + B,
    "desc-dash-line": fm("desc-dash-line", "description: Fills PDF forms.\n---\nextra: 1\n"),
    "tagged": fm("tagged", "description: !!binary aGVsbG8=\n"),
}

# Ingot refuses what skills-ref accepts. Every one but `empty-body` is also refused by fastmcp's
# SEP-2640 provider, so serving it through the tools would make it vanish from `skills/list`
# and `resources/list` (the bug this file guards): one verdict everywhere means refusing it.
STRICTER = {
    "café-notes": "non-ASCII name: hosts key skills by ASCII names; fastmcp refuses it",
    "ｆｕｌｌ": "full-width letters are non-ASCII too (skills-ref normalises them); fastmcp refuses it",
    "compat-empty": "empty compatibility: the spec says 1-500 characters; fastmcp refuses it",
    "date-meta": "unquoted date: YAML makes it a date, not JSON; fastmcp refuses it; quote it",
    "desc-bool": "description `yes` is a YAML boolean, not text; fastmcp refuses it",
    "desc-number": "description 42 is a number, not text; fastmcp refuses it",
    "null-desc": "description null is no description; fastmcp refuses it",
    "license-number": "license 2024 is a number, not a license string; fastmcp refuses it",
    "license-null": "an empty license is not a string; fastmcp refuses it",
    "metadata-list": "metadata must be a mapping (the spec); fastmcp refuses a list",
    "trailing-space-name": "a name with a trailing space is not a valid name; fastmcp refuses it",
    "lower-skill": "skill.md: the spec names the file SKILL.md; fastmcp refuses it (case-sensitive hosts)",
    "empty-body": "a SKILL.md without instructions gives the model nothing to follow",
}
# Ingot serves what skills-ref refuses: fields outside the spec's list (real libraries carry
# `version`, `model`, `tags`...; 46 of the 70 skills in the shared dev corpus do). Served, never
# silently: the skill carries a note naming the fields, shown by `ingot skills`.
LENIENT = {
    "extra-field": "top-level fields outside the spec are served with a NOTE naming them",
}
# Served by Ingot and skills-ref alike, but fastmcp's own SKILL.md file reader (not used by the
# provider Ingot serves through) wants the opening line to be exactly '---'.
FASTMCP_READER_ONLY = {"dashes-then-text"}


@pytest.fixture(scope="module")
def tricky_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tricky")
    for folder, text in CASES.items():
        (root / folder).mkdir()
        (root / folder / "SKILL.md").write_bytes(text.encode())
    (root / "lower-skill").mkdir()
    (root / "lower-skill" / "skill.md").write_text(fm("lower-skill", D))
    return root


def ingot_verdict(root: Path, folder: Path) -> str | None:
    """None when Ingot serves the folder, else the rule it broke."""
    try:
        read_skill(root, folder, Limits())
    except SkillInvalid as exc:
        return str(exc)
    return None


def verdicts(root: Path) -> dict[str, tuple[bool, bool]]:
    return {
        folder.name: (not reference_validate(folder), ingot_verdict(root, folder) is None)
        for folder in sorted(root.iterdir())
    }


def test_ingot_and_skills_ref_agree_except_for_the_documented_choices(tricky_root):
    judged = verdicts(tricky_root)
    stricter = {name for name, (ref_ok, ingot_ok) in judged.items() if ref_ok and not ingot_ok}
    lenient = {name for name, (ref_ok, ingot_ok) in judged.items() if ingot_ok and not ref_ok}
    assert stricter == set(STRICTER)
    assert lenient == set(LENIENT)
    agree = len(judged) - len(stricter) - len(lenient)
    assert agree == len(judged) - len(STRICTER) - len(LENIENT) >= 45
    # the issue's own cases, by name: refused by both
    for name in ("dup-name", "dup-nested", "flow-metadata", "alias-scalar", "alias-map", "bom-crlf"):
        assert judged[name] == (False, False), name


def test_each_refusal_names_the_rule_it_broke(tricky_root):
    expected = {
        "dup-name": "key 'name' appears twice",
        "dup-nested": "key 'a' appears twice",
        "flow-metadata": "flow style",
        "alias-scalar": "alias",
        "bom-crlf": "byte-order mark",
        "compat-long": "1-500",
        "compat-list": "compatibility",
        "license-number": "license",
        "café-notes": "non-ASCII",
        "lower-skill": "rename it to SKILL.md",
        "date-meta": "quote it",
        "tagged": "tag",
        "unclosed": "no closing '---'",
        "key-int": "not a string",
    }
    for folder, words in expected.items():
        reason = ingot_verdict(tricky_root, tricky_root / folder)
        assert reason and words in reason, (folder, reason)
        assert "\n" not in reason and "Traceback" not in reason


def test_every_stricter_choice_but_one_is_what_the_sep2640_provider_refuses_too(tricky_root):
    for folder in STRICTER:
        if folder == "empty-body":
            continue
        with pytest.raises(Exception):  # noqa: B017 - fastmcp raises ValueError or pydantic errors
            skill = FastMCPSkill.from_directory(tricky_root / folder)
            assert skill.name == folder


def test_fields_outside_the_spec_are_served_with_a_note_naming_them(tricky_root):
    skill = read_skill(tricky_root, tricky_root / "extra-field", Limits())
    assert any("category" in note for note in skill.notes)
    plain = read_skill(tricky_root, tricky_root / "plain", Limits())
    assert plain.notes == ()


def test_one_verdict_on_every_served_surface(tricky_root, library_factory, caplog):
    caplog.set_level(logging.WARNING, logger="mcp_server")
    library = library_factory(tricky_root)
    served = set(library.skills())
    skipped = {p.folder.name: p.reason for p in library.status().invalid}
    assert served | set(skipped) == {folder.name for folder in tricky_root.iterdir()}
    for folder, reason in skipped.items():
        assert any(folder in r.getMessage() and reason in r.getMessage() for r in caplog.records), folder
    # what Ingot serves, fastmcp's own SEP-2640 model accepts: nothing vanishes from one surface
    for name in served - FASTMCP_READER_ONLY:
        assert FastMCPSkill.from_directory(tricky_root / name).name == name
    for name in served:
        SkillFrontmatter.model_validate(library.get(name).frontmatter)

    async def surfaces(url: str):
        async with Client(url) as client:
            by_tool = set()
            for folder in sorted(served | set(skipped)):
                answer = await client.call_tool("get_skill", {"name": folder})
                if not answer.is_error:
                    by_tool.add(folder)
            request = ListSkillsRequest(params=ListSkillsParams())
            entries = (await client.session.send_request(request, ListSkillsResult)).skills
            resources = (await client.list_resources()).resources
            return by_tool, entries, resources

    with running_mcp(library) as url:
        by_tool, entries, resources = asyncio.run(surfaces(url))
    assert by_tool == served
    assert {e.frontmatter.name for e in entries} == served
    assert {str(r.uri).split("/")[2] for r in resources} == served
