"""Replay one golden with another revision's bytes: the run again, as the user's harness made it.

Wherever the recorded revision's bytes were (the system prompt, a `route_and_load` / `get_skill`
result, a file read), the replayed revision's bytes go instead (`Swap`: every file's text, the
body, the revision id, also JSON-escaped and redacted as a golden stores them). Two ways to run:
- a run of the reference agent goes through its own serving path (`agent.run.serve`), with the
  revision's files at /skill/ and its scripts in the sandbox: the same path live traffic takes;
- any other harness's run is continued from its recorded request with the same serving model and
  tool schemas. A tool call whose normalised arguments match a recorded one gets the recorded
  result; a sandbox tool (EXEC tools such as `execute`) runs in the sandbox over the replayed
  files; a read-only world tool the user opted in is observed live (drift.py); anything else is
  world contact, answered "unavailable", and the replay is marked partial.
Every replay is bounded (model calls, tokens, wall clock) and each model call is priced by the
ledger. Judging a replay is cascade.py's job; nothing here decides.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.run import HARNESS, AgentLimits, serve, skill_system_prompt
from agent.workspace import SkillSnapshot, revision_of
from ingot.errors import IngotError
from mcp_server.registry import parse_skill_md
from optimize.measure.drift import World
from optimize.measure.goldens import Golden, call_key, parse_arguments, prefix_length, steps_of, text_of
from optimize.measure.sandbox import Sandbox
from optimize.models.ledger import BudgetExceeded
from optimize.models.llm import Completion, LLMClient
from optimize.models.redaction import redact

WORKSPACE_TOOLS = frozenset({"read_file", "grep", "glob", "ls", "write_file", "edit_file", "execute"})
UNAVAILABLE = (
    "Error: {name} is unavailable during this replay: no recorded call matches these arguments and "
    "it may not contact the world. Continue without it."
)


@dataclass(frozen=True)
class ReplayLimits:
    """Bounds on one replay (REPLAY_MAX_TURNS, REPLAY_MAX_TOKENS, REPLAY_TIMEOUT_S)."""

    max_turns: int = 8
    max_tokens: int = 60_000
    timeout_s: float = 300.0
    max_tool_calls: int = 16
    sandbox_tools: frozenset[str] = frozenset({"execute"})  # their `command` runs in the sandbox


class ReplayStopped(IngotError):
    """A replay reached one of its bounds before it answered."""


@dataclass(frozen=True)
class ReplayStep:
    index: int
    name: str
    arguments: Any
    result: str
    source: str  # recorded | sandbox | world | unavailable | workspace
    matched: int | None = None  # the golden step it matched, if any


@dataclass(frozen=True)
class ReplayRun:
    """One replay of one golden with one revision."""

    golden: str
    revision: str
    answer: str | None
    steps: tuple[ReplayStep, ...]
    calls: tuple[Mapping[str, Any], ...]  # model, tokens_in, tokens_out, cost_usd, from_cassette
    placements: tuple[str, ...]  # where the revision's bytes went
    partial: bool = False  # world contact was answered "unavailable"
    stopped: str | None = None  # a bound or an error ended it before an answer
    seconds: float = 0.0
    observed: tuple[tuple[str, Any], ...] = ()  # world calls observed live (tool, arguments)
    transcript: tuple[Mapping[str, Any], ...] = ()  # the replay's messages, wire shape, before the answer

    @property
    def tokens(self) -> int:
        return sum(int(c["tokens_in"]) + int(c["tokens_out"]) for c in self.calls)

    @property
    def cost_usd(self) -> float | None:
        costs = [c.get("cost_usd") for c in self.calls if not c.get("from_cassette")]
        return None if any(c is None for c in costs) else round(sum(costs), 8)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        return {
            "golden": self.golden,
            "revision": self.revision,
            "answer": self.answer,
            "steps": [s.__dict__ for s in self.steps],
            "calls": [dict(c) for c in self.calls],
            "placements": list(self.placements),
            "partial": self.partial,
            "stopped": self.stopped,
            "seconds": round(self.seconds, 3),
            "observed": [list(o) for o in self.observed],
            "transcript": list(self.transcript),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReplayRun:
        return cls(
            golden=data["golden"],
            revision=data["revision"],
            answer=data.get("answer"),
            steps=tuple(ReplayStep(**s) for s in data.get("steps") or ()),
            calls=tuple(data.get("calls") or ()),
            placements=tuple(data.get("placements") or ()),
            partial=bool(data.get("partial")),
            stopped=data.get("stopped"),
            seconds=float(data.get("seconds") or 0.0),
            observed=tuple((o[0], o[1]) for o in data.get("observed") or ()),
            transcript=tuple(data.get("transcript") or ()),
        )


# -- putting the replayed revision's bytes where the recorded revision's were --------------------


@dataclass(frozen=True)
class Swap:
    """Text replacements from the recorded revision to the replayed one, longest first. A pair
    may map a text to itself (a file both revisions share): it still marks a placement."""

    pairs: tuple[tuple[str, str], ...]

    def apply(self, text: str) -> tuple[str, bool]:
        """`text` with the replayed bytes in, and whether any recorded bytes were found."""
        hit = False
        for old, new in self.pairs:
            if old in text:
                hit = True
                if old != new:
                    text = text.replace(old, new)
        return text, hit


def swap_for(skill: str, old: Mapping[str, bytes], new: Mapping[str, bytes]) -> Swap:
    """The replacements that put `new`'s bytes wherever `old`'s appear."""
    pairs: dict[str, str] = {}

    def add(before: str, after: str) -> None:
        for a, b in ((before, after), (redact(before), after)):
            escaped = (json.dumps(a)[1:-1], json.dumps(b)[1:-1])
            unescaped = (json.dumps(a, ensure_ascii=False)[1:-1], json.dumps(b, ensure_ascii=False)[1:-1])
            for x, y in ((a, b), escaped, unescaped):
                if len(x) >= 8:
                    pairs.setdefault(x, y)

    for path in sorted(set(old) | set(new)):
        try:
            before = old.get(path, b"").decode("utf-8")
            after = new.get(path, b"").decode("utf-8")
        except UnicodeDecodeError:
            continue
        if path == "SKILL.md" and before and after:
            add(parse_skill_md(before, skill)[2].strip(), parse_skill_md(after, skill)[2].strip())
        if before:
            add(before.strip(), after.strip())
    add(revision_of(old), revision_of(new))
    return Swap(tuple(sorted(pairs.items(), key=lambda p: -len(p[0]))))


# -- bounds and pricing -------------------------------------------------------------------------


class _Bounded:
    """An `LLMClient` stand-in that stops a replay at its bounds and keeps every completion."""

    def __init__(self, llm: LLMClient, limits: ReplayLimits) -> None:
        self.llm, self.config, self.limits = llm, llm.config, limits
        self.deadline = time.monotonic() + limits.timeout_s
        self.completions: list[Completion] = []

    def complete(self, role: str, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> Completion:
        spent = sum(c.tokens_in + c.tokens_out for c in self.completions)
        if len(self.completions) >= self.limits.max_turns:
            raise ReplayStopped(f"stopped at the limit of {self.limits.max_turns} model calls")
        if spent >= self.limits.max_tokens:
            raise ReplayStopped(f"stopped at the token budget ({spent} of {self.limits.max_tokens})")
        if time.monotonic() > self.deadline:
            raise ReplayStopped(f"stopped at the wall-clock limit of {self.limits.timeout_s:g} s")
        completion = self.llm.complete(role, messages, **kwargs)
        self.completions.append(completion)
        return completion

    def calls(self) -> tuple[dict[str, Any], ...]:
        return tuple(
            {
                "model": c.model,
                "tokens_in": c.tokens_in,
                "tokens_out": c.tokens_out,
                "cost_usd": c.cost_usd,
                "from_cassette": c.from_cassette,
            }
            for c in self.completions
        )


# -- the two ways to run --------------------------------------------------------------------------


def is_reference_run(golden: Golden) -> bool:
    """A reference-agent run whose tools are all its workspace's: replayed through `serve`."""
    names = {str((t.get("function") or t).get("name")) for t in golden.tools}
    return golden.harness == HARNESS and names <= WORKSPACE_TOOLS


