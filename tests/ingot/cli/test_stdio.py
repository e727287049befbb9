"""`ingot mcp` as hosts launch it: each README config run exactly as written through the official
mcp SDK's stdio client, both protocol lanes, nothing but protocol on stdout, change notifications,
and several processes on one skills root (readers never wait on the writer's lock; concurrent
`create_skill` calls are waiting changes or clean refusals; nothing unapproved is served)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import mcp_types as types
import pytest
from mcp import StdioServerParameters
from mcp.client import Client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ingot.home import establish
from optimize.control.changes import ChangeControl
from optimize.control.lock import change_lock
from tests.conftest import BUNDLED_SKILLS, write_skill

REPO = Path(__file__).resolve().parents[3]
PLACEHOLDER = "/home/you/skills"
HOSTS = (
    "claude-code",
    "claude-code-project",
    "claude-desktop",
    "cursor",
    "vscode",
    "codex",
    "zed",
)
COMMIT_TASK = "Write a commit message for my staged changes"


def readme_snippet(host: str) -> tuple[str, str]:
    """The (language, text) of the code block after README's `<!-- host: NAME -->` marker."""
    readme = (REPO / "README.md").read_text()
    found = re.search(rf"<!-- host: {re.escape(host)} -->\n.*?```(\w+)\n(.*?)```", readme, re.S)
    assert found, f"README has no config for {host}"
    return found.group(1), found.group(2)


def launch_of(host: str) -> tuple[str, list[str], dict[str, str]]:
    """What the host would launch, read from its README snippet the way that host reads it."""
    language, text = readme_snippet(host)
    if language == "bash":  # claude mcp add NAME [--scope S] [--env K=V]... -- COMMAND ARGS...
        words = shlex.split(text)
        assert words[:3] == ["claude", "mcp", "add"] and words[3] == "ingot", words
        split = words.index("--")
        options, command = words[4:split], words[split + 1 :]
        env = dict(options[i + 1].split("=", 1) for i, w in enumerate(options) if w in ("--env", "-e"))
        return command[0], command[1:], env
    if language == "toml":
        server = tomllib.loads(text)["mcp_servers"]["ingot"]
    else:
        data = json.loads(text)
        key = next(k for k in ("mcpServers", "servers", "context_servers") if k in data)
        server = data[key]["ingot"]
        if key == "servers":
            assert server["type"] == "stdio"
    return server["command"], list(server.get("args", [])), dict(server.get("env", {}))


@pytest.fixture
def skills_root(tmp_path: Path) -> Path:
    root = tmp_path / "lib" / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    return root


