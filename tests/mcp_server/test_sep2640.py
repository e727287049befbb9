"""SEP-2640 to the letter, over real streamable HTTP with the official mcp SDK's client: every
served skill is listed, complete and readable as listed, nothing unlisted is served, text goes out
as text, protocol errors are JSON-RPC errors, and a change reaches connected hosts on both lanes."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import mcp_types as types
import pytest
import yaml
from fastmcp.skills.models import ListSkillsParams, ListSkillsRequest, ListSkillsResult
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from tests.conftest import BUNDLED_SKILLS, running_mcp, write_skill


@pytest.fixture
def skills_root(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    write_skill(
        root,
        "templated",
        "Fills config templates for TOML, YAML and JSON files.",
        files={
            "templates/app.toml": 'name = "app"\n',
            "templates/app.yaml": "name: app\n",
            "templates/app.yml": "name: app\n",
            "templates/app.json": '{"name": "app"}\n',
            "NOTICE": "plain text with no extension\n",
            "_manifest": "a real file that happens to be called _manifest\n",
            "assets/logo.png": b"\x89PNG\r\n\x1a\n\x00\x00binary",
        },
    )
    return root


@pytest.fixture
def served(skills_root, library_factory):
    library = library_factory(skills_root)
    with running_mcp(library) as url:
        yield url, library


def run(coro):
    return asyncio.run(coro)


async def list_skills(client: Client, cursor: str | None = None) -> ListSkillsResult:
    request = ListSkillsRequest(params=ListSkillsParams(cursor=cursor))
    return await client.session.send_request(request, ListSkillsResult)


def test_every_served_skill_is_one_complete_entry_whose_files_read_back_as_listed(served):
    url, library = served

    async def go():
        async with Client(url) as client:
            entries = (await list_skills(client)).skills
            reads = {}
            for entry in entries:
                for resource in entry.resources:
                    reads[resource.uri] = (await client.read_resource(resource.uri)).contents[0]
            listed = (await client.list_resources()).resources
            return entries, reads, listed

    entries, reads, listed = run(go())
    assert sorted(e.frontmatter.name for e in entries) == sorted(library.skills())
    for entry in entries:
        skill = library.get(entry.frontmatter.name)
        assert entry.uri == f"skill://{skill.name}/SKILL.md"
        on_disk = (skill.folder / "SKILL.md").read_text()
        assert entry.frontmatter.root == yaml.safe_load(on_disk.split("\n---\n", 1)[0][4:])  # verbatim
        assert {r.uri for r in entry.resources} == {f"skill://{skill.name}/{f.path}" for f in skill.files}
        for resource in entry.resources:
            content = reads[resource.uri]
            text = isinstance(content, types.TextResourceContents)
            data = content.text.encode() if text else base64.b64decode(content.blob)
            assert (
                len(data) == resource.size and f"sha256:{hashlib.sha256(data).hexdigest()}" == resource.digest
            )
    # resources/list holds exactly the entries' files: no synthetic `_manifest`, nothing unlisted
    assert {str(r.uri) for r in listed} == set(reads)
    names = {str(r.uri): r.name for r in listed}
    assert names["skill://templated/SKILL.md"] == "templated"  # the frontmatter name, as the spec says
    assert names["skill://templated/templates/app.toml"] == "templated/templates/app.toml"


def test_a_real_file_named_manifest_is_served_as_itself(served):
    url, _ = served

    async def go():
        async with Client(url) as client:
            return (await client.read_resource("skill://templated/_manifest")).contents[0]

    assert run(go()).text == "a real file that happens to be called _manifest\n"


def test_text_files_arrive_as_text_with_their_registered_types_and_binary_as_a_blob(served):
    url, _ = served

    async def go():
        async with Client(url) as client:
            listed = {str(r.uri): r for r in (await client.list_resources()).resources}
            contents = {}
            for uri in listed:
                if uri.startswith("skill://templated/"):
                    contents[uri] = (await client.read_resource(uri)).contents[0]
            return listed, contents

    listed, contents = run(go())
    expected = {
        "SKILL.md": "text/markdown",
        "templates/app.toml": "application/toml",
        "templates/app.yaml": "application/yaml",
        "templates/app.yml": "application/yaml",
        "templates/app.json": "application/json",
        "NOTICE": "text/plain",
        "_manifest": "text/plain",
    }
    for path, mime in expected.items():
        uri = f"skill://templated/{path}"
        assert listed[uri].mime_type == mime and contents[uri].mime_type == mime
        assert isinstance(contents[uri], types.TextResourceContents), path
    png = contents["skill://templated/assets/logo.png"]
    assert isinstance(png, types.BlobResourceContents) and listed[png.uri].mime_type == "image/png"
    assert contents["skill://templated/templates/app.toml"].text == 'name = "app"\n'


def _code(call: Callable) -> int:
    """The JSON-RPC error code the call was answered with (the client's task group may wrap it)."""
    try:
        run(call())
    except MCPError as exc:
        return exc.error.code
    except BaseExceptionGroup as group:
        matched, _ = group.split(MCPError)
        if matched is None:
            raise
        while isinstance(matched, BaseExceptionGroup):
            matched = matched.exceptions[0]
        return matched.error.code
    raise AssertionError("no protocol error")


def test_an_unknown_tool_and_a_bad_cursor_are_json_rpc_invalid_params(served):
    url, _ = served

    def with_client(action):
        async def go():
            async with Client(url) as client:
                return await action(client)

        return go

    assert _code(with_client(lambda c: c.call_tool("no_such_tool", {}))) == types.INVALID_PARAMS
    bad = "not-a-cursor"
    assert _code(with_client(lambda c: c.list_resources(cursor=bad))) == types.INVALID_PARAMS
    assert _code(with_client(lambda c: c.list_tools(cursor=bad))) == types.INVALID_PARAMS
    assert _code(with_client(lambda c: list_skills(c, bad))) == types.INVALID_PARAMS
    # ... and a known tool still answers normally afterwards
    result = run(with_client(lambda c: c.call_tool("get_skill", {"name": "templated"}))())
    assert not result.is_error


def test_the_handshake_lane_declares_list_changed_for_resources_only_and_sends_it(served, skills_root):
    url, library = served
    seen: list[object] = []

    async def go():
        got = asyncio.Event()

        async def handler(message):
            if isinstance(message, types.ResourceListChangedNotification):
                seen.append(message)
                got.set()

        async with Client(url, mode="legacy", message_handler=handler) as client:
            capabilities = client.server_capabilities
            await client.list_resources()  # the host has listed; now a skill appears
            write_skill(skills_root, "added-later", "Arrives while a host is connected.")
            await asyncio.to_thread(library.reload)
            await asyncio.wait_for(got.wait(), 10)
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            return capabilities, uris

    capabilities, uris = run(go())
    assert capabilities.resources.list_changed is True
    assert not capabilities.tools.list_changed and not (
        capabilities.prompts and capabilities.prompts.list_changed
    )
    assert "skill://added-later/SKILL.md" in uris and len(seen) >= 1


def test_the_2026_lane_tells_listeners_of_a_removed_skill_and_its_files(served, skills_root):
    url, library = served

    async def go():
        async with Client(url) as client:
            assert client.protocol_version == "2026-07-28"
            async with client.listen(
                resources_list_changed=True, resource_subscriptions=["skill://templated/SKILL.md"]
            ) as subscription:
                shutil.rmtree(skills_root / "templated")
                await asyncio.to_thread(library.reload)
                events = []
                async with asyncio.timeout(10):
                    async for event in subscription:
                        events.append(type(event).__name__)
                        if {"ResourcesListChanged", "ResourceUpdated"} <= set(events):
                            break
            entries = (await list_skills(client)).skills
            return events, entries

    events, entries = run(go())
    assert {"ResourcesListChanged", "ResourceUpdated"} <= set(events)
    assert "templated" not in {e.frontmatter.name for e in entries}


def test_no_notification_is_sent_when_a_reload_changes_nothing(served):
    url, library = served
    seen: list[object] = []

    async def go():
        async def handler(message):
            if isinstance(message, types.ResourceListChangedNotification):
                seen.append(message)

        async with Client(url, mode="legacy", message_handler=handler) as client:
            await client.list_resources()
            await asyncio.to_thread(library.reload)
            # A change made after the no-op reload is the marker: its notification arrives after any
            # the no-op could have sent, so counting at that point proves the no-op sent none.
            marker = Path(library.roots[0]) / "marker-skill"
            write_skill(library.roots[0], "marker-skill", "Marks the end of the quiet period.")
            await asyncio.to_thread(library.reload)
            async with asyncio.timeout(10):
                while not seen:
                    await asyncio.sleep(0.02)
            shutil.rmtree(marker)

    run(go())
    assert len(seen) == 1
