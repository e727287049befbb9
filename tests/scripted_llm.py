"""A scripted OpenAI-compatible HTTP server for tests: real HTTP on loopback, no patched clients.

Serves `/v1/chat/completions` (plain, JSON mode, tool calls, SSE streaming) and `/v1/models`.
Replies come from per-test rules matched on the request (system prompt contains X, last user
message contains Y, model is Z); a rule can also answer with an HTTP error a given number of
times first (to exercise retries), or compute its reply from the request (`compute`: a scripted
agent that follows the skill in its prompt, a scripted judge that reads a checklist). Token
counts are fixed per rule, or estimated from the request and reply sizes (about 4 characters a
token) when set to None, so costs scale with prompt size. Every request is recorded, headers
included, so tests can assert on exactly what was sent.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.loopback import QuietHandler, serving


@dataclass
class Rule:
    """If every given condition holds, answer with `reply` (text), `tool_calls` or `error`."""

    reply: str | None = None
    system_contains: str | None = None
    user_contains: str | None = None
    model: str | None = None
    tool_result_contains: str | None = None  # a tool message in the request contains this
    tool_calls: list[dict[str, Any]] | None = None
    error_status: int | None = None  # answer this status...
    error_times: int = 0  # ...this many times, then the reply
    error_body: dict[str, Any] | None = None
    garbage: str | None = None  # answer 200 with this raw body (e.g. an HTML page)...
    garbage_times: int = 0  # ...this many times (0: every time), then the reply
    garbage_bytes: bytes | None = None  # like `garbage`, but these exact bytes (e.g. not UTF-8)
    garbage_type: str | None = (
        None  # the garbage's content-type (default: HTML if it starts with "<", else JSON)
    )
    prompt_tokens: int | None = 11  # None: estimated from the request's size
    completion_tokens: int | None = 7  # None: estimated from the reply's size
    # Computes the answer from the request body: a reply text, or {"reply": ..., "tool_calls": [...]}.
    compute: Callable[[dict[str, Any]], str | dict[str, Any]] | None = None
    before_reply: Callable[[dict[str, Any]], None] | None = (
        None  # runs when it answers (e.g. edit a file mid-run)
    )
    used: int = field(default=0)

    def matches(self, body: dict[str, Any]) -> bool:
        messages = body.get("messages", [])
        system = " ".join(_text(m) for m in messages if m.get("role") == "system")
        users = [_text(m) for m in messages if m.get("role") == "user"]
        tools = " ".join(_text(m) for m in messages if m.get("role") == "tool")
        return (
            (self.model is None or body.get("model") == self.model)
            and (self.tool_result_contains is None or self.tool_result_contains in tools)
            and (self.system_contains is None or self.system_contains in system)
            and (self.user_contains is None or (users and self.user_contains in users[-1]))
        )


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ScriptedLLM:
    """The server's state: rules, recorded requests, and the models it lists."""

    def __init__(
        self, models: tuple[str, ...] = ("agent-model", "strong-model", "teacher-model", "judge-model")
    ) -> None:
        self.rules: list[Rule] = []
        self.requests: list[Recorded] = []
        self.models = models
        self.url = ""
        self._lock = threading.Lock()

    def add(self, **kwargs: Any) -> Rule:
        rule = Rule(**kwargs)
        self.rules.append(rule)
        return rule

    def client(self, *roles: str, ledger: Any = None) -> Any:
        """An `LLMClient` whose `roles` all call this server, each with the model `<role>-model`."""
        from optimize.models.endpoints import LLMConfig, make_endpoint
        from optimize.models.llm import LLMClient

        endpoints = {role: make_endpoint(role, self.url, None, f"{role}-model") for role in roles}
        return LLMClient(LLMConfig(endpoints), ledger)

    def script_optimizer(
        self,
        rewrite: str | None = None,
        diagnosis: list[dict[str, str]] | None = None,
        strong: float = 0.9,
        weak: float = 0.2,
    ) -> None:
        """The optimizer's usual script: the teacher diagnoses (`diagnosis`) and rewrites to
        `rewrite`; an agent serving a body that says NEW-MARK answers "strong answer", any other
        agent call "weak answer"; the judge grades those `strong` and `weak`. Add rules that
        must win (a specific task, say) before calling this: the first matching rule answers."""
        self.script_pairwise("strong answer")
        self.add(model="judge-model", user_contains="strong answer", reply=grade_json(strong))
        self.add(model="judge-model", user_contains="weak answer", reply=grade_json(weak))
        self.add(
            model="teacher-model", user_contains="Diagnose", reply=json.dumps({"issues": diagnosis or []})
        )
        if rewrite is not None:
            self.add(
                model="teacher-model", user_contains="Rewrite the skill", reply=json.dumps({"body": rewrite})
            )
        self.add(system_contains="NEW-MARK", reply="strong answer")
        self.add(model="agent-model", reply="weak answer")

    def script_goldens(
        self,
        criteria: tuple[str, ...] = ("answers the task it was given",),
        teacher: str = "teacher-model",
        judge: str = "judge-model",
    ) -> None:
        """Regression replay's model calls: the teacher drafts `criteria` (no world facts) when a
        run is blessed; every replay judge tier (screen, re-check, adjudicate) rules "pass"; the
        coverage judge rules each altered instruction changed and exercised by every blessed run
        it was shown; the rationale is one plain sentence. Add before `script_optimizer`, whose
        judge rules would also match a replay prompt that quotes the answers."""
        self.add(
            model=teacher,
            user_contains="wants it kept as a regression test",
            reply=json.dumps({"criteria": list(criteria), "world_facts": []}),
        )
        self.add(
            model=judge,
            user_contains="Write the rationale of a regression-replay verdict",
            reply="Every blessed run was replayed with the changed skill and kept its commitments.",
        )
        self.add(model=judge, user_contains="what the change altered", compute=_coverage_rulings)
        self.add(
            model=judge,
            user_contains="was replayed with the changed",
            reply=json.dumps(
                {"verdict": "pass", "failed": [], "cited_step": None, "rationale": "it keeps the golden"}
            ),
        )

    def script_pairwise(self, better: str, model: str = "judge-model") -> None:
        """The pairwise judge prefers the answer that is `better` (in either position); a tie when
        neither is. Add it before grade rules that would also match the answers' text."""
        self.add(model=model, user_contains=f"FIRST ANSWER:\n{better}", reply=pairwise_json("first"))
        self.add(model=model, user_contains=f"SECOND ANSWER:\n{better}", reply=pairwise_json("second"))
        self.add(model=model, user_contains="SECOND ANSWER:", reply=pairwise_json("tie"))

    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def champion_side_calls(self, body_mark: str, since: int = 0) -> int:
        """Calls made for the champion's (or seed's) side alone, from chat request `since` on: the
        agent serving the champion body (it contains `body_mark`) and the judge grading its answers
        (under `script_optimizer` only a body without NEW-MARK answers "weak answer"). Pairwise
        comparisons see both answers, and the teacher reads the champion to write challengers:
        those are the challenger side."""
        return sum(
            r.body.get("model") != "teacher-model"
            and (body_mark in json.dumps(r.body) or "weak answer" in json.dumps(r.body))
            and "FIRST ANSWER" not in json.dumps(r.body)
            for r in self.chat_requests()[since:]
        )

    def respond(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None, Rule | None]:
        with self._lock:
            for rule in self.rules:
                if rule.matches(body):
                    rule.used += 1
                    if rule.before_reply is not None:
                        rule.before_reply(body)
                    if rule.error_status and rule.used <= rule.error_times:
                        return (
                            rule.error_status,
                            rule.error_body or {"error": {"message": "scripted error"}},
                            None,
                        )
                    raw = rule.garbage_bytes if rule.garbage_bytes is not None else rule.garbage
                    if raw is not None and (not rule.garbage_times or rule.used <= rule.garbage_times):
                        return 200, {"__raw__": raw, "__type__": rule.garbage_type}, None
                    return 200, None, rule
        return 500, {"error": {"message": _unmatched(body)}}, None


