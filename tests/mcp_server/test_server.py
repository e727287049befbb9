"""The MCP server over real streamable HTTP on loopback, called by fastmcp's and the mcp SDK's clients."""

from __future__ import annotations

import asyncio
import shutil

import httpx
import pytest
from fastmcp import Client as FastMCPClient
from mcp.client import Client as SDKClient

from tests.conftest import BUNDLED_SKILLS, running_mcp, wait_for, write_skill


@pytest.fixture
def skills_root(tmp_path):
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    return root


@pytest.fixture
def served(skills_root, library_factory):
    library = library_factory(skills_root)
    with running_mcp(library) as url:
        yield url, library


def call(url: str, tool: str, args: dict | None = None, raise_on_error: bool = True):
    async def go():
        async with FastMCPClient(url) as client:
            return await client.call_tool(tool, args or {}, raise_on_error=raise_on_error)

    return asyncio.run(go())


def test_route_and_load_returns_the_match_with_its_body_and_revision(served):
    url, library = served
    result = call(
        url,
        "route_and_load",
        {
            "task": "Draft release notes for v3.1 from the merged pull requests",
            "harness": "claude-code",
            "platform": "linux",
            "cwd": "/tmp",
            "available_tools": ["bash"],
            "available_mcps": [],
        },
    )
    data = result.structured_content
    skill = library.get("release-notes")
    assert data["match"] == "release-notes" and data["related_match"] is None and data["novel"] is False
    assert data["revision"] == skill.revision and data["skill_body"] == skill.body
    assert data["root"] == "skills"  # a label: the server's paths are not the caller's business
    assert {"dense_description", "bm25_description", "fused", "confidence"} <= set(data["components"])
    assert all(set(alt) == {"name", "score", "fit"} for alt in data["alternatives"])
    other_bodies = [s.body for n, s in library.skills().items() if n != "release-notes"]
    assert not any(body in str(result.content) for body in other_bodies)  # one body at most


def test_a_task_nothing_fits_is_novel_with_no_body(served):
    data = call(served[0], "route_and_load", {"task": "Recommend three novels like Dune"}).structured_content
    assert data["novel"] is True and data["match"] is None and data["skill_body"] is None
    assert call(served[0], "suggest_skills", {"task": "Recommend three novels like Dune"}).data == []


def test_suggest_skills_lists_names_scores_and_revisions_without_bodies(served):
    url, library = served
    items = call(url, "suggest_skills", {"task": "shrink and harden my Dockerfile", "k": 3}).data
    assert items[0]["name"] == "dockerfile-hardening"
    assert set(items[0]) == {"name", "description", "score", "related", "revision"}
    assert items[0]["revision"] == library.get("dockerfile-hardening").revision
    # min_score, as for route_and_load: above the leader's score nothing is suggested; at the
    # bottom of the scale every skill up to k is.
    task = {"task": "shrink and harden my Dockerfile", "k": 3}
    assert call(url, "suggest_skills", {**task, "min_score": items[0]["score"] + 0.01}).data == []
    loose = call(url, "suggest_skills", {**task, "min_score": -1.0}).data
    assert len(loose) == 3 and loose[0]["name"] == "dockerfile-hardening"


def test_get_skill_returns_body_and_manifest_and_a_clear_error_when_unknown(served):
    url, library = served
    data = call(url, "get_skill", {"name": "python-packaging"}).structured_content
    assert data["revision"] == library.get("python-packaging").revision
    assert {f["path"] for f in data["files"]} == {"SKILL.md", "templates/pyproject.toml"}
    missing = call(url, "get_skill", {"name": "no-such-skill"}, raise_on_error=False)
    assert missing.is_error and "suggest_skills" in missing.content[0].text


def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(served):
    url, _ = served
    for args in ({"task": ""}, {"task": "x" * 20000}, {"task": "ok", "k": 0}, {"task": "ok", "k": True}):
        assert call(url, "suggest_skills", args, raise_on_error=False).is_error
    for task in ("\x00\x00\x00", "\u200b\u200b", " . - "):  # nothing to route on: not a novel task
        empty = call(url, "route_and_load", {"task": task}, raise_on_error=False)
        assert empty.is_error and "task is empty" in empty.content[0].text, task
    for score in (
        True,
        "0.5",
    ):  # a number (NaN: the client sends null; the router refuses it, see test_calibration)
        bad = call(
            url, "route_and_load", {"task": "write release notes", "min_score": score}, raise_on_error=False
        )
        assert bad.is_error, score
    long_name = call(url, "get_skill", {"name": "x" * 100_000}, raise_on_error=False)
    assert long_name.is_error and len(long_name.content[0].text) < 400  # the name is not echoed whole
    assert call(url, "route_and_load", {"task": "write release notes"}).structured_content["match"]


def test_reload_skills_reports_counts_and_picks_up_edits(served, skills_root):
    url, library = served
    write_skill(skills_root, "new-skill", "Plans quarterly OKRs for an engineering team.")
    write_skill(skills_root, "release-notes", "Writes release notes.", "# Release notes\n\nEdited.\n")
    (skills_root / "broken").mkdir()
    (skills_root / "broken" / "SKILL.md").write_text("---\nname: [\n---\n")
    shutil.rmtree(skills_root / "csv-data-cleaning")
    data = call(url, "reload_skills").structured_content
    assert {k: data[k] for k in ("added", "changed", "removed", "invalid")} == {
        "added": 1,
        "changed": 1,
        "removed": 1,
        "invalid": 1,
    }
    assert "not valid YAML" in data["problems"][0]["reason"]
    body = call(url, "get_skill", {"name": "release-notes"}).structured_content["body"]
    assert "Edited." in body


