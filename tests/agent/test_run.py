"""The reference agent end to end: real MCP server, scripted model server, real trace store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.run import ReferenceAgent
from optimize.models.traces import LocalTraceStore
from tests.scripted_llm import scripted_llm


@pytest.fixture
def world(tmp_path, served_copy):
    mcp_url, library, control, _ = served_copy
    with scripted_llm() as llm_server:
        store = LocalTraceStore(tmp_path / "runs" / "traces.jsonl")
        yield (
            ReferenceAgent(mcp_url, llm_server.client("agent", "strong"), store),
            llm_server,
            library,
            control,
            store,
            mcp_url,
        )


def test_a_routed_task_is_served_by_the_agent_model_with_the_skill_body(world):
    agent, llm, library, _, store, _ = world
    llm.add(system_contains='name="release-notes"', reply="## 3.1.0\n- Added export")
    result = agent.run("Draft release notes for v3.1 from the merged pull requests")
    skill = library.get("release-notes")
    assert (result.route, result.skill, result.revision) == ("match", "release-notes", skill.revision)
    request = llm.chat_requests()[0].body
    assert request["model"] == "agent-model"
    system = request["messages"][0]
    assert system["role"] == "system" and skill.body.strip().splitlines()[0] in system["content"]
    assert "tools" not in request  # a served task gets no mutation tools
    record = store.read().records[0]
    assert (record.route, record.skill, record.revision, record.model) == (
        "match",
        "release-notes",
        skill.revision,
        "agent-model",
    )
    assert result.answer.startswith("## 3.1.0") and result.tokens_in == 11


def test_a_novel_task_goes_to_the_strong_model_and_can_only_queue_a_skill(world):
    agent, llm, library, control, store, _ = world
    llm.add(tool_result_contains="queued as", reply="Here is your itinerary.")
    llm.add(
        system_contains="No stored skill fits",
        tool_calls=[
            {
                "name": "create_skill",
                "arguments": {
                    "name": "city-itineraries",
                    "description": "Plans multi-day city itineraries balancing sights, food "
                    "and travel time. Use when the user asks for a day-by-day trip plan.",
                    "body": "# Itineraries\n\n1. Group sights by neighbourhood.\n2. One big sight a day.\n",
                },
            }
        ],
    )
    result = agent.run("Plan a three-day itinerary for Lisbon")
    assert result.route == "novel" and result.model == "strong-model"
    assert {r.body["model"] for r in llm.chat_requests()} == {"strong-model"}
    assert len(result.created) == 1 and control.queue.get("city-itineraries").id == result.created[0]
    library.reload()
    assert "city-itineraries" not in library.skills()  # pending only, never live
    assert store.read().records[0].route == "novel" and result.answer == "Here is your itinerary."


def test_a_related_task_loads_the_related_body(world):
    agent, llm, library, *_ = world
    llm.add(system_contains="Compose with it or extend it", reply="Semantic versioning is MAJOR.MINOR.PATCH.")
    result = agent.run("Explain semantic versioning to a new hire")
    assert result.route == "related" and result.skill == "release-notes"
    system = llm.chat_requests()[0].body["messages"][0]["content"]
    assert library.get("release-notes").body.strip().splitlines()[0] in system


def test_evaluation_mode_offers_no_mutation_tools(world):
    agent, llm, *_ = world
    agent.allow_mutation = False
    llm.add(system_contains="No stored skill fits", reply="Done without tools.")
    agent.run("Plan a three-day itinerary for Lisbon")
    assert "tools" not in llm.chat_requests()[0].body


def test_without_a_key_the_cli_prints_the_route_and_exits_0(world, tmp_path):
    *_, mcp_url = world
    env = {k: v for k, v in os.environ.items() if k not in ("BASE_URL", "API_KEY", "AGENT_MODEL")}
    env.update(
        {
            "MCP_URL": mcp_url,
            "INGOT_HOME": str(tmp_path / "cli-runs"),
            "SKILLS_DIRS": str(_empty_root(tmp_path)),
            "HF_HUB_OFFLINE": "1",
            "BASE_URL": "https://openrouter.ai/api/v1",
            "AGENT_MODEL": "some/model",
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "ingot.cli", "agent", "Draft release notes for v3.1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("route: match release-notes")
    assert "API_KEY" in done.stdout


def _empty_root(tmp_path: Path) -> Path:
    """The agent reads skills over MCP; its own settings only need a library for its state home."""
    root = tmp_path / "agent-skills"
    root.mkdir(exist_ok=True)
    return root
