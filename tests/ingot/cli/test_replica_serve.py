"""One primary, three replicas and a bare remote, as processes: `ingot serve --replica REMOTE`.

The primary promotes and rolls back (signed, pushed); every replica serves each change over MCP
once it verified it, `/metrics` tells its verified commit, lag and refusals in Prometheus' text
format, and a forgery pushed to the remote is refused by all three while they keep serving."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastmcp import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port, wait_for
from tests.optimize.control.team import SKILL, Team, git, make_team

INGOT = (sys.executable, "-m", "ingot.cli")
REPLICAS = 3
ROUNDS = 20


@dataclass
class Node:
    home: Path
    port: int
    process: subprocess.Popen
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def metrics(self) -> dict[str, list]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as reply:  # noqa: S310
            text = reply.read().decode()
        return {family.name: family.samples for family in text_string_to_metric_families(text)}


def env_for(team: Team, home: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("INGOT_", "REPLICA_", "SKILLS_"))}
    return {
        **keep,
        "INGOT_HOME": str(home),
        "REPLICA_ALLOWED_SIGNERS": str(team.allowed),
        "REPLICA_INTERVAL_S": "1",
        "HF_HUB_OFFLINE": "1",
    }


def revision_over_mcp(url: str) -> str | None:
    async def ask() -> str | None:
        async with Client(url) as client:
            result = await client.call_tool("get_skill", {"name": SKILL}, raise_on_error=False)
            return None if result.is_error else result.structured_content["revision"]

    try:
        return asyncio.run(ask())
    except Exception:
        return None


@pytest.fixture
def team(tmp_path, library_factory) -> Team:
    built = make_team(tmp_path, None)
    built.control.neighbours = library_factory(built.root).current
    return built


@pytest.fixture
def replicas(team) -> Iterator[list[Node]]:
    nodes = []
    for n in range(REPLICAS):
        home, port = team.tmp / f"replica-{n}", free_port()
        home.mkdir()
        log = team.tmp / f"replica-{n}.log"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ingot.cli",
                "serve",
                "--replica",
                str(team.remote),
                "--mcp-port",
                str(port),
            ],
            cwd=home,
            env=env_for(team, home),
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        nodes.append(Node(home, port, process, log))
    try:
        for node in nodes:
            wait_for(lambda node=node: _up(node), timeout=120, interval=0.2)
        yield nodes
    finally:
        for node in nodes:
            node.process.send_signal(signal.SIGTERM)
        for node in nodes:
            node.process.wait(timeout=30)


def _up(node: Node) -> bool:
    if node.process.poll() is not None:
        raise AssertionError(f"replica exited early:\n{node.log.read_text()[-3000:]}")
    return revision_over_mcp(node.url) is not None


def test_every_replica_serves_each_promotion_and_rollback_and_reports_it_in_metrics(team, replicas):
    first = team.primary_revisions()[SKILL]
    waits = []
    for round_ in range(ROUNDS):
        if round_ % 2 == 0:
            expected = team.promote(f"ROUND-{round_}")
        else:
            team.rollback(first)
            expected = first
        started = time.monotonic()
        for node in replicas:
            wait_for(lambda n=node, e=expected: revision_over_mcp(n.url) == e, timeout=60, interval=0.05)
            waits.append(time.monotonic() - started)
    assert len(waits) == ROUNDS * REPLICAS
    head = git(team.top, "rev-parse", "HEAD").strip()
    samples = replicas[0].metrics()
    (verified,) = samples["ingot_replica_verified_commit_info"]
    assert verified.labels["commit"] == head and verified.value == 1
    assert samples["ingot_replica_lag_seconds"][0].value == 0
    assert samples["ingot_replica_refused_commits"][0].value == 0
    served = {s.labels["skill"]: s.labels["revision"] for s in samples["ingot_skill_served_info"]}
    assert served == team.primary_revisions()
    routed = {
        s.labels["outcome"]: s.value for s in samples["ingot_route_and_load"] if s.name.endswith("_total")
    }
    calls = {s.labels["tool"]: s.value for s in samples["ingot_tool_calls"] if s.name.endswith("_total")}
    assert calls["get_skill"] >= ROUNDS and routed == {}  # only get_skill was called
    latency = [s for s in samples["ingot_tool_call_seconds"] if s.name.endswith("_count")]
    assert {s.labels["tool"]: s.value for s in latency}["get_skill"] == calls["get_skill"]


def _totals(samples: dict[str, list], name: str) -> list:
    return [s for s in samples.get(name, []) if s.name.endswith("_total")]


def test_a_forgery_is_refused_by_every_replica_which_keeps_serving_and_says_why(team, replicas):
    expected = team.promote("GENUINE")
    for node in replicas:
        wait_for(lambda node=node: revision_over_mcp(node.url) == expected, timeout=60, interval=0.05)
    forged = team.forge(
        lambda w: (w / "skills" / SKILL / "SKILL.md").write_text(
            "---\nname: release-notes\ndescription: x\n---\nforged\n"
        ),
        "an unsigned edit",
    )
    for node in replicas:
        wait_for(lambda node=node: node.metrics()["ingot_replica_refused_commits"][0].value == 1, timeout=60)
        assert revision_over_mcp(node.url) == expected
        status = subprocess.run(
            [sys.executable, "-m", "ingot.cli", "status"],
            cwd=node.home,
            env={**env_for(team, node.home), "REPLICA_REMOTE": str(team.remote)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 1
        assert f"REFUSED {forged[:12]}: unsigned" in status.stdout
        assert f"refused {forged[:12]}" in node.log.read_text()  # and the log says it, once


def test_ingot_mcp_on_a_replica_machine_serves_what_the_replica_verified_and_follows_its_syncs(team):
    """A host on a replica machine launches `ingot mcp` (REPLICA_REMOTE set): it serves the last
    verified library read-only, and a later `ingot replica sync` switches it while it runs."""
    from mcp import StdioServerParameters
    from mcp.client import Client as SDKClient

    home = team.tmp / "replica-host"
    home.mkdir()
    env = {**env_for(team, home), "REPLICA_REMOTE": str(team.remote)}
    sync = subprocess.run(
        [*INGOT, "replica", "sync"], cwd=home, env=env, capture_output=True, text=True, timeout=120
    )
    assert sync.returncode == 0, sync.stderr
    before = team.primary_revisions()[SKILL]

    async def go():
        server = StdioServerParameters(
            command=sys.executable, args=["-m", "ingot.cli", "mcp"], env=env, cwd=str(home)
        )
        async with SDKClient(server) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            first = (await client.call_tool("get_skill", {"name": SKILL})).structured_content["revision"]
            promoted = await asyncio.to_thread(team.promote, "FOLLOWED")
            again = await asyncio.to_thread(
                subprocess.run,
                [*INGOT, "replica", "sync"],
                cwd=home,
                env=env,
                capture_output=True,
                timeout=120,
            )
            assert again.returncode == 0
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                now = (await client.call_tool("get_skill", {"name": SKILL})).structured_content["revision"]
                if now == promoted:
                    return tools, first, now, promoted
                await asyncio.sleep(0.05)
            return tools, first, now, promoted

    tools, first, now, promoted = asyncio.run(go())
    assert "create_skill" not in tools and "route_and_load" in tools  # read-only
    assert first == before and now == promoted
