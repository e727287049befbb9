"""Scripted models for regression replay, served by tests/scripted_llm.py (real HTTP, no patches).

Deterministic stand-ins that know only the text they are served (a test swaps every label of
the benchmark and sees no verdict move). Here the agent, and the world tests build on it; the
judges, the coverage judge and the teacher are in tests/regress_judges.py, installed with it.
- `agent`: follows the skill in its system prompt (inside `<skill ...>` tags), or the one a
  `route_and_load` call returned when that tool is offered instead. Every step line
  (`1.` / `-` / `*`) becomes a line of the answer, markdown stripped (so a formatting-only edit
  answers identically); prose between steps is not acted on. A step naming an offered tool in
  backticks calls it first (arguments `{"for": task}`, `{"file_path": "/skill/<path>"}` for
  `read_file` with a backticked path, `{"command": ...}` for `execute` with a backticked
  command) and its answer line carries the tool's result. A step starting "If ..." is followed
  only when every word of its condition is in the task or a tool result so far. A step asking
  to "answer as" a format (JSON, a table, a bulleted or numbered list) is not said but obeyed:
  the answer is rendered in it.
`run_harness` is "another harness": an OpenAI SDK tool loop through the capture proxy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from optimize.measure.passages import words
from tests.regress_judges import coverage_judge, judge, rationale, teacher

STEP = re.compile(r"^\s*(?:\d+[.)]|[-*+])\s+(.*\S)\s*$")
TICKED = re.compile(r"`([^`]+)`")
SKILL_TAG = re.compile(r"<skill[^>]*>(.*?)</skill>", re.S)
CONDITION = re.compile(r"^(?:if|when)\s+(.+?)[,:]\s*(.+)$", re.I)
FORMAT = re.compile(
    r"\b(?:answer|reply|respond)\s+(?:as|in)\s+(?:an?\s+)?"
    r"(JSON|table|bulleted list|bullet list|numbered list)\b",
    re.I,
)
FILLER = words("a an the is are was were be it its of to in on at for and or any there this that")


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def plain(line: str) -> str:
    """A step as the sim agent says it: markdown emphasis and code ticks gone, spaces collapsed."""
    line = re.sub(r"(\*\*|__|\*|_)(.+?)\1", r"\2", line)
    return " ".join(line.replace("`", "").split())


def skill_steps(system: str, routed: str | None = None) -> list[str]:
    """The step lines of the skill: inside `<skill>` tags, else in a `route_and_load` result."""
    found = SKILL_TAG.search(system)
    body = found.group(1) if found else (routed or "")
    return [m.group(1) for m in (STEP.match(line) for line in body.splitlines()) if m]


def _arguments(tool: str, step: str, task: str, offered: set[str]) -> dict[str, Any]:
    ticked = [t for t in TICKED.findall(step) if t not in offered]
    if tool == "read_file" and ticked:
        return {"file_path": f"/skill/{ticked[0]}"}
    if tool == "execute" and ticked:
        return {"command": ticked[0]}
    return {"for": task}


def _holds(condition: str, seen: str) -> bool:
    """A step's condition holds when each of its words is in the task or a tool result so far."""
    needed = [w for w in re.findall(r"[\w%.-]+", plain(condition).casefold()) if w not in FILLER]
    return all(w in seen for w in needed)


def render(lines: list[str], form: str | None) -> str:
    """The answer's lines in the format a step asked for."""
    if form == "json":
        return json.dumps({"answer": lines}, ensure_ascii=False)
    if form == "table":
        rows = [f"| {line.replace('|', '/')} |" for line in lines]
        return "\n".join(["| item |", "|---|", *rows])
    if form == "bullets":
        return "\n".join(f"- {line}" for line in lines)
    if form == "numbered":
        return "\n".join(f"{n}. {line}" for n, line in enumerate(lines, 1))
    return "\n".join(lines)