def _unmatched(body: dict[str, Any]) -> str:
    """The error for a request no rule answers: one readable line naming the model and how the
    last user message begins (never the request's JSON, which a person would have to unpick)."""
    users = [_text(m) for m in body.get("messages", []) if m.get("role") == "user"]
    opening = " ".join((users[-1] if users else "").split())[:80]
    return (
        f"no scripted rule matches this {body.get('model') or 'model'} request "
        f"(last user message begins {opening!r}); add a rule for it"
    )


def _coverage_rulings(body: dict[str, Any]) -> str:
    """The coverage judge's reply: every altered instruction in the prompt ("- i1 (...") changed
    and exercised by every blessed run listed ("- g-...:")."""
    prompt = _text(body["messages"][-1])
    ids = re.findall(r"^- (i\d+) \(", prompt, flags=re.MULTILINE)
    runs = re.findall(r"^- (g-[0-9a-f]+):", prompt, flags=re.MULTILINE)
    rulings = [
        {"id": i, "behaviour": "changed", "exercised_by": runs, "rationale": "the blessed runs reach it"}
        for i in ids
    ]
    return json.dumps({"instructions": rulings})


def _estimate(text: str) -> int:
    return max(1, len(text) // 4)


def _completion(body: dict[str, Any], rule: Rule) -> dict[str, Any]:
    reply, tool_calls = rule.reply, rule.tool_calls
    if rule.compute is not None:
        computed = rule.compute(body)
        if isinstance(computed, str):
            reply, tool_calls = computed, None
        else:
            reply, tool_calls = computed.get("reply"), computed.get("tool_calls")
    message: dict[str, Any] = {"role": "assistant", "content": reply}
    finish = "stop"
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": c.get("id") or f"call_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))},
            }
            for i, c in enumerate(tool_calls)
        ]
        finish = "tool_calls"
    prompt_tokens = rule.prompt_tokens
    if prompt_tokens is None:
        prompt_tokens = _estimate(json.dumps([body.get("messages"), body.get("tools")]))
    completion_tokens = rule.completion_tokens
    if completion_tokens is None:
        completion_tokens = _estimate(json.dumps([reply, tool_calls]))
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _handler(state: ScriptedLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            state.requests.append(Recorded(self.path, dict(self.headers), {}))
            if self.path.rstrip("/").endswith("/models"):
                self._send(
                    200, {"object": "list", "data": [{"id": m, "object": "model"} for m in state.models]}
                )
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            state.requests.append(Recorded(self.path, dict(self.headers), body))
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": "not found"}})
                return
            status, error, rule = state.respond(body)
            if error is not None and "__raw__" in error:
                raw = error["__raw__"]
                raw = raw if isinstance(raw, bytes) else raw.encode()
                self.send_response(200)
                self.send_header(
                    "content-type",
                    error["__type__"]
                    or ("text/html" if raw.lstrip().startswith(b"<") else "application/json"),
                )
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
                return
            if rule is None:
                self._send(status, error or {})
                return
            completion = _completion(body, rule)
            if body.get("stream"):
                self._stream(completion, body)
            else:
                self._send(200, completion)

        def _stream(self, completion: dict[str, Any], body: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            text = completion["choices"][0]["message"]["content"] or ""
            pieces = [text[i : i + 5] for i in range(0, len(text), 5)] or [""]
            base = {k: completion[k] for k in ("id", "created", "model")}
            for n, piece in enumerate(pieces):
                delta = {"content": piece} if n else {"role": "assistant", "content": piece}
                chunk = {
                    **base,
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            final = {
                **base,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            }
            if body.get("stream_options", {}).get("include_usage"):
                final["usage"] = completion["usage"]
            self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()
            self.close_connection = True

    return Handler


@contextmanager
def scripted_llm(host: str = "127.0.0.1", port: int = 0, **kwargs: Any) -> Iterator[ScriptedLLM]:
    """Start the server on a free loopback port (or `host`:`port`); `state.url` is its `/v1` base URL."""
    state = ScriptedLLM(**kwargs)
    with serving(_handler(state), host, port) as base:
        state.url = f"{base}/v1"
        yield state


def grade_json(score: float, passed: bool | None = None, weak: str | None = None) -> str:
    """A judge reply: every dimension at `score` (one `weak` dimension at 0.1)."""
    dims = {d: score for d in ("correctness", "completeness", "instruction_following", "efficiency")}
    if weak:
        dims[weak] = 0.1
    return json.dumps({"scores": dims, "pass": score >= 0.5 if passed is None else passed, "rationale": "r"})


def pairwise_json(winner: str) -> str:
    """A pairwise judge reply: "first", "second" or "tie"."""
    return json.dumps({"winner": winner, "rationale": f"{winner} is better"})
