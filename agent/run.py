"""The reference agent: route once through Ingot, serve with the right model, record the run.

Per task it calls `route_and_load` once with its real context (harness, platform, cwd, tools),
then runs a LangGraph agent (`langchain.agents.create_agent`):
- `match`: the cheap AGENT_MODEL, with the skill body as its system prompt;
- `related_match`: AGENT_MODEL, told to compose with or extend the related skill;
- `novel`: STRONG_MODEL, which may call `create_skill` to queue a reusable candidate (pending only).
Models are called through Ingot's one client (agent/chat_model.py), so ZDR, the cost cap and
cassettes apply. Evaluation runs pass `allow_mutation=False`: no create_skill. Every run is
appended to the trace store tagged with skill and revision (or novel/related). MCP tools are
wrapped from fastmcp's client because langchain-mcp-adapters needs mcp<2 (see ARCHITECTURE.md).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from fastmcp import Client
from langchain.agents import create_agent
from langchain_core.tools import StructuredTool

from agent.chat_model import IngotChatModel
from ingot.errors import ConfigError, IngotError
from optimize.models.llm import LLMClient
from optimize.models.prompting import render
from optimize.models.traces import TraceRecord, TraceStore

HARNESS = "ingot-agent"


@dataclass(frozen=True)
class AgentResult:
    task: str
    route: str  # "match" | "related" | "novel"
    skill: str | None
    revision: str | None
    score: float
    model: str | None
    answer: str | None
    tokens_in: int = 0
    tokens_out: int = 0
    tool_calls: tuple[dict[str, Any], ...] = ()
    created: tuple[str, ...] = ()  # change ids queued through create_skill
    note: str | None = None  # why nothing was generated (e.g. no model configured)


@dataclass(frozen=True)
class Served:
    answer: str
    tokens_in: int
    tokens_out: int
    tool_calls: tuple[dict[str, Any], ...]


def serve(
    llm: LLMClient,
    role: str,
    system: str,
    task: str,
    tools: list[StructuredTool] | None = None,
    skill_revision: str | None = None,
) -> Served:
    """One task through the LangGraph agent: the same path for live runs and for A/B evaluation."""
    model = IngotChatModel(client=llm, role=role, skill_revision=skill_revision)
    graph = create_agent(model=model, tools=tools or [], system_prompt=system)
    state = graph.invoke({"messages": [{"role": "user", "content": task}]}, {"recursion_limit": 12})
    messages = state["messages"]
    usage = [m.usage_metadata for m in messages if getattr(m, "usage_metadata", None)]
    calls = tuple(
        {"name": c["name"], "arguments": c["args"]}
        for m in messages
        for c in (getattr(m, "tool_calls", None) or [])
    )
    return Served(
        str(messages[-1].content),
        sum(u["input_tokens"] for u in usage),
        sum(u["output_tokens"] for u in usage),
        calls,
    )


def skill_system_prompt(kind: str, name: str, revision: str, body: str) -> str:
    """The system prompt that serves a skill (`match`) or offers it to adapt (`related`)."""
    return render(f"agent_{kind}", name=name, revision=revision, body=body)


class ReferenceAgent:
    def __init__(
        self,
        mcp_url: str,
        llm: LLMClient | None,
        store: TraceStore | None,
        allow_mutation: bool = True,
        harness: str = HARNESS,
    ) -> None:
        self.mcp_url, self.llm, self.store = mcp_url, llm, store
        self.allow_mutation, self.harness = allow_mutation, harness

    def _call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            async with Client(self.mcp_url) as client:
                result = await client.call_tool(tool, args, raise_on_error=False)
                if result.is_error:
                    raise IngotError(result.content[0].text if result.content else f"{tool} failed")
                return dict(result.structured_content or {})

        return asyncio.run(go())

    def route(self, task: str, cwd: str | None) -> dict[str, Any]:
        tools = ["create_skill"] if self.allow_mutation else []
        return self._call(
            "route_and_load",
            {
                "task": task,
                "harness": self.harness,
                "platform": sys.platform,
                "cwd": cwd or os.getcwd(),
                "available_tools": tools,
                "available_mcps": ["ingot"],
            },
        )

    def run(self, task: str, cwd: str | None = None) -> AgentResult:
        started = time.perf_counter()
        decision = self.route(task, cwd)
        kind = "match" if decision["match"] else "related" if decision["related_match"] else "novel"
        name = decision["match"] or decision["related_match"]
        role = "strong" if kind == "novel" else "agent"
        base = {
            "task": task,
            "route": kind,
            "skill": name,
            "revision": decision.get("revision"),
            "score": float(decision.get("score") or 0.0),
        }
        try:
            endpoint = self.llm.config.endpoint(role) if self.llm else None
        except ConfigError as exc:
            endpoint, reason = None, str(exc)
        else:
            reason = "no model client configured"
        if endpoint is None or self.llm is None:
            return AgentResult(**base, model=None, answer=None, note=reason)
        created: list[str] = []
        tools = [self._create_skill_tool(created)] if kind == "novel" and self.allow_mutation else []
        if kind == "novel":
            system = render("agent_novel", create_hint=render("agent_create_hint") if tools else "")
        else:
            system = skill_system_prompt(kind, name, decision["revision"], decision["skill_body"])
        served = serve(self.llm, role, system, task, tools, decision.get("revision"))
        result = AgentResult(
            **base,
            model=endpoint.model,
            answer=served.answer,
            tokens_in=served.tokens_in,
            tokens_out=served.tokens_out,
            tool_calls=served.tool_calls,
            created=tuple(created),
        )
        self._record(result, time.perf_counter() - started)
        return result

    def _create_skill_tool(self, created: list[str]) -> StructuredTool:
        def create_skill(name: str, description: str, body: str) -> str:
            """Queue a reusable skill for human review (never used until approved)."""
            try:
                data = self._call("create_skill", {"name": name, "description": description, "body": body})
            except IngotError as exc:
                return f"not queued: {exc}"
            created.append(data["change_id"])
            return f"queued as {data['skill']} ({data['change_id']}) for human review"

        return StructuredTool.from_function(create_skill)

    def _record(self, result: AgentResult, seconds: float) -> None:
        if self.store is None:
            return
        self.store.append(
            TraceRecord(
                task=result.task,
                answer=result.answer,
                route=result.route,
                skill=result.skill if result.route != "novel" else None,
                revision=result.revision if result.route != "novel" else None,
                model=result.model,
                tokens_in=result.tokens_in,
                tokens_out=result.tokens_out,
                duration_ms=round(seconds * 1000, 1),
                tool_calls=result.tool_calls,
                harness=self.harness,
            )
        )
