"""The capture proxy: an OpenAI-compatible endpoint on 127.0.0.1 that records any harness's calls.

Point a harness's base URL here (`ingot proxy --upstream URL`); every request is forwarded to the
upstream unchanged (headers included, streaming relayed chunk by chunk) and each chat completion
is recorded in the trace store, and in a cassette when recording is on. A call is attributed to
a skill revision by `X-Ingot-Skill: name@revision`, or by `X-Ingot-Session: id` plus the last
`route_and_load(..., session=id)` of that session. `X-Ingot-*` headers are not forwarded.
Recording never costs the user their response: a store that cannot be written is logged and
skipped. Authorization is forwarded, never stored (traces and cassettes hold bodies only). Each
trace keeps the request's messages and tool schemas (redacted), so the harness's final call of a
run, which carries the whole conversation, can be blessed as a golden.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from mcp_server.sessions import SessionRoutes
from optimize.models.cassette import Cassette, request_key
from optimize.models.llm import Completion, ToolCall
from optimize.models.traces import TraceRecord, TraceStore

log = logging.getLogger(__name__)
HOP_BY_HOP = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "te",
    "trailer",
    "accept-encoding",
}


def _forward_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in headers.items()
        if k.lower() not in HOP_BY_HOP and not k.lower().startswith("x-ingot-")
    }


def _last_user_text(body: Mapping[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


class _Assembler:
    """Collects a completion's text, tool calls and usage from JSON or from SSE chunks."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.finish_reason: str | None = None
        self.model: str | None = None
        self.tokens_in = self.tokens_out = 0
        self._buffer = b""

    def whole(self, data: Mapping[str, Any]) -> None:
        self.model = data.get("model")
        for choice in data.get("choices", [])[:1]:
            message = choice.get("message") or {}
            self.text.append(message.get("content") or "")
            self.tool_calls += [
                {"id": c.get("id", ""), **c.get("function", {})} for c in message.get("tool_calls") or []
            ]
            self.finish_reason = choice.get("finish_reason")
        self._usage(data)

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                continue
            try:
                data = json.loads(line[5:])
            except ValueError:
                continue
            self.model = data.get("model") or self.model
            for choice in data.get("choices", [])[:1]:
                self.text.append((choice.get("delta") or {}).get("content") or "")
                self.finish_reason = choice.get("finish_reason") or self.finish_reason
            self._usage(data)

    def _usage(self, data: Mapping[str, Any]) -> None:
        usage = data.get("usage") or {}
        self.tokens_in = usage.get("prompt_tokens", self.tokens_in) or self.tokens_in
        self.tokens_out = usage.get("completion_tokens", self.tokens_out) or self.tokens_out


def build_proxy(
    upstream: str,
    store: TraceStore,
    sessions: SessionRoutes | None = None,
    cassette: Cassette | None = None,
    harness: str | None = None,
    client: httpx.AsyncClient | None = None,
) -> Starlette:
    """The proxy ASGI app forwarding `/v1/...` to `upstream` (a base URL ending in /v1 or similar)."""
    base = upstream.rstrip("/")
    http = client or httpx.AsyncClient(timeout=httpx.Timeout(600, connect=10))

    def attribution(request: Request) -> tuple[str, str | None, str | None]:
        header = request.headers.get("x-ingot-skill")
        if header and "@" in header:
            name, revision = header.split("@", 1)
            return request.headers.get("x-ingot-route", "match"), name, revision
        session = request.headers.get("x-ingot-session")
        found = sessions.lookup(session) if session and sessions is not None else None
        if found is not None:
            return found.route, found.skill, found.revision
        return "unattributed", None, None

    def record(
        body: Mapping[str, Any], done: _Assembler, request: Request, started: float, status: int
    ) -> None:
        route, skill, revision = attribution(request)
        errors = () if status == 200 else (f"upstream answered {status}",)
        trace = TraceRecord(
            task=_last_user_text(body),
            answer="".join(done.text),
            route=route,
            skill=skill,
            revision=revision,
            model=done.model or body.get("model"),
            tokens_in=done.tokens_in,
            tokens_out=done.tokens_out,
            duration_ms=round((time.perf_counter() - started) * 1000, 1),
            tool_calls=tuple(done.tool_calls),
            errors=errors,
            harness=harness,
            messages=tuple(m for m in body.get("messages") or () if isinstance(m, dict)),
            tools=tuple(t for t in body.get("tools") or () if isinstance(t, dict)),
            model_calls=(
                {
                    "model": done.model or body.get("model"),
                    "tokens_in": done.tokens_in,
                    "tokens_out": done.tokens_out,
                },
            ),
        )
        try:
            store.append(trace)
        except Exception as exc:  # never drop the user's response over a trace
            log.warning("could not record a trace (%s); the response was delivered", exc)
        if cassette is not None and status == 200:
            try:
                key = request_key({**body, "endpoint": base}, revision)
                completion = Completion(
                    role="proxy",
                    model=done.model or body.get("model") or "",
                    text="".join(done.text),
                    tool_calls=tuple(
                        ToolCall(str(c.get("id", "")), str(c.get("name", "")), str(c.get("arguments", "")))
                        for c in done.tool_calls
                    ),
                    tokens_in=done.tokens_in,
                    tokens_out=done.tokens_out,
                    finish_reason=done.finish_reason,
                )
                cassette.store(key, {**body, "endpoint": base}, completion.as_json())
            except Exception as exc:
                log.warning("could not record a cassette entry (%s)", exc)

    async def forward(request: Request) -> Response:
        path = request.path_params["path"]
        url = f"{base}/{path}" + (f"?{request.url.query}" if request.url.query else "")
        raw = await request.body()
        headers = _forward_headers(request.headers)
        chat = request.method == "POST" and path.rstrip("/").endswith("chat/completions")
        body: dict[str, Any] = {}
        if chat:
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                chat = False
        started = time.perf_counter()
        upstream_request = http.build_request(request.method, url, content=raw, headers=headers)
        reply = await http.send(upstream_request, stream=True)
        passthrough = {
            k: v for k, v in reply.headers.items() if k.lower() not in HOP_BY_HOP | {"content-encoding"}
        }
        if chat and body.get("stream"):
            assembler = _Assembler()

            async def relay() -> AsyncIterator[bytes]:
                async for chunk in reply.aiter_bytes():
                    assembler.feed(chunk)
                    yield chunk

            async def finish() -> None:
                await reply.aclose()
                # Off the event loop: a trace store may block (file lock, Langfuse flush).
                await anyio.to_thread.run_sync(record, body, assembler, request, started, reply.status_code)

            return StreamingResponse(
                relay(), status_code=reply.status_code, headers=passthrough, background=BackgroundTask(finish)
            )
        content = await reply.aread()
        await reply.aclose()
        recording = None
        if chat:
            assembler = _Assembler()
            if reply.status_code == 200:
                with contextlib.suppress(ValueError):
                    assembler.whole(json.loads(content))
            # After the response is sent, in a worker thread (Starlette runs a sync task there):
            # the caller never waits on the trace store.
            recording = BackgroundTask(record, body, assembler, request, started, reply.status_code)
        return Response(content, status_code=reply.status_code, headers=passthrough, background=recording)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await anyio.to_thread.run_sync(store.close)  # e.g. Langfuse: flush what is still queued
        if client is None:
            await http.aclose()

    return Starlette(
        routes=[Route("/{path:path}", forward, methods=["GET", "POST", "PUT", "DELETE"])], lifespan=lifespan
    )
