"""A reference-agent run as Langfuse sees it: real MCP server, scripted model, fake Langfuse.

The store comes from `LangfuseTraceStore.connect` (as settings build it); the spans asserted on
are what the real SDK exported to the fake server, decoded (tests/otlp.py)."""

from __future__ import annotations

import secrets
import time

import pytest

from agent.run import ReferenceAgent
from optimize.control.changes import ChangeControl
from optimize.models.ledger import Price, UsageLedger
from optimize.models.traces_langfuse import LangfuseTraceStore
from tests.conftest import running_mcp, write_skill
from tests.fake_langfuse import fake_langfuse
from tests.scripted_llm import scripted_llm

RATES = "# Freedonia VAT\n\n| province | rate |\n|---|---|\n| Sylvania | 17.5% |\n"
TASK = "What is the VAT rate for the Freedonia province of Sylvania?"
PRICES = {"agent-model": Price(1.0, 2.0), "strong-model": Price(3.0, 6.0)}
DELAY_S = 0.2  # how long the scripted model takes to answer each call


@pytest.fixture
def world(tmp_path, library_factory):
    """(agent, scripted model server, fake Langfuse, store) around one skill with a reference file."""
    root = tmp_path / "skills"
    write_skill(
        root,
        "freedonia-vat",
        "Looks up the official Freedonia VAT rate for a province in the bundled rate table. "
        "Use when asked for a Freedonia VAT rate.",
        "# Freedonia VAT\n\nThe rates are in references/rates.md; quote the row for the province.\n",
        files={"references/rates.md": RATES},
    )
    library = library_factory(root)
    public_key = f"pk-lf-{secrets.token_hex(4)}"  # the SDK keeps one client per key per process
    with (
        running_mcp(library, control=ChangeControl(tmp_path / "runs", (root,))) as url,
        scripted_llm() as llm,
        fake_langfuse(public_key=public_key) as langfuse,
    ):
        store = LangfuseTraceStore.connect(public_key, "sk-lf-test", base_url=langfuse.url)
        client = llm.client("agent", "strong", ledger=UsageLedger("langfuse-run", PRICES))
        agent = ReferenceAgent(url, client, store, session="conversation-42")
        yield agent, llm, langfuse, store
        store.close()


def slow(body: dict) -> None:
    time.sleep(DELAY_S)  # the model's own latency, inside the fake server: not a test waiting


def test_dump(world):
    agent, llm, langfuse, store = world
    llm.add(tool_result_contains="17.5%", reply="Sylvania: 17.5%", before_reply=slow)
    llm.add(
        system_contains='name="freedonia-vat"',
        tool_calls=[{"name": "read_file", "arguments": {"file_path": "/skill/references/rates.md"}}],
        before_reply=slow,
        prompt_tokens=100,
        completion_tokens=20,
    )
    result = agent.run(TASK)
    assert result.answer == "Sylvania: 17.5%"
    for s in langfuse.spans:
        print(s.name, s.trace_id[:8], s.span_id[:8], (s.parent_id or "")[:8], round(s.duration_ms), s.kind)
        for k, v in s.attributes.items():
            print("    ", k, str(v)[:150])
    print(store.read())
    assert False