def test_the_official_mcp_sdk_client_can_route_and_load(served):
    url, _ = served

    async def go():
        async with SDKClient(url) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("route_and_load", {"task": "write a blameless postmortem"})
            return tools, result

    tools, result = asyncio.run(go())
    assert tools == {"suggest_skills", "get_skill", "route_and_load", "reload_skills"}
    assert not result.is_error
    assert result.structured_content["match"] == "incident-postmortem"


def test_skills_are_exposed_as_skill_resources_one_per_real_file(served):
    url, library = served

    async def go():
        async with FastMCPClient(url) as client:
            uris = {str(r.uri) for r in await client.list_resources()}
            skill_md = await client.read_resource("skill://python-packaging/SKILL.md")
            return uris, skill_md[0].text

    uris, skill_md = asyncio.run(go())
    skill = library.get("python-packaging")
    assert {f"skill://python-packaging/{f.path}" for f in skill.files} <= uris
    assert not any(uri.endswith("/_manifest") for uri in uris)  # no unlisted, synthetic resources
    assert skill_md == (skill.folder / "SKILL.md").read_text()


def test_a_skill_deleted_mid_request_gives_a_clear_error_not_a_crash(served, skills_root):
    url, _ = served
    shutil.rmtree(skills_root / "python-packaging")  # the index still lists it until a reload

    async def go():
        async with FastMCPClient(url) as client:
            try:
                await client.read_resource("skill://python-packaging/templates/pyproject.toml")
            except Exception as exc:  # the client raises the server's resource error
                return str(exc)
            return "no error"

    assert "gone from disk" in asyncio.run(go())
    assert call(url, "route_and_load", {"task": "write release notes"}).structured_content["match"]


def test_foreign_host_and_cross_origin_requests_are_refused(served):
    url, _ = served
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"accept": "application/json, text/event-stream"}
    assert httpx.post(url, json=body, headers={**headers, "host": "evil.example"}).status_code == 421
    assert (
        httpx.post(url, json=body, headers={**headers, "origin": "https://evil.example"}).status_code == 403
    )


def test_an_edit_on_disk_is_served_without_a_restart_or_a_reload_call(served, skills_root):
    url, library = served
    library.start_watching()
    before = call(url, "get_skill", {"name": "git-commit-messages"}).structured_content["revision"]
    skill_md = skills_root / "git-commit-messages" / "SKILL.md"
    skill_md.write_text(skill_md.read_text() + "\n## Addendum\n\nSign every commit.\n")

    def new_revision():
        data = call(url, "get_skill", {"name": "git-commit-messages"}).structured_content
        return data if data["revision"] != before else None

    assert "Sign every commit." in wait_for(new_revision)["body"]
    routed = call(url, "route_and_load", {"task": "write a conventional commit message for this fix"})
    assert routed.structured_content["revision"] != before


def test_a_skill_blocked_in_the_peer_format_is_never_served(skills_root, library_factory):
    description = "Plans quarterly OKRs for an engineering team with measurable key results."
    write_skill(
        skills_root,
        "okr-planner",
        description,
        "# OKRs\n\n1. Draft three objectives.\n",
        extra="metadata:\n  skill-router:\n    trust: blocked\n    priority: 50\n",
    )
    write_skill(
        skills_root,
        "okr-planner-odd",
        description,
        extra="metadata:\n  skill-router:\n    trust: blocked\n    sandbox: strict\n",
    )
    library = library_factory(skills_root)
    with running_mcp(library) as url:
        task = "Plan our quarterly OKRs for the engineering team with measurable key results"
        data = call(url, "route_and_load", {"task": task, "min_score": -1.0}).structured_content
        assert data["match"] not in ("okr-planner", "okr-planner-odd")
        assert data["related_match"] not in ("okr-planner", "okr-planner-odd")
        assert "Draft three objectives" not in str(data)
        assert not {"okr-planner", "okr-planner-odd"} & {a["name"] for a in data["alternatives"]}
        assert data["components"]["filtered_out"] == {"trust: blocked": 1}
        suggested = call(url, "suggest_skills", {"task": task}).data
        assert not {"okr-planner", "okr-planner-odd"} & {s["name"] for s in suggested}
        for name in ("okr-planner", "okr-planner-odd"):
            refused = call(url, "get_skill", {"name": name}, raise_on_error=False)
            assert refused.is_error
        assert "does not enforce (sandbox)" in library.status().disabled["okr-planner-odd"]

        async def resources():
            async with FastMCPClient(url) as client:
                return [str(r.uri) for r in await client.list_resources()]

        listed = asyncio.run(resources())
        assert not [u for u in listed if "okr-planner" in u]


def test_novel_lists_the_three_nearest_skills_unloaded_and_min_score_applies(served):
    url, _ = served
    data = call(url, "route_and_load", {"task": "Recommend three novels like Dune"}).structured_content
    assert data["novel"] is True and data["skill_body"] is None
    assert len(data["alternatives"]) == 3 and all(a["fit"] == "none" for a in data["alternatives"])
    task = "Draft release notes for v3.1 from the merged pull requests"
    normal = call(url, "route_and_load", {"task": task}).structured_content
    assert normal["match"] == "release-notes" and len(normal["alternatives"]) == 2
    strict = call(url, "route_and_load", {"task": task, "min_score": normal["score"] + 0.01})
    assert strict.structured_content["novel"] is True
    assert strict.structured_content["alternatives"][0]["name"] == "release-notes"
    bad = call(url, "route_and_load", {"task": task, "min_score": 5}, raise_on_error=False)
    assert bad.is_error