@pytest.fixture
def on_path(monkeypatch):
    """`ingot` on PATH as a user who installed Ingot has it (the SDK passes PATH to the child)."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def params(root: Path, **env: str) -> StdioServerParameters:
    # The SDK hands the child only a few variables: PYTHONPATH too, so the child runs this code.
    inherited = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
    return StdioServerParameters(
        command="ingot",
        args=["mcp"],
        env={**inherited, "SKILLS_DIRS": str(root), "GIT_HISTORY": "false", **env},
    )


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("host", HOSTS)
def test_each_readme_config_launches_a_server_that_routes_and_serves_a_skill_resource(
    host, skills_root, on_path
):
    command, args, env = launch_of(host)
    assert (command, args) == ("ingot", ["mcp"]) and env == {"SKILLS_DIRS": PLACEHOLDER}
    env = {k: v.replace(PLACEHOLDER, str(skills_root)) for k, v in env.items()}

    async def go():
        server = StdioServerParameters(command=command, args=args, env=env)
        async with Client(server) as client:
            routed = (await client.call_tool("route_and_load", {"task": COMMIT_TASK})).structured_content
            body = (await client.read_resource(f"skill://{routed['match']}/SKILL.md")).contents[0]
            return routed, body

    routed, body = run(go())
    assert routed["match"] == "git-commit-messages"
    on_disk = (skills_root / "git-commit-messages" / "SKILL.md").read_text()
    assert isinstance(body, types.TextResourceContents) and body.text == on_disk


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_both_lanes_serve_the_same_tools_and_skills_as_http(mode, skills_root, on_path):
    async def go():
        async with Client(params(skills_root), mode=mode) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            routed = (await client.call_tool("route_and_load", {"task": COMMIT_TASK})).structured_content
            return client.protocol_version, tools, uris, routed

    version, tools, uris, routed = run(go())
    assert version in HANDSHAKE_PROTOCOL_VERSIONS if mode == "legacy" else version == "2026-07-28"
    assert {"route_and_load", "get_skill", "reload_skills", "create_skill"} <= tools
    assert {
        f"skill://{p.name}/SKILL.md" for p in BUNDLED_SKILLS.iterdir() if (p / "SKILL.md").exists()
    } <= uris
    assert routed["match"] == "git-commit-messages" and len(routed["revision"]) == 64


def test_stdout_carries_only_protocol_and_the_banner_goes_to_stderr(skills_root):
    env = {**os.environ, "SKILLS_DIRS": str(skills_root), "GIT_HISTORY": "false", "LOG_LEVEL": "DEBUG"}
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    lines = [json.dumps(hello), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})]
    call = {"name": "route_and_load", "arguments": {"task": COMMIT_TASK}}
    lines.append(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}))
    process = subprocess.Popen(
        [sys.executable, "-m", "ingot.cli", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        process.stdin.write("\n".join(lines) + "\n")
        process.stdin.flush()
        out = []
        while not any(m.get("id") == 2 for m in out):  # a host keeps stdin open until answered
            line = process.stdout.readline()
            assert line, process.stderr.read()[-3000:]
            out.append(json.loads(line))  # every line on stdout is one JSON-RPC message
        process.stdin.close()  # end of input: the server exits
        process.wait(timeout=60)
        rest, stderr = process.stdout.read(), process.stderr.read()
    finally:
        process.kill()
    out += [json.loads(line) for line in rest.splitlines()]
    assert [m.get("id") for m in out if "id" in m] == [1, 2] and all(m["jsonrpc"] == "2.0" for m in out)
    assert out[1]["result"]["structuredContent"]["match"] == "git-commit-messages"
    assert "MCP on stdio" in stderr and "DEBUG" in stderr  # the banner and logs went to stderr


def test_a_stray_print_during_start_up_goes_to_stderr_never_onto_the_wire():
    """Start-up (settings, library, any library's import-time chatter) runs with fd 1 pointed at
    stderr; the wire gets stdout back only for the transport."""
    script = (
        "import os, sys\n"
        "from ingot.cli.stdio import stdout_to_stderr\n"
        "with stdout_to_stderr():\n"
        "    print('stray', flush=True)\n"
        "    os.write(1, b'raw stray\\n')\n"
        "print('wire', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "wire\n"
    assert "stray" in done.stderr and "raw stray" in done.stderr


def test_a_skill_added_while_a_host_is_connected_is_announced_on_stdio(skills_root, on_path):
    async def go():
        got = asyncio.Event()

        async def handler(message):
            if isinstance(message, types.ResourceListChangedNotification):
                got.set()

        async with Client(params(skills_root), mode="legacy", message_handler=handler) as client:
            await client.list_resources()
            write_skill(skills_root, "added-later", "Formats added-later reports for the weekly review.")
            await client.call_tool("reload_skills", {})
            await asyncio.wait_for(got.wait(), 20)
            return {str(r.uri) for r in (await client.list_resources()).resources}

    assert "skill://added-later/SKILL.md" in run(go())


def test_two_processes_proposing_at_once_queue_two_changes_and_serve_neither(skills_root, on_path):
    """Two hosts, two `ingot mcp` processes, one skills root: each create_skill is a waiting
    change or a clean refusal, never a lost or half-written one, and neither is served."""

    async def propose(name: str) -> tuple[bool, dict | str]:
        async with Client(params(skills_root)) as client:
            result = await client.call_tool(
                "create_skill",
                {
                    "name": name,
                    "description": f"Drafts {name} summaries for quarterly supplier audits.",
                    "body": f"# {name}\n\nCollect the supplier's invoices, then summarise them.",
                },
            )
            if result.is_error:
                return False, result.content[0].text
            return True, result.structured_content

    async def both():
        return await asyncio.gather(propose("supplier-audit-a"), propose("supplier-audit-b"))

    outcomes = run(both())
    for ok, answer in outcomes:
        assert ok or str(answer).startswith("not queued:") and "retry" in str(answer), answer
    queued = {a["skill"] for ok, a in outcomes if ok}
    assert queued, outcomes  # the lock is held for under a second: at least one lands
    home = establish((skills_root,))
    pending = {c.skill for c in ChangeControl(home.path, (skills_root,)).pending()}
    assert pending == queued
    assert not (skills_root / "supplier-audit-a").exists() and not (skills_root / "supplier-audit-b").exists()

    async def served():
        async with Client(params(skills_root)) as client:
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            routed = await client.call_tool(
                "route_and_load", {"task": "Summarise a supplier's invoices for the quarterly audit"}
            )
            return uris, routed.structured_content

    uris, routed = run(served())
    assert not any("supplier-audit" in uri for uri in uris)
    assert not str(routed["match"] or "").startswith("supplier-audit")
    assert not str(routed["related_match"] or "").startswith("supplier-audit")


def test_reading_answers_while_another_process_holds_the_change_lock(skills_root, on_path):
    """A promotion in another process holds the lock: a host's routing and reads still answer,
    and a proposal says "busy, retry" instead of hanging."""
    home = establish((skills_root,))

    async def go():
        async with Client(params(skills_root)) as client:
            await client.list_tools()  # started up before the lock is taken
            # Deadlines far under the 30 s a writer waits for the lock: an answer within them was
            # not queued behind the lock (a correctness bound, not a timing claim).
            with change_lock(home.path):
                routed = await asyncio.wait_for(client.call_tool("route_and_load", {"task": COMMIT_TASK}), 10)
                read = client.read_resource("skill://git-commit-messages/SKILL.md")
                body = await asyncio.wait_for(read, 10)
                proposal = await asyncio.wait_for(
                    client.call_tool(
                        "create_skill",
                        {"name": "while-locked", "description": "Proposed while locked.", "body": "# x\n\ny"},
                    ),
                    10,
                )
            return routed.structured_content, body.contents[0], proposal

    routed, body, proposal = run(go())
    assert routed["match"] == "git-commit-messages" and body.text.startswith("---")
    assert proposal.is_error and "retry" in proposal.content[0].text


def test_over_stdio_a_waiting_change_is_its_process_s_whatever_name_another_host_declares(
    skills_root, on_path
):
    """Two hosts, two `ingot mcp` processes declaring the same client name: the second cannot
    displace the first one's waiting change; the first, still connected, replaces its own."""
    args = {
        "name": "supplier-audit",
        "description": "Drafts supplier audit summaries from a quarter's invoices.",
        "body": "# Supplier audit\n\nCollect the supplier's invoices, then summarise them.",
    }
    info = types.Implementation(name="agent-a", version="1")

    async def go():
        async with Client(params(skills_root), client_info=info) as first:
            queued = await first.call_tool("create_skill", args)
            async with Client(params(skills_root), client_info=info) as second:
                taken = await second.call_tool("create_skill", {**args, "body": "# Mine\n\nMine."})
            again = await first.call_tool("create_skill", {**args, "body": "# Better\n\nBetter."})
            return queued, taken, again

    queued, taken, again = run(go())
    assert not queued.is_error and not again.is_error, (queued.content, again.content)
    assert taken.is_error and "from another MCP session already waits" in taken.content[0].text
    home = establish((skills_root,))
    [change] = ChangeControl(home.path, (skills_root,)).pending()
    assert change.id == again.structured_content["change_id"] and b"Better." in change.files["SKILL.md"]
    assert (
        change.note == "proposed over MCP by a client that calls itself 'agent-a'"
        and change.owner.startswith("stdio:")
    )
