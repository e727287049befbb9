"""The reference agent: route once through Ingot, serve with the right model, record the run.

Per task it calls `route_and_load` once with its real context (harness, platform, cwd, tools),
reads the routed revision's files through the skill:// resources in the same session (each
checked against the manifest, the whole against the routed revision), then runs a deepagents
agent (`create_deep_agent`) over Ingot's one model client (agent/chat_model.py, so ZDR, the cost
cap and cassettes apply):
- `match`: the cheap AGENT_MODEL, with the skill body as its system prompt;
- `related_match`: AGENT_MODEL, told to compose with or extend the related skill;
- `novel`: STRONG_MODEL, which may call `create_skill` to queue a reusable candidate (pending only).
The skill's files are served from that snapshot (workspace.py), offering only the tools the
skill needs; model and tool calls are capped per task. `serve` is the one serving path: live
runs, the optimizer's rollouts and the held-out A/B all go through it. Evaluation runs pass
`allow_mutation=False`: no create_skill. Every run is recorded in the trace store tagged with
skill, revision and its session (the caller's conversation id, or one per run), which is also
sent to `route_and_load`; the store observes the run while it happens (`start_run`: Langfuse
sees routing, each model call and tool call as they occur). MCP tools are wrapped from fastmcp's
client because langchain-mcp-adapters needs mcp<2 (see ARCHITECTURE.md).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

from deepagents import (
    FilesystemMiddleware,
    GeneralPurposeSubagentProfile,
    HarnessProfile,
    create_deep_agent,
    register_harness_profile,
)
from fastmcp import Client
from fastmcp.skills.client import SkillsClientExtension
from langchain.agents.middleware import AgentMiddleware, ModelCallLimitMiddleware, ToolCallLimitMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from mcp.shared.exceptions import MCPError

from agent.chat_model import PROVIDER, IngotChatModel
from agent.workspace import ScriptRunner, SkillSnapshot, workspace
from ingot.errors import ConfigError, IngotError, SkillChanged, first_line
from optimize.models.llm import LLMClient
from optimize.models.prompting import render
from optimize.models.traces import AppendOnFinish, RunTrace, TraceRecord, TraceStore

HARNESS = "ingot-agent"

# Ingot's own provider name (IngotChatModel reports it), so this profile applies to no one else:
# no general-purpose subagent (no `task` tool; one agent per task keeps calls countable) and no
# conversation summarization (runs are capped far below any context window; it would write
# history files and make extra model calls).
register_harness_profile(
    PROVIDER,
    HarnessProfile(
        general_purpose_subagent=GeneralPurposeSubagentProfile(enabled=False),
        excluded_middleware=frozenset({"SummarizationMiddleware"}),
    ),
)


@dataclass(frozen=True)
class AgentLimits:
    model_calls: int = 8  # per task; the run ends with what it has when it reaches this
    tool_calls: int = 16  # per task; calls past it are refused and the model is told so
    script_wall_s: float = 10.0  # per execute call, at most the sandbox's own limit


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
    note: str | None = None  # why nothing was generated, or why the run stopped early
    model_calls: int = 0
    tools: tuple[str, ...] = ()  # tools offered to the model
    messages: tuple[dict[str, Any], ...] = ()  # the transcript (see Served)
    tool_schemas: tuple[dict[str, Any], ...] = ()
    calls: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Served:
    answer: str
    tokens_in: int
    tokens_out: int
    tool_calls: tuple[dict[str, Any], ...]
    model_calls: int = 0
    tools: tuple[str, ...] = ()
    stopped: str | None = None  # set when the run hit the model-call limit
    # The transcript: the last request's messages (wire shape) followed by the final answer,
    # the tool schemas it offered, and each model call's model, tokens and cost.
    messages: tuple[dict[str, Any], ...] = ()
    tool_schemas: tuple[dict[str, Any], ...] = ()
    calls: tuple[dict[str, Any], ...] = ()


class _OfferOnly(AgentMiddleware):
    """Show the model only the tools it was offered (deepagents always registers read_file)."""

    def __init__(self, offered: frozenset[str]) -> None:
        super().__init__()
        self.offered = offered

    def wrap_model_call(self, request, handler):  # noqa: ANN001, ANN201 - langchain's hook signature
        return handler(request.override(tools=[t for t in request.tools if _name(t) in self.offered]))

    def wrap_tool_call(self, request, handler):  # noqa: ANN001, ANN201
        name = request.tool_call["name"]
        if name in self.offered:
            return handler(request)
        return ToolMessage(
            content=f"Error: {name} is not available here.",
            tool_call_id=request.tool_call["id"] or "",
            name=name,
            status="error",
        )


def _name(tool: BaseTool | dict[str, Any]) -> str | None:
    return tool.get("name") if isinstance(tool, dict) else getattr(tool, "name", None)


def serve(
    llm: LLMClient,
    role: str,
    system: str,
    task: str,
    tools: Sequence[BaseTool] | None = None,
    skill_revision: str | None = None,
    *,
    skill: SkillSnapshot | None = None,
    runner: ScriptRunner | None = None,
    limits: AgentLimits | None = None,
    callbacks: Sequence[Any] = (),
) -> Served:
    """One task through the deepagents agent: the same path for live runs and for evaluation.
    With `skill`, its files are readable (and its scripts runnable through `runner`); `callbacks`
    (LangChain handlers, e.g. a trace store's) observe the run."""
    limits = limits or AgentLimits()
    requests: list[dict[str, Any]] = []
    model = IngotChatModel(
        client=llm, role=role, skill_revision=skill_revision or (skill and skill.revision), calls=requests
    )
    ws = workspace(skill, runner, limits.script_wall_s)
    offered = frozenset(ws.tools) | {t.name for t in tools or ()}
    graph = create_deep_agent(
        model=model,
        tools=list(tools or ()),
        system_prompt=system + ws.prompt,
        backend=ws.backend,
        middleware=[
            FilesystemMiddleware(
                backend=ws.backend,
                tools=ws.middleware_tools,
                tool_token_limit_before_evict=None,  # a long reference must reach the model whole
                human_message_token_limit_before_evict=None,
            ),
            ModelCallLimitMiddleware(run_limit=limits.model_calls, exit_behavior="end"),
            ToolCallLimitMiddleware(run_limit=limits.tool_calls, exit_behavior="continue"),
            _OfferOnly(offered),
        ],
    )
    state = graph.invoke(
        {"messages": [{"role": "user", "content": task}], "files": ws.files},
        config={"callbacks": list(callbacks)} if callbacks else None,
    )
    return _with_transcript(_served(state["messages"], tuple(sorted(offered)), limits), requests)


def _with_transcript(served: Served, requests: list[dict[str, Any]]) -> Served:
    """`served` with the run's transcript: the last request plus the answer it got."""
    if not requests:
        return served
    last = requests[-1]
    messages = [*last["messages"]]
    if served.answer and served.stopped is None:
        messages.append({"role": "assistant", "content": served.answer})
    calls = tuple({k: r[k] for k in ("model", "tokens_in", "tokens_out", "cost_usd")} for r in requests)
    return replace(served, messages=tuple(messages), tool_schemas=tuple(last["tools"]), calls=calls)


def _served(messages: list[Any], offered: tuple[str, ...], limits: AgentLimits) -> Served:
    answered = [m for m in messages if isinstance(m, AIMessage) and m.usage_metadata]
    calls = tuple({"name": c["name"], "arguments": c["args"]} for m in answered for c in (m.tool_calls or []))
    last = messages[-1]
    stopped = None
    if not (isinstance(last, AIMessage) and last.usage_metadata) and len(answered) >= limits.model_calls:
        stopped = f"stopped at the limit of {limits.model_calls} model calls per task"
    final = next((m for m in reversed(answered) if not m.tool_calls), None)
    return Served(
        str(final.content) if final is not None else "",
        sum(m.usage_metadata["input_tokens"] for m in answered),
        sum(m.usage_metadata["output_tokens"] for m in answered),
        calls,
        len(answered),
        offered,
        stopped,
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
        runner: ScriptRunner | None = None,
        limits: AgentLimits | None = None,
        session: str | None = None,
    ) -> None:
        self.mcp_url, self.llm, self.store = mcp_url, llm, store
        self.allow_mutation, self.harness = allow_mutation, harness
        self.runner, self.limits = runner, limits or AgentLimits()
        self.session = session  # the caller's conversation id; None: each run is its own

    def _call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            async with Client(self.mcp_url) as client:
                return await _tool(client, tool, args)

        return asyncio.run(go())

    def route(
        self, task: str, cwd: str | None, session: str | None = None
    ) -> tuple[dict[str, Any], SkillSnapshot | None]:
        """`route_and_load` once, and the routed revision's files from the same session. If the
        files no longer match the route (the skill changed on disk), the server is asked to
        `reload_skills` and the task is routed once more; a second mismatch is `SkillChanged`.
        A copy that mixes two revisions is never served."""
        args = {
            "task": task,
            "harness": self.harness,
            "platform": sys.platform,
            "cwd": cwd or os.getcwd(),
            "available_tools": ["create_skill"] if self.allow_mutation else [],
            "available_mcps": ["ingot"],
            **({"session": session} if session else {}),
        }

        async def go() -> tuple[dict[str, Any], SkillSnapshot | None]:
            # The files' list comes from `skills/get` (SEP-2640's Skills extension): Ingot lists no
            # synthetic `_manifest` resource for fastmcp's resource-mode fallback to read.
            async with Client(self.mcp_url, extensions=[SkillsClientExtension()]) as client:
                for attempt in range(2):
                    decision = await _tool(client, "route_and_load", args)
                    name = decision["match"] or decision["related_match"]
                    if name is None:
                        return decision, None
                    try:
                        skill = await client.read_skill(f"skill://{name}/SKILL.md")
                        return decision, SkillSnapshot.verified(name, decision["revision"], skill.files)
                    except (SkillChanged, ValueError, MCPError) as exc:
                        if attempt:
                            raise SkillChanged(f"could not load a stable copy of {name!r}: {exc}") from exc
                        await _tool(client, "reload_skills", {})
            raise AssertionError("unreachable: the loop returns or raises")

        try:
            return asyncio.run(go())
        except RuntimeError as exc:  # fastmcp wraps a refused connection as "Client failed to connect"
            if not str(exc).startswith("Client failed to connect"):
                raise
            raise IngotError(
                f"cannot reach Ingot's MCP server at {self.mcp_url} ({first_line(exc)}): "
                "start it with `ingot serve` in another shell, or set MCP_URL to where it runs"
            ) from exc

    def run(self, task: str, cwd: str | None = None) -> AgentResult:
        session = self.session or f"{self.harness}-{secrets.token_hex(8)}"
        started = time.perf_counter()
        with self._start_run(task, session) as trace:
            with trace.tool("route_and_load", {"task": task, "session": session}) as routed:
                decision, snapshot = self.route(task, cwd, session)
                routed(_decision_summary(decision))
            result = self._serve(task, decision, snapshot, trace)
            if result.model is not None:  # a model served it (else: routed only, as before)
                trace.finish(self._record(result, time.perf_counter() - started, session))
        return result

    def _start_run(self, task: str, session: str) -> AbstractContextManager[RunTrace]:
        if self.store is None:
            return nullcontext(AppendOnFinish(None))
        return self.store.start_run(task, session)

    def _serve(
        self, task: str, decision: dict[str, Any], snapshot: SkillSnapshot | None, trace: RunTrace
    ) -> AgentResult:
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
        if snapshot is None:
            system = render("agent_novel", create_hint=render("agent_create_hint") if tools else "")
        else:
            system = skill_system_prompt(kind, snapshot.name, snapshot.revision, snapshot.body)
        served = serve(
            self.llm,
            role,
            system,
            task,
            tools,
            skill=snapshot,
            runner=self.runner,
            limits=self.limits,
            callbacks=trace.callbacks,
        )
        return AgentResult(
            **base,
            model=endpoint.model,
            answer=served.answer,
            tokens_in=served.tokens_in,
            tokens_out=served.tokens_out,
            tool_calls=served.tool_calls,
            created=tuple(created),
            note=served.stopped,
            model_calls=served.model_calls,
            tools=served.tools,
            messages=served.messages,
            tool_schemas=served.tool_schemas,
            calls=served.calls,
        )

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

    def _record(self, result: AgentResult, seconds: float, session: str) -> TraceRecord:
        return TraceRecord(
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
            messages=result.messages,
            tools=result.tool_schemas,
            model_calls=tuple({k: c[k] for k in ("model", "tokens_in", "tokens_out")} for c in result.calls),
            session=session,
        )


def _decision_summary(decision: Mapping[str, Any]) -> dict[str, Any]:
    """What a trace shows of a route: the outcome, not the body (the model's prompt holds it)."""
    return {k: decision.get(k) for k in ("match", "related_match", "novel", "score", "revision")}


async def _tool(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args, raise_on_error=False)
    if result.is_error:
        raise IngotError(result.content[0].text if result.content else f"{tool} failed")
    return dict(result.structured_content or {})