def agent(body: dict[str, Any]) -> str | dict[str, Any]:
    messages = body.get("messages", [])
    system = " ".join(_text(m) for m in messages if m.get("role") == "system")
    task = next((_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
    offered = {str((t.get("function") or t).get("name")) for t in body.get("tools") or ()}
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
    results: dict[str, str] = {}
    for m in messages:
        if m.get("role") == "tool":
            results[names.get(m.get("tool_call_id"), "?")] = _text(m)
    if "route_and_load" in offered and "route_and_load" not in results and not SKILL_TAG.search(system):
        call = {"id": "call_route", "name": "route_and_load", "arguments": {"task": task}}
        return {"reply": None, "tool_calls": [call]}
    routed = json.loads(results["route_and_load"]).get("skill_body") if "route_and_load" in results else None
    lines: list[str] = []
    form = None
    for n, step in enumerate(skill_steps(system, routed)):
        asked = FORMAT.search(step)
        if asked:
            form = {"json": "json", "table": "table", "numbered list": "numbered"}.get(
                asked.group(1).casefold(), "bullets"
            )
            continue
        condition = CONDITION.match(plain(step))
        if condition:
            seen = " ".join([task, *results.values()]).casefold()
            if not _holds(condition.group(1), seen):
                continue
        tools = [t for t in TICKED.findall(step) if t in offered]
        for tool in tools:
            if tool not in results:
                call = {
                    "id": f"call_{n}_{tool}",
                    "name": tool,
                    "arguments": _arguments(tool, step, task, offered),
                }
                return {"reply": None, "tool_calls": [call]}
        said = plain(step)
        if tools:
            said += ": " + " ".join(" ".join(results[t].split())[:300] for t in tools)
        lines.append(said)
    return render(lines, form) if lines else "Done."


TIERS = {"L1": "judge-l1", "L2": "judge-l2", "L3": "judge-l3"}


def install(server: Any, agent_model: str = "agent-model") -> None:
    """The scripted models on `server`: agent, the three judge tiers, the coverage ruling,
    rationale and teacher."""
    server.add(
        user_contains="Write the rationale", compute=rationale, prompt_tokens=None, completion_tokens=None
    )
    server.add(
        user_contains="ALTERED INSTRUCTIONS:",
        compute=coverage_judge,
        prompt_tokens=None,
        completion_tokens=None,
    )
    for tier, model in TIERS.items():
        server.add(model=model, compute=judge(tier), prompt_tokens=None, completion_tokens=None)
    server.add(model="teacher-model", compute=teacher, prompt_tokens=None, completion_tokens=None)
    server.add(model=agent_model, compute=agent, prompt_tokens=None, completion_tokens=None)


def harness_prompt(body: str) -> str:
    """How the stand-in harness puts a skill in its system prompt."""
    return f"You are quote-bot, a team's internal assistant. Follow the skill.\n<skill>\n{body}\n</skill>"


def run_harness(
    base_url: str,
    skill_header: str,
    system: str,
    task: str,
    tools: Mapping[str, Callable[[dict[str, Any]], str]],
    model: str = "agent-model",
) -> str:
    """Another harness: the OpenAI SDK in a tool loop, every call through `base_url` (the proxy)."""
    client = openai.OpenAI(
        base_url=base_url,
        api_key="sk-harness-0000",
        default_headers={"X-Ingot-Skill": skill_header},
        max_retries=0,
    )
    schemas = [
        {
            "type": "function",
            "function": {"name": name, "description": f"{name} tool", "parameters": {"type": "object"}},
        }
        for name in tools
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": task},
    ]
    for _ in range(8):
        kwargs = {"tools": schemas} if schemas else {}
        reply = client.chat.completions.create(model=model, messages=messages, **kwargs).choices[0].message
        if not reply.tool_calls:
            return reply.content or ""
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            result = tools[call.function.name](json.loads(call.function.arguments or "{}"))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise AssertionError("the harness did not finish in 8 turns")


# -- a world for tests: a skill, change control, the scripted models and the capture proxy --------

FX_BODY = """# FX quote

1. Look up the rate with `get_rate`.
2. State the amount in both currencies, rounded to cents.
3. Mention "no fees" for transfers under 1000 EUR.
4. Send the quote with `send_quote`.
"""
FX_DESCRIPTION = (
    "Quotes currency conversions with the day's rate and sends the quote. Use when asked to "
    "convert or quote an amount in another currency."
)
FX_TASK = "Quote 250 EUR in USD for Dana"
NO_FEES_STEP = '3. Mention "no fees" for transfers under 1000 EUR.\n'
RATE = "EUR/USD 1.0842 (ECB fixing)"


@dataclass
class RegressWorld:
    """A skills root with `fx-quote`, change control over it, the scripted models (sim), and
    the capture proxy in front of them recording into the state home's trace store."""

    root: Path
    control: Any
    server: Any
    proxy_url: str
    store: Any
    admin: Any
    tools: dict[str, Callable[[dict[str, Any]], str]]
    library: Any = None

    def files(self, skill: str = "fx-quote") -> dict[str, bytes]:
        folder = self.root / skill
        return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    def record(self, task: str = FX_TASK, skill: str = "fx-quote", system: str | None = None) -> Any:
        """Run the stand-in harness through the proxy (the skill in its system prompt, unless
        `system` is given); the trace of its final (answering) call."""
        from agent.workspace import revision_of
        from mcp_server.registry import parse_skill_md
        from tests.conftest import wait_for

        files = self.files(skill)
        body = parse_skill_md(files["SKILL.md"].decode(), skill)[2]
        before, sent = len(self.store.read().records), len(self.server.chat_requests())
        header = f"{skill}@{revision_of(files)}"
        run_harness(self.proxy_url, header, system or harness_prompt(body), task, self.tools)
        calls = len(self.server.chat_requests()) - sent
        wait_for(lambda: len(self.store.read().records) >= before + calls)
        records = self.store.read().records[before:]
        return next(r for r in reversed(records) if r.answer and not r.tool_calls)

    def bless(self, record: Any, criteria: list[str], facts: list[dict[str, Any]] = ()) -> Any:
        stored, _ = self.admin.bless(record, "tester")
        return self.admin.approve(stored.id, "tester", criteria, list(facts))


@contextmanager
def regress_world(tmp_path: Path, library_factory: Callable[..., Any]) -> Iterator[RegressWorld]:
    from agent.proxy import build_proxy
    from optimize.control.changes import ChangeControl
    from optimize.control.goldens_admin import GoldenAdmin
    from optimize.models.traces import LocalTraceStore
    from tests.conftest import running_asgi, write_skill
    from tests.scripted_llm import scripted_llm

    root = tmp_path / "skills"
    write_skill(root, "fx-quote", FX_DESCRIPTION, FX_BODY)
    library = library_factory(root)
    control = ChangeControl(tmp_path / "home", (root,), neighbours=library.current)
    store = LocalTraceStore(control.runs_dir / "traces.jsonl")
    tools = {"get_rate": lambda _: RATE, "send_quote": lambda _: "sent quote #8812"}
    with scripted_llm() as server:
        install(server)
        with running_asgi(build_proxy(server.url, store, harness="quote-bot"), lifespan="off") as proxy:
            yield RegressWorld(
                root, control, server, f"{proxy}/v1", store, GoldenAdmin(control), tools, library
            )


def edited(files: Mapping[str, bytes], old: str, new: str, path: str = "SKILL.md") -> dict[str, bytes]:
    """`files` with `old` replaced by `new` in `path` (which must contain it)."""
    text = files[path].decode()
    assert old in text, f"{old!r} is not in {path}"
    return {**files, path: text.replace(old, new).encode()}
