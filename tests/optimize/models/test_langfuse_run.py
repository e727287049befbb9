"""A reference-agent run as a Langfuse user sees it: real MCP server, scripted model, fake Langfuse.

The store is the one the settings build (`ingot.model_runtime.trace_store` with both LANGFUSE keys),
so these tests also hold production's wiring to `LangfuseTraceStore.connect`. What they assert on
is what the real SDK exported, decoded (tests/otlp.py), and what the observations API answers
(tests/fake_langfuse.py), read through the SDK's own API client."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from langfuse.api.client import LangfuseAPI

from agent.run import AgentResult, ReferenceAgent
from ingot.model_runtime import trace_store
from ingot.settings import load_settings
from optimize.control.changes import ChangeControl
from optimize.models.ledger import Price, UsageLedger
from optimize.models.traces import TraceStore
from tests.conftest import running_mcp, write_skill
from tests.fake_langfuse import FakeLangfuse, fake_langfuse
from tests.otlp import Span
from tests.scripted_llm import ScriptedLLM, scripted_llm

RATES = "# Freedonia VAT\n\n| province | rate |\n|---|---|\n| Sylvania | 17.5% |\n"
TASK = "What is the VAT rate for the Freedonia province of Sylvania?"
SESSION = "conversation-42"
PRICES = {"agent-model": Price(1.0, 2.0), "strong-model": Price(3.0, 6.0)}  # USD per million tokens
DELAY_S = 0.2  # how long the scripted model takes to answer each call
SECRET = "sk-lf-test"


@dataclass
class Run:
    """One finished agent run and everything Langfuse received for it."""

    result: AgentResult
    started_ns: int
    ended_ns: int
    langfuse: FakeLangfuse
    api: LangfuseAPI
    store: TraceStore

    def spans(self, type_: str) -> list[Span]:
        return sorted(
            (s for s in self.langfuse.spans if s.attributes.get("langfuse.observation.type") == type_),
            key=lambda s: s.start_ns,
        )

    @property
    def root(self) -> Span:
        (root,) = [s for s in self.langfuse.spans if s.parent_id is None]
        return root

    def under_root(self, span: Span) -> bool:
        """Whether `span` nests under the run's root observation, through its parents."""
        by_id = {s.span_id: s for s in self.langfuse.spans}
        while span.parent_id is not None:
            span = by_id[span.parent_id]
        return span is self.root


def slow(body: dict) -> None:
    time.sleep(DELAY_S)  # the model's own latency, inside the fake server: not a test waiting


@pytest.fixture
def run(tmp_path, library_factory, monkeypatch) -> Iterator[Run]:
    """The agent answers TASK from a skill's reference file: route, two model calls, one read_file."""
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
        fake_langfuse(public_key=public_key, secret_key=SECRET) as langfuse,
    ):
        monkeypatch.setenv("SKILLS_DIRS", str(root))
        monkeypatch.setenv("INGOT_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", public_key)
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET)
        monkeypatch.setenv("LANGFUSE_BASE_URL", langfuse.url)
        store = trace_store(load_settings())
        script(llm)
        client = llm.client("agent", "strong", ledger=UsageLedger("langfuse-run", PRICES))
        agent = ReferenceAgent(url, client, store, session=SESSION)
        started = time.time_ns()
        result = agent.run(TASK)
        ended = time.time_ns()
        api = LangfuseAPI(base_url=langfuse.url, username=public_key, password=SECRET)
        yield Run(result, started, ended, langfuse, api, store)
        store.close()  # stop the exporter while the fake server is still up


def script(llm: ScriptedLLM) -> None:
    llm.add(
        tool_result_contains="17.5%",
        reply="Sylvania: 17.5%",
        before_reply=slow,
        prompt_tokens=300,
        completion_tokens=5,
    )
    llm.add(
        system_contains='name="freedonia-vat"',
        tool_calls=[{"name": "read_file", "arguments": {"file_path": "/skill/references/rates.md"}}],
        before_reply=slow,
        prompt_tokens=100,
        completion_tokens=20,
    )


def test_an_agent_run_is_one_trace_whose_root_lasts_exactly_as_long_as_the_run(run):
    assert run.result.answer == "Sylvania: 17.5%" and run.result.model_calls == 2
    root = run.root
    assert {s.trace_id for s in run.langfuse.spans} == {root.trace_id}
    assert root.name == "ingot-agent-run" and root.attributes["langfuse.observation.type"] == "agent"
    assert run.started_ns <= root.start_ns and root.end_ns <= run.ended_ns
    assert root.duration_ms >= 2 * DELAY_S * 1000  # both model calls happened inside it
    assert all(root.start_ns <= s.start_ns and s.end_ns <= root.end_ns for s in run.langfuse.spans)
    assert all(run.under_root(s) for s in run.langfuse.spans)
    (seen,) = run.api.observations.get_many(name="ingot-agent-run", fields="core,basic,metrics").data
    assert seen.type == "AGENT"
    assert seen.is_root_observation and seen.session_id == SESSION
    assert seen.latency >= 2 * DELAY_S
    assert root.attributes["langfuse.trace.tags"] == [
        "freedonia-vat",
        f"revision=freedonia-vat@{run.result.revision}",
    ]


def test_each_model_call_is_a_generation_with_its_model_usage_and_the_ledgers_cost(run):
    first, second = run.spans("generation")
    for span in (first, second):
        assert span.attributes["langfuse.observation.model.name"] == "agent-model"
        assert span.duration_ms >= DELAY_S * 1000  # the call's own latency, not a stamp
        assert run.under_root(span)
    assert first.json("langfuse.observation.usage_details") == {"input": 100, "output": 20, "total": 120}
    assert second.json("langfuse.observation.usage_details") == {"input": 300, "output": 5, "total": 305}
    seen = run.api.observations.get_many(
        type="GENERATION", session_id=SESSION, fields="core,basic,model,usage"
    ).data
    costs = sorted(o.total_cost for o in seen)
    assert costs == [pytest.approx((100 * 1.0 + 20 * 2.0) / 1e6), pytest.approx((300 * 1.0 + 5 * 2.0) / 1e6)]
    assert {o.model for o in seen} == {"agent-model"} and {o.trace_id for o in seen} == {run.root.trace_id}


def test_routing_and_the_agents_file_read_are_tool_observations_of_the_run(run):
    route, read = run.spans("tool")
    assert route.name == "route_and_load" and route.parent_id == run.root.span_id
    assert route.json("langfuse.observation.output")["match"] == "freedonia-vat"
    assert read.name == "read_file" and run.under_root(read)
    assert read.json("langfuse.observation.input") == {"file_path": "/skill/references/rates.md"}
    assert "17.5%" in read.attributes["langfuse.observation.output"]
    seen = run.api.observations.get_many(type="TOOL", trace_id=run.root.trace_id, fields="core,basic").data
    assert sorted(o.name for o in seen) == ["read_file", "route_and_load"]
    assert {o.session_id for o in seen} == {SESSION}


def test_the_run_reads_back_as_one_record_with_its_session_and_calls(run):
    (record,) = run.store.read().records
    assert (record.task, record.answer, record.session) == (TASK, "Sylvania: 17.5%", SESSION)
    assert (record.route, record.skill, record.revision) == ("match", "freedonia-vat", run.result.revision)
    assert [c["tokens_in"] for c in record.model_calls] == [100, 300]
    assert record.tool_calls == (
        {"name": "read_file", "arguments": {"file_path": "/skill/references/rates.md"}},
    )
