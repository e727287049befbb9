"""What any local MCP client may do, over real streamable HTTP: create_skill's cap, rate limit and
bounded lock wait, no server paths in results, and `paths` checks only under allowed roots."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time

import httpx
import pytest
from fastmcp import Client
from mcp.client import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation

from mcp_server.ratelimit import RateLimit
from mcp_server.server import ToolLimits
from mcp_server.sessions import SessionRoutes
from optimize.control.changes import ChangeControl
from tests.conftest import BUNDLED_SKILLS, REPO, running_mcp, write_skill


def skill_args(i: int) -> dict:
    topics = [
        "filing quarterly tax forms",
        "drip irrigation for vegetable gardens",
        "chess opening repertoires",
        "identifying bird songs",
        "firing a ceramic kiln",
        "trimming sails on a dinghy",
        "tuning a violin",
        "brewing sourdough starters",
        "calibrating 3D printer beds",
        "pruning fruit trees",
        "knitting cable patterns",
        "restoring vintage bicycles",
    ]
    return {
        "name": f"helper {i}",
        "description": f"Explains {topics[i % len(topics)]} step by step.",
        "body": f"# Helper {i}\n\n1. Do step {i}.\n",
    }


async def _calls(url: str, calls: list[tuple[str, dict]]) -> list:
    """All at once, as many agents would."""
    async with Client(url) as client:
        return await asyncio.gather(*(client.call_tool(t, a, raise_on_error=False) for t, a in calls))


async def _one_by_one(url: str, calls: list[tuple[str, dict]]) -> list:
    async with Client(url) as client:
        return [await client.call_tool(t, a, raise_on_error=False) for t, a in calls]


@pytest.fixture
def world(tmp_path, library_factory):
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    library = library_factory(root)
    control = ChangeControl(tmp_path / "runs", (root,), neighbours=library.current)
    return root, library, control


def test_two_hundred_create_skill_calls_queue_only_what_the_rate_allows(world):
    root, library, control = world
    with running_mcp(library, control=control, limits=ToolLimits()) as url:
        results = asyncio.run(_calls(url, [("create_skill", skill_args(i)) for i in range(200)]))
        routed = asyncio.run(_calls(url, [("route_and_load", {"task": "write a blameless postmortem"})]))
    queued = [r for r in results if not r.is_error]
    refused = [r.content[0].text for r in results if r.is_error]
    assert 1 <= len(queued) <= 3 and len(control.pending()) == len(queued)
    assert all(t.startswith("not queued: ") for t in refused)
    assert sum("create_skill calls" in t or "busy" in t for t in refused) == len(refused)
    assert routed[0].structured_content["match"] == "incident-postmortem"


def test_agent_changes_beyond_the_cap_are_refused_with_a_clear_error(world):
    root, library, control = world
    limits = ToolLimits(create_max_pending=4, create_per_minute=10_000, create_burst=1000)
    with running_mcp(library, control=control, limits=limits) as url:
        results = asyncio.run(_one_by_one(url, [("create_skill", skill_args(i)) for i in range(12)]))
    refused = [r.content[0].text for r in results if r.is_error]
    assert [r.is_error for r in results] == [False] * 4 + [True] * 8 and len(control.pending()) == 4
    assert all(
        "4 changes from 'fastmcp' already wait for review (the limit is 4 per client)" in t for t in refused
    ), refused[0]


async def _as(url: str, client: str, calls: list[tuple[str, dict]]) -> list:
    async with Client(url, client_info=Implementation(name=client, version="1")) as session:
        return [await session.call_tool(t, a, raise_on_error=False) for t, a in calls]


def test_one_noisy_client_spends_only_its_own_rate_and_cap(world):
    root, library, control = world
    limits = ToolLimits(create_max_pending=3, create_per_minute=0.001, create_burst=5)
    with running_mcp(library, control=control, limits=limits) as url:
        noisy = asyncio.run(_as(url, "noisy-agent", [("create_skill", skill_args(i)) for i in range(8)]))
        quiet = asyncio.run(_as(url, "quiet-agent", [("create_skill", skill_args(i)) for i in range(20, 22)]))
    assert [r.is_error for r in noisy] == [False] * 3 + [True] * 5
    assert "3 changes from 'noisy-agent' already wait" in noisy[3].content[0].text
    assert [r.is_error for r in quiet] == [False, False], [r.content[0].text for r in quiet if r.is_error]
    notes = sorted(c.note for c in control.pending())
    assert (
        notes
        == ["proposed over MCP by a client that calls itself 'noisy-agent'"] * 3
        + ["proposed over MCP by a client that calls itself 'quiet-agent'"] * 2
    )


class Official:
    """The official SDK's client over streamable HTTP, declaring `name`; `mode` "legacy" runs
    the initialize handshake (a session the server assigns), "auto" the 2026-07-28 protocol (no
    session). `forge` sends another session's id in every request's header. Its own session id,
    as the server assigned it, is kept in `session`."""

    def __init__(self, url: str, name: str, mode: str = "legacy", forge: str | None = None) -> None:
        self.url, self.name, self.mode, self.forge = url, name, mode, forge
        self.session: str | None = None

    async def __aenter__(self) -> McpClient:
        async def seen(response: httpx.Response) -> None:
            self.session = response.headers.get("mcp-session-id") or self.session

        headers = {"Mcp-Session-Id": self.forge} if self.forge else None
        self.http = httpx.AsyncClient(headers=headers, event_hooks={"response": [seen]}, timeout=60)
        transport = streamable_http_client(self.url, http_client=self.http)
        info = Implementation(name=self.name, version="1")
        self.client = McpClient(transport, mode=self.mode, client_info=info)
        return await self.client.__aenter__()

    async def __aexit__(self, *exc: object) -> None:
        await self.client.__aexit__(*exc)
        await self.http.aclose()


def test_create_skill_displaces_only_the_waiting_change_of_its_own_session(world):
    """Slot ownership is the session the server assigned, never the clientInfo name: a second
    client declaring the first one's name (on either protocol, even sending the first one's
    session id on a 2026-07-28 request) cannot displace its change; the first, in its session,
    can replace it."""
    root, library, control = world
    limits = ToolLimits(create_per_minute=10_000, create_burst=1000)
    args = skill_args(4)

    async def go() -> tuple:
        owner = Official(url, "agent-a")
        async with owner as first:
            queued = await first.call_tool("create_skill", args)
            async with Official(url, "agent-a") as impostor:  # the same declared name, another session
                taken = await impostor.call_tool("create_skill", {**args, "body": "Mine.\n"})
            async with Official(url, "agent-a", "auto", forge=owner.session) as modern:
                forged = await modern.call_tool("create_skill", {**args, "body": "Mine too.\n"})
            again = await first.call_tool("create_skill", {**args, "body": "Better.\n"})
        async with Official(url, "agent-a") as later:  # reconnected: a new session, not the owner
            later_try = await later.call_tool("create_skill", {**args, "body": "Later.\n"})
        return queued, taken, forged, again, later_try

    with running_mcp(library, control=control, limits=limits) as url:
        queued, taken, forged, again, later = asyncio.run(go())
    assert not queued.is_error
    for refused in (taken, forged, later):
        text = refused.content[0].text
        assert refused.is_error and "from another MCP session already waits for review" in text, text
    assert not again.is_error, again.content[0].text  # a client may replace its own change
    [change] = control.pending()
    assert change.id == again.structured_content["change_id"] and b"Better." in change.files["SKILL.md"]
    assert (
        change.note == "proposed over MCP by a client that calls itself 'agent-a'"
        and change.owner.startswith("mcp-session:")
    )


def test_a_client_without_a_session_replaces_its_change_only_with_the_token_it_was_given(world):
    """A 2026-07-28 request has no session, so its create_skill returns a replace token the
    server issued; presenting it replaces that change. No token, another client's token, a
    token the server never issued or one from before a restart displaces nothing."""
    root, library, control = world
    limits = ToolLimits(create_per_minute=10_000, create_burst=1000)
    args = skill_args(5)

    async def go(url: str, calls: list[dict]) -> list:
        out = []
        for call in calls:
            async with Official(url, "agent-m", "auto") as client:
                out.append(await client.call_tool("create_skill", {**args, **call}))
        return out

    with running_mcp(library, control=control, limits=limits) as url:
        [first] = asyncio.run(go(url, [{}]))
        assert not first.is_error, first.content[0].text
        token = first.structured_content["replace_token"]
        assert "call create_skill again with its replace_token" in first.structured_content["message"]
        nonce, _, mac = token.partition(".")
        bare, forged, other, accented, mine = asyncio.run(
            go(
                url,
                [
                    {"body": "No token.\n"},
                    {"body": "Forged.\n", "replace_token": f"{nonce}.{'0' * len(mac)}"},
                    {"body": "Someone else's.\n", "replace_token": token[::-1]},
                    {"body": "Not ASCII.\n", "replace_token": f"{nonce}.é{mac[1:]}"},
                    {"body": "Better.\n", "replace_token": token},
                ],
            )
        )
    for refused in (bare, forged, other, accented):
        assert refused.is_error, refused.content[0].text
    assert "was not issued by this server" in accented.content[0].text  # one line, no traceback
    assert "from another MCP session already waits for review" in bare.content[0].text
    assert "was not issued by this server" in forged.content[0].text
    assert not mine.is_error, mine.content[0].text
    assert mine.structured_content["replace_token"] == token  # the same token keeps the slot
    [change] = control.pending()
    assert change.id == mine.structured_content["change_id"] and b"Better." in change.files["SKILL.md"]
    assert change.owner.startswith("token:")
    kept = [f for f in control.runs_dir.rglob("*") if f.is_file() and token.encode() in f.read_bytes()]
    assert kept == []  # only a digest of the credential is written
    with running_mcp(library, control=control, limits=limits) as url:  # a restarted server
        [stale] = asyncio.run(go(url, [{"body": "After a restart.\n", "replace_token": token}]))
    assert stale.is_error and "or it restarted since" in stale.content[0].text
    assert [c.id for c in control.pending()] == [change.id]


def test_a_session_id_the_server_never_assigned_is_refused_before_any_tool_runs(world):
    """The ownership above rests on this: on the handshake protocol the SDK checks the
    `Mcp-Session-Id` of every request against the sessions it assigned."""
    root, library, control = world
    with running_mcp(library, control=control) as url:
        answer = httpx.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "create_skill", "arguments": skill_args(4)},
            },
            headers={
                "Mcp-Session-Id": "0" * 32,
                "MCP-Protocol-Version": "2025-11-25",
                "Accept": "application/json, text/event-stream",
            },
            timeout=30,
        )
    assert answer.status_code in (400, 404), answer.text
    assert control.pending() == []


def test_the_rate_is_per_client_and_all_clients_share_a_total(world):
    root, library, control = world
    limits = ToolLimits(create_per_minute=0.001, create_burst=2, create_total_per_minute=0.001)
    with running_mcp(library, control=control, limits=limits) as url:
        first = asyncio.run(_as(url, "agent-a", [("create_skill", skill_args(i)) for i in range(3)]))
        others = [  # distinct names: a name another client's change waits under is refused
            asyncio.run(
                _as(url, f"agent-{n}", [("create_skill", skill_args(10 + 2 * j + k)) for k in range(2)])
            )
            for j, n in enumerate("bcde")
        ]
    assert [r.is_error for r in first] == [False, False, True]
    assert "at most 0.001 a minute from 'agent-a'" in first[2].content[0].text
    outcomes = [r for batch in others for r in batch]
    queued = [r for r in outcomes if not r.is_error]
    assert len(queued) + 2 == 8  # the shared burst is 4 x 2: two went to agent-a, six to the others
    assert all("from all clients" in r.content[0].text for r in outcomes if r.is_error)


def test_a_held_change_lock_answers_busy_and_routing_keeps_answering(world, tmp_path):
    root, library, control = world
    ready, release = tmp_path / "locked", tmp_path / "release"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, pathlib\n"
            "from optimize.control.lock import change_lock\n"
            "with change_lock(pathlib.Path(sys.argv[1])):\n"
            "    pathlib.Path(sys.argv[2]).touch()\n"
            "    while not pathlib.Path(sys.argv[3]).exists(): time.sleep(0.02)\n",
            str(control.runs_dir),
            str(ready),
            str(release),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.02)
        # The server's own lock wait is 10 minutes: only the tool's bounded wait can answer in time.
        patient = ChangeControl(control.runs_dir, control.roots, lock_wait_s=600, neighbours=library.current)
        limits = ToolLimits(create_per_minute=10_000, create_burst=1000, create_concurrency=64)
        calls = [("create_skill", skill_args(i)) for i in range(60)]
        calls += [("route_and_load", {"task": "write a blameless postmortem"})] * 10
        with running_mcp(library, control=patient, limits=limits) as url:
            results = asyncio.run(asyncio.wait_for(_calls(url, calls), timeout=120))
        assert not release.exists() and holder.poll() is None  # every answer came while the lock was held
        creates, routes = results[:60], results[60:]
        assert all(r.is_error and "busy" in r.content[0].text for r in creates), {
            r.content[0].text for r in creates
        }
        assert all(r.structured_content["match"] == "incident-postmortem" for r in routes)
        assert control.pending() == []
    finally:
        release.touch()
        holder.wait(timeout=30)


def test_results_name_roots_by_label_never_by_path(world, tmp_path):
    root, library, control = world
    bad = root / "Broken_Folder"
    bad.mkdir()
    (bad / "SKILL.md").write_text("no frontmatter\n")
    with running_mcp(library, control=control) as url:
        routed, reloaded = asyncio.run(
            _calls(url, [("route_and_load", {"task": "write a blameless postmortem"}), ("reload_skills", {})])
        )
    text = str(routed.structured_content) + str(reloaded.structured_content)
    assert routed.structured_content["root"] == "skills"
    assert (
        str(tmp_path) not in text
        and reloaded.structured_content["problems"][0]["folder"] == "skills/Broken_Folder"
    )


@pytest.fixture
def sql_world(tmp_path, library_factory):
    root = tmp_path / "skills"
    write_skill(
        root,
        "sql-migrations",
        "Writes and reviews SQL schema migrations for Postgres databases.",
        extra='metadata:\n  paths: "**/*.sql"\n',
    )
    write_skill(root, "release-notes", "Writes release notes from merged pull requests.")
    allowed = tmp_path / "projects"
    for base in (allowed, tmp_path / "elsewhere"):
        (base / "with-sql" / "db").mkdir(parents=True)
        (base / "with-sql" / "db" / "001.sql").write_text("create table t (id int);\n")
        (base / "without-sql").mkdir(parents=True)
    return library_factory(root), allowed, tmp_path / "elsewhere"


def _route(url: str, cwd: str) -> dict:
    task = "Review this SQL schema migration for our Postgres database"
    return asyncio.run(_calls(url, [("route_and_load", {"task": task, "cwd": cwd})]))[0].structured_content


def _facts(decision: dict) -> dict:
    components = {k: v for k, v in decision["components"].items() if not k.endswith("_ms")}
    return {**decision, "components": components}


def test_paths_are_checked_only_under_allowed_roots(sql_world):
    library, allowed, elsewhere = sql_world
    with running_mcp(library, limits=ToolLimits(allowed_caller_roots=(allowed.resolve(),))) as url:
        inside_with = _route(url, str(allowed / "with-sql"))
        inside_without = _route(url, str(allowed / "without-sql"))
        outside = [
            _route(url, str(p))
            for p in (elsewhere / "with-sql", elsewhere / "without-sql", elsewhere / "nope")
        ]
    assert inside_with["components"]["filtered_out"] == {}
    assert inside_with["components"]["unchecked_constraints"] == []
    assert inside_without["components"]["filtered_out"] == {"paths": 1}
    # Outside the allowed roots every answer is the same, whatever is (or is not) on disk there.
    assert _facts(outside[0]) == _facts(outside[1]) == _facts(outside[2])
    assert "paths" in str(outside[0]["components"].get("unchecked_constraints"))


def test_with_no_allowed_roots_the_server_never_reads_a_callers_folder(sql_world):
    library, allowed, _ = sql_world
    with running_mcp(library) as url:
        answers = [_route(url, str(p)) for p in (allowed / "with-sql", allowed / "without-sql")]
    assert _facts(answers[0]) == _facts(answers[1])


def test_a_symlink_out_of_an_allowed_root_is_outside_it(sql_world):
    library, allowed, elsewhere = sql_world
    (allowed / "link").symlink_to(elsewhere / "without-sql")
    with running_mcp(library, limits=ToolLimits(allowed_caller_roots=(allowed.resolve(),))) as url:
        linked = _route(url, str(allowed / "link"))
    assert "paths" in str(linked["components"].get("unchecked_constraints"))


def test_session_files_older_than_their_ttl_are_deleted(tmp_path):
    sessions = SessionRoutes(tmp_path, ttl_s=3600)
    sessions.record("old-1", "match", "a", "r" * 64)
    sessions.record("old-2", "novel", None, None)
    for name in ("old-1", "old-2"):
        path = sessions._path(name)
        os.utime(path, (time.time() - 7200, time.time() - 7200))
    sessions._pruned_at = float("-inf")
    sessions.record("fresh", "match", "b", "s" * 64)
    assert sorted(p.name for p in sessions.folder.iterdir()) == [sessions._path("fresh").name]
    assert sessions.lookup("fresh").skill == "b" and sessions.lookup("old-1") is None


def test_the_rate_limit_refills_with_time():
    now = [0.0]
    limit = RateLimit(per_minute=6, burst=2, clock=lambda: now[0])
    assert limit.take() == 0.0 and limit.take() == 0.0
    assert limit.take() == pytest.approx(10.0)
    now[0] = 10.0
    assert limit.take() == 0.0 and limit.take() > 0


def test_all_clients_together_are_capped_too(world):
    root, library, control = world
    limits = ToolLimits(
        create_max_pending=5, create_max_pending_total=3, create_per_minute=10_000, create_burst=1000
    )
    with running_mcp(library, control=control, limits=limits) as url:
        a = asyncio.run(_as(url, "agent-a", [("create_skill", skill_args(i)) for i in range(2)]))
        b = asyncio.run(_as(url, "agent-b", [("create_skill", skill_args(i)) for i in range(5, 7)]))
    assert [r.is_error for r in a + b] == [False, False, False, True]
    assert "3 agent-proposed changes already wait for review (the limit is 3)" in b[1].content[0].text


def test_an_oversized_request_body_is_refused_before_it_is_parsed(world):
    """A body over MCP_MAX_BODY_BYTES gets 413 whether or not it declares its length; a create_skill
    with the largest body quarantine accepts still fits, and the server keeps serving."""
    import httpx

    from ingot.cli.serve import MCP_MAX_BODY_BYTES

    root, library, control = world
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    huge = json.dumps(
        {**call, "params": {"name": "route_and_load", "arguments": {"task": "x" * MCP_MAX_BODY_BYTES}}}
    )
    with running_mcp(library, control=control) as url:
        declared = httpx.post(url, content=huge, headers=headers, timeout=30)
        streamed = httpx.post(
            url, content=iter([huge[:1000].encode(), huge[1000:].encode()]), headers=headers, timeout=30
        )
        assert (declared.status_code, streamed.status_code) == (413, 413)
        big = {
            "name": "big-body",
            "description": "Explains pruning fruit trees step by step.",
            "body": "é" * 32_000,
        }
        (created,) = asyncio.run(_calls(url, [("create_skill", big)]))
        assert not created.is_error, created.content
        (routed,) = asyncio.run(_calls(url, [("route_and_load", {"task": "write release notes"})]))
        assert routed.structured_content["match"] == "release-notes"
