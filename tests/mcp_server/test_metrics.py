"""`/metrics` on the MCP server, scraped over HTTP and parsed with prometheus-client's own parser:
route_and_load by outcome, tool-call latency, what is served at which revision, change control's
pending changes and audit chain; never the task text."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
from fastmcp import Client
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

from tests.optimize.conftest import body_rewrite, ready_body

MATCH = "Draft release notes for v3.1 from the merged pull requests"
NOVEL = "Recommend three novels like Dune"


def scrape(url: str, host: str | None = None) -> httpx.Response:
    base = url.removesuffix("/mcp")
    return httpx.get(f"{base}/metrics", headers={"Host": host} if host else None, timeout=10)


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def totals(samples: list, label: str) -> dict[str, float]:
    return {s.labels[label]: s.value for s in samples if s.name.endswith("_total")}


def test_metrics_count_each_outcome_and_say_what_is_served_and_what_waits(served_copy):
    url, library, control, root = served_copy

    async def calls() -> None:
        async with Client(url) as client:
            await client.call_tool("route_and_load", {"task": MATCH})
            await client.call_tool("route_and_load", {"task": MATCH + " for the board"})
            await client.call_tool("route_and_load", {"task": NOVEL})
            await client.call_tool("get_skill", {"name": "no-such-skill"}, raise_on_error=False)
            with contextlib.suppress(MCPError):  # a protocol error (-32602), counted all the same
                await client.call_tool("made_up_tool", {}, raise_on_error=False)

    asyncio.run(calls())
    control.propose("release-notes", "operator", body_rewrite(root, "release-notes"), ready_body())
    reply = scrape(url)
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    found = families(reply.text)
    assert totals(found["ingot_route_and_load"], "outcome") == {"match": 2.0, "novel": 1.0}
    calls_by = {
        (s.labels["tool"], s.labels["outcome"]): s.value
        for s in found["ingot_tool_calls"]
        if s.name.endswith("_total")
    }
    assert calls_by[("get_skill", "error")] == 1 and calls_by[("other", "error")] == 1
    counts = {
        s.labels["tool"]: s.value for s in found["ingot_tool_call_seconds"] if s.name.endswith("_count")
    }
    assert counts["route_and_load"] == 3
    served = {s.labels["skill"]: s.labels["revision"] for s in found["ingot_skill_served_info"]}
    assert served == {name: skill.revision for name, skill in library.skills().items()}
    assert found["ingot_changes_pending"][0].value == 1
    assert found["ingot_audit_chain_ok"][0].value == 1 and found["ingot_audit_chain_lines"][0].value >= 1
    assert MATCH not in reply.text and NOVEL not in reply.text  # no task is ever a label


def test_metrics_answer_only_to_the_host_names_mcp_does(served_copy):
    url, *_ = served_copy
    assert scrape(url, host="attacker.example").status_code in (400, 421)  # DNS rebinding: refused
    assert scrape(url, host="localhost").status_code == 200


def test_the_ui_serves_metrics_behind_its_own_guard(tmp_path, library_factory):
    """`ingot ui` alone is a server too: its /metrics says what is served and pending, and a UI
    with an access token asks for it there as everywhere else."""
    import shutil

    from ingot.cli.serve import UIOptions, ui_app
    from optimize.control.changes import ChangeControl
    from tests.conftest import BUNDLED_SKILLS, running_asgi

    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    library = library_factory(root)
    control = ChangeControl(tmp_path / "runs", (root,), neighbours=library.current)
    token = "t" * 24
    app = ui_app(library, control, "http://127.0.0.1:1/mcp", (), UIOptions("ana", token))
    with running_asgi(app) as base:
        refused = httpx.get(f"{base}/metrics", timeout=10)
        assert refused.status_code in (401, 303)
        reply = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert reply.status_code == 200
    found = families(reply.text)
    assert found["ingot_skills_served"][0].value == len(library.skills())
    assert found["ingot_changes_pending"][0].value == 0
