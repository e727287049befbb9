"""The reference agent end to end: real MCP server, scripted model server, real trace store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.run import ReferenceAgent
from agent.workspace import revision_of
from optimize.models.traces import LocalTraceStore
from tests.conftest import free_port
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


def test_with_no_server_running_the_cli_says_so_in_one_line(tmp_path):
    env = {**os.environ, "MCP_URL": f"http://127.0.0.1:{free_port()}/mcp", "HF_HUB_OFFLINE": "1"}
    env.update({"INGOT_HOME": str(tmp_path / "home"), "SKILLS_DIRS": str(_empty_root(tmp_path))})
    done = subprocess.run(
        [sys.executable, "-m", "ingot.cli", "agent", "Draft release notes for v3.1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("Error: cannot reach Ingot's MCP server at http://127.0.0.1:")
    assert "start it with `ingot serve`" in done.stderr and len(done.stderr.splitlines()) == 1


def _empty_root(tmp_path: Path) -> Path:
    """The agent reads skills over MCP; its own settings only need a library for its state home."""
    root = tmp_path / "agent-skills"
    root.mkdir(exist_ok=True)
    return root


# -- skills whose answer is in their files: a reference to read, a script to run ----------------

RATES = "# Freedonia VAT\n\n| province | rate |\n|---|---|\n| Sylvania | 17.5% |\n| Marsovia | 9% |\n"
ZORBLAX = (
    "#!/usr/bin/env python3\nimport hashlib, sys\n"
    "text = open(sys.argv[1], 'rb').read().strip()\n"
    "print('ZORBLAX', hashlib.sha256(b'zorblax:' + text).hexdigest()[:16])\n"
)
VAT_TASK = "What is the VAT rate for the Freedonia province of Sylvania?"
ZORBLAX_TASK = "Compute the Zorblax ledger checksum of the text 'hello world'"


@pytest.fixture
def files_world(tmp_path, library_factory):
    """Two skills whose answers live in their files, served over real MCP, a real bubblewrap
    sandbox and the scripted model server: (agent, llm server, skills root)."""
    from optimize.control.changes import ChangeControl
    from optimize.measure.sandbox import BubblewrapSandbox
    from tests.conftest import running_mcp, write_skill
    from tests.optimize.conftest import require_bwrap

    require_bwrap()
    root = tmp_path / "skills"
    write_skill(
        root,
        "freedonia-vat",
        "Looks up the official Freedonia VAT rate for a province in the bundled rate table. "
        "Use when asked for a Freedonia VAT rate.",
        "# Freedonia VAT\n\nThe rates are in references/rates.md; quote the row for the province.\n",
        files={"references/rates.md": RATES},
    )
    write_skill(
        root,
        "zorblax-checksum",
        "Computes the Zorblax ledger checksum of a text with the bundled script. "
        "Use when asked for a Zorblax checksum.",
        "# Zorblax checksum\n\nWrite the text to a file and run scripts/zorblax.py on it.\n",
        files={"scripts/zorblax.py": ZORBLAX},
    )
    library = library_factory(root)
    with (
        running_mcp(library, control=ChangeControl(tmp_path / "runs", (root,))) as url,
        scripted_llm() as llm,
    ):
        agent = ReferenceAgent(url, llm.client("agent", "strong"), None, runner=BubblewrapSandbox())
        yield agent, llm, root


def tool_results(llm) -> list[str]:
    return [m["content"] for m in llm.chat_requests()[-1].body["messages"] if m["role"] == "tool"]


def test_a_skill_whose_answer_is_in_a_reference_file_is_read_from_the_routed_revision(files_world):
    agent, llm, root = files_world
    llm.add(tool_result_contains="17.5%", reply="Sylvania: 17.5%")
    llm.add(
        system_contains='name="freedonia-vat"',
        tool_calls=[{"name": "read_file", "arguments": {"file_path": "/skill/references/rates.md"}}],
        # The live folder changes while the task runs: the agent must still read its revision.
        before_reply=lambda body: (root / "freedonia-vat/references/rates.md").write_text("TAMPERED\n"),
    )
    result = agent.run(VAT_TASK)
    assert (result.route, result.skill, result.answer) == ("match", "freedonia-vat", "Sylvania: 17.5%")
    assert result.tools == ("read_file",) and result.model_calls == 2
    (read,) = tool_results(llm)
    assert "| Sylvania | 17.5% |" in read and "TAMPERED" not in read
    first = llm.chat_requests()[0].body
    assert [t["function"]["name"] for t in first["tools"]] == ["read_file"]
    assert "/skill/references/rates.md" in first["messages"][0]["content"]


def test_a_skill_whose_answer_needs_its_script_runs_it_in_the_sandbox(files_world):
    import hashlib

    agent, llm, _ = files_world
    expected = "ZORBLAX " + hashlib.sha256(b"zorblax:hello world").hexdigest()[:16]
    llm.add(tool_result_contains=expected, reply=f"The checksum is {expected.split()[1]}")
    llm.add(
        tool_result_contains="Updated file /scratch/input.txt",
        tool_calls=[
            {"name": "execute", "arguments": {"command": "python3 scripts/zorblax.py /scratch/input.txt"}}
        ],
    )
    llm.add(
        system_contains='name="zorblax-checksum"',
        tool_calls=[
            {"name": "write_file", "arguments": {"file_path": "/scratch/input.txt", "content": "hello world"}}
        ],
    )
    result = agent.run(ZORBLAX_TASK)
    assert result.skill == "zorblax-checksum" and result.answer.endswith(expected.split()[1])
    assert result.tools == ("execute", "read_file", "write_file") and result.model_calls == 3
    assert expected in tool_results(llm)[-1]  # the real script's output, from inside bubblewrap


def test_the_served_skill_cannot_be_changed_by_the_agent(files_world):
    agent, llm, root = files_world
    live = root / "zorblax-checksum/scripts/zorblax.py"
    before = live.read_bytes()
    llm.add(tool_result_contains="hashlib", reply="done")
    llm.add(
        tool_result_contains="read-only",
        tool_calls=[{"name": "read_file", "arguments": {"file_path": "/skill/scripts/zorblax.py"}}],
    )
    llm.add(
        system_contains='name="zorblax-checksum"',
        tool_calls=[
            {
                "name": "write_file",
                "arguments": {"file_path": "/skill/scripts/zorblax.py", "content": "pwned"},
            }
        ],
    )
    result = agent.run(ZORBLAX_TASK)
    assert result.answer == "done"
    refused, reread = tool_results(llm)
    assert "read-only" in refused and "hashlib" in reread and "pwned" not in reread
    assert live.read_bytes() == before


def test_without_a_sandbox_scripts_are_not_offered_and_the_prompt_says_why(files_world):
    agent, llm, _ = files_world
    agent.runner = None
    llm.add(system_contains='name="zorblax-checksum"', reply="I could not run the script here.")
    result = agent.run(ZORBLAX_TASK)
    assert result.tools == ("read_file",)
    system = llm.chat_requests()[0].body["messages"][0]["content"]
    assert "cannot be run here (no sandbox is configured)" in system


def test_a_run_stops_at_the_model_call_limit_and_says_so(files_world):
    from agent.run import AgentLimits

    agent, llm, _ = files_world
    agent.limits = AgentLimits(model_calls=3)
    llm.add(
        system_contains='name="freedonia-vat"',
        tool_calls=[{"name": "read_file", "arguments": {"file_path": "/skill/references/rates.md"}}],
    )
    result = agent.run(VAT_TASK)
    assert len(llm.chat_requests()) == 3 and result.model_calls == 3
    assert result.note == "stopped at the limit of 3 model calls per task"


def test_a_trivial_routed_task_is_one_model_request(files_world):
    agent, llm, _ = files_world
    llm.add(system_contains='name="freedonia-vat"', reply="17.5%")
    agent.run(VAT_TASK)
    assert len(llm.chat_requests()) == 1


def test_a_skill_edited_behind_the_servers_back_is_reloaded_and_served_whole(files_world):
    agent, llm, root = files_world
    # The server's index still has the old revision (no watcher in tests) and re-hashes every
    # file it serves against it, so the agent's first copy fails; it asks for reload_skills,
    # routes again and serves the new revision whole, never a mix of the two.
    (root / "freedonia-vat/references/rates.md").write_text("| Sylvania | 0% |\n")
    llm.add(tool_result_contains="| Sylvania |", reply="read")
    llm.add(
        system_contains='name="freedonia-vat"',
        tool_calls=[{"name": "read_file", "arguments": {"file_path": "/skill/references/rates.md"}}],
    )
    result = agent.run(VAT_TASK)
    on_disk = {
        p.relative_to(root / "freedonia-vat").as_posix(): p.read_bytes()
        for p in (root / "freedonia-vat").rglob("*")
        if p.is_file()
    }
    assert result.revision == revision_of(on_disk)
    (read,) = tool_results(llm)
    assert "| Sylvania | 0% |" in read