@dataclass
class Replayer:
    """Replays goldens for one evaluation; `world` is shared by every replay in it."""

    llm: LLMClient
    world: World
    sandbox: Sandbox | None = None
    limits: ReplayLimits = field(default_factory=ReplayLimits)

    @property
    def serving_model(self) -> str:
        return self.llm.config.endpoint("agent").model

    def run(self, golden: Golden, recorded: Mapping[str, bytes], files: Mapping[str, bytes]) -> ReplayRun:
        """Replay `golden` (recorded with `recorded`) with `files` in their place."""
        started = time.monotonic()
        bounded = _Bounded(self.llm, self.limits)
        revision = revision_of(files)
        try:
            if is_reference_run(golden):
                run = self._serve(golden, files, revision, bounded)
            else:
                run = self._loop(golden, swap_for(golden.skill, recorded, files), files, revision, bounded)
        except BudgetExceeded:
            raise  # MAX_RUN_USD ends the whole evaluation, not one replay
        except IngotError as exc:
            run = ReplayRun(golden.id, revision, None, (), bounded.calls(), (), stopped=str(exc))
        return ReplayRun(**{**run.__dict__, "calls": bounded.calls(), "seconds": time.monotonic() - started})

    def _serve(
        self, golden: Golden, files: Mapping[str, bytes], revision: str, bounded: _Bounded
    ) -> ReplayRun:
        snapshot = SkillSnapshot.of(golden.skill, files)
        system = skill_system_prompt(golden.route, golden.skill, revision, snapshot.body)
        limits = AgentLimits(model_calls=self.limits.max_turns, tool_calls=self.limits.max_tool_calls)
        served = serve(
            bounded, "agent", system, golden.task, skill=snapshot, runner=self.sandbox, limits=limits
        )  # type: ignore[arg-type]
        steps = tuple(
            ReplayStep(s.index, s.name, s.arguments, s.result, "workspace") for s in steps_of(served.messages)
        )
        where = ("system prompt", "/skill/ files (reference agent workspace)")
        messages = list(served.messages)
        if messages and messages[-1].get("role") == "assistant" and not messages[-1].get("tool_calls"):
            messages.pop()  # the answer is kept apart
        return ReplayRun(
            golden.id,
            revision,
            served.answer or None,
            steps,
            (),
            where,
            stopped=served.stopped,
            transcript=tuple(messages),
        )

    def _loop(
        self, golden: Golden, swap: Swap, files: Mapping[str, bytes], revision: str, bounded: _Bounded
    ) -> ReplayRun:
        start = prefix_length(golden.messages)
        messages, placements = [], []
        for position, message in enumerate(golden.messages[:start]):
            text, hit = swap.apply(text_of(message))
            if hit:
                placements.append(
                    "system prompt" if message.get("role") == "system" else f"message {position + 1}"
                )
            messages.append({**message, "content": text})
        recorded = list(golden.steps)
        for step in recorded:
            if swap.apply(step.result)[1]:
                placements.append(f"step {step.index} ({step.name}) result")
        if not placements:
            raise ReplayStopped(
                f"the recorded revision's bytes appear nowhere in golden {golden.id} (not in its prompt "
                "nor in any tool result), so there is no place for another revision's bytes"
            )
        used: set[int] = set()
        steps: list[ReplayStep] = []
        observed: list[tuple[str, Any]] = []
        for _ in range(self.limits.max_turns + 1):
            completion = bounded.complete(
                "agent",
                messages,
                tools=list(golden.tools) or None,
                skill_revision=revision,
                model=self.serving_model,
            )
            if not completion.tool_calls:
                return ReplayRun(
                    golden.id,
                    revision,
                    completion.text or "",
                    tuple(steps),
                    (),
                    tuple(dict.fromkeys(placements)),
                    partial=any(s.source == "unavailable" for s in steps),
                    observed=tuple(observed),
                    transcript=tuple(messages),
                )
            messages.append(
                {
                    "role": "assistant",
                    "content": completion.text,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for c in completion.tool_calls
                    ],
                }
            )
            for call in completion.tool_calls:
                if len(steps) >= self.limits.max_tool_calls:
                    result, source, matched = (
                        f"Error: the limit of {self.limits.max_tool_calls} tool calls is reached",
                        "unavailable",
                        None,
                    )
                else:
                    result, source, matched = self._resolve(
                        call.name, call.arguments, recorded, used, swap, files
                    )
                if source == "world":
                    observed.append((call.name, parse_arguments(call.arguments)))
                steps.append(
                    ReplayStep(
                        len(steps) + 1, call.name, parse_arguments(call.arguments), result, source, matched
                    )
                )
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        raise ReplayStopped(f"stopped at the limit of {self.limits.max_turns} model calls")

    def _resolve(
        self,
        name: str,
        arguments: str,
        recorded: list,
        used: set[int],
        swap: Swap,
        files: Mapping[str, bytes],
    ) -> tuple[str, str, int | None]:
        """(result, source, matched golden step) for one tool call of a replay."""
        key = call_key(name, arguments)
        same = [s for s in recorded if call_key(s.name, s.arguments) == key]
        match = next((s for s in same if s.index not in used), same[-1] if same else None)
        matched = match.index if match else None
        if match is not None:
            used.add(match.index)
        if name in self.limits.sandbox_tools:
            command = parse_arguments(arguments)
            command = command.get("command") if isinstance(command, Mapping) else None
            if self.sandbox is None or not isinstance(command, str):
                why = "no sandbox is configured" if self.sandbox is None else "the call has no `command`"
                return f"Error: {name} cannot run during this replay ({why}).", "unavailable", matched
            return self._in_sandbox(command, files), "sandbox", matched
        observation = self.world.observe(name, parse_arguments(arguments))
        if observation is not None:
            return observation.value, "world", matched
        if match is not None:
            return swap.apply(match.result)[0], "recorded", matched
        return UNAVAILABLE.format(name=name), "unavailable", None

    def _in_sandbox(self, command: str, files: Mapping[str, bytes]) -> str:
        assert self.sandbox is not None
        outcome = self.sandbox.run_in({"/skill": files}, ["sh", "-c", command], cwd="/skill")
        output = outcome.stdout + outcome.stderr
        if outcome.status == "inconclusive" or outcome.exit_code not in (0, None):
            output += f"\n[exit {outcome.exit_code}: {outcome.reason}]"
        return output
