"""OpenTelemetry export as a collector receives it: real `ingot serve`, real `ingot mcp` (through
the official SDK's stdio client, and through a bare pipe) and a real `ingot agent` in child
processes, with OTEL_EXPORTER_OTLP_ENDPOINT pointed at a loopback OTLP receiver that decodes
every span (tests/otlp.py). Child processes, because a tracer provider is global to a process."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastmcp import Client
from mcp import StdioServerParameters
from mcp.client import Client as SdkClient

from tests.conftest import BUNDLED_SKILLS, REPO, free_port, wait_for
from tests.otlp import OtlpReceiver, Span, otlp_receiver
from tests.scripted_llm import scripted_llm

SERVER, CLIENT = 2, 3  # OTLP span kinds
ERROR = 2  # OTLP status code
MATCH_TASK = "Draft release notes for v3.1 from the merged pull requests"
NOVEL_TASK = "Recommend three novels like Dune"
NEVER = "600000"  # OTEL_BSP_SCHEDULE_DELAY (ms) for tests where only an exit may send the spans


def child_env(receiver: OtlpReceiver, delay_ms: str = "100", **extra: str) -> dict[str, str]:
    """This process's environment without any OTEL_/LANGFUSE_ setting of its own, exporting to
    `receiver` within `delay_ms` of each span ending."""
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LANGFUSE_")) and k != "INGOT_HOME"
    }
    return {
        **inherited,
        "HF_HUB_OFFLINE": "1",
        "GIT_HISTORY": "false",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": delay_ms,
        "OTEL_SERVICE_NAME": "ingot-under-test",
        **extra,
    }


def exported_bytes(receiver: OtlpReceiver) -> bytes:
    """Everything that reached the collector, as sent (decompressed)."""
    bodies = [
        gzip.decompress(b) if h.get("content-encoding") == "gzip" else b for _, h, b in receiver.requests
    ]
    return b"".join(bodies)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as state:
        yield state


@pytest.fixture
def skills_root(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    return root


@contextmanager
def serving(root: Path, env: dict[str, str], log: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """`ingot serve --no-ui` on `root`; yields its /mcp URL and the process (SIGTERM at the end)."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ingot.cli",
            "serve",
            "--skills",
            str(root),
            "--mcp-port",
            str(port),
            "--no-ui",
        ],
        cwd=root.parent,
        env=env,
        stdout=log.open("w"),  # a file, not a pipe: nobody reads a pipe while it serves
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/mcp"

    def up() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"ingot serve exited early:\n{log.read_text()[-3000:]}")
        try:
            asyncio.run(_list_tools(url))
        except Exception:
            return False
        return True

    try:
        wait_for(up, timeout=90, interval=0.2)
        yield url, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


async def _list_tools(url: str) -> None:
    async with Client(url) as client:
        await client.list_tools()


def timed_calls(url: str, calls: list[tuple[str, dict]]) -> list[tuple[object, float]]:
    """Each call's result (or the protocol error it raised) and the milliseconds the client waited."""

    async def go() -> list[tuple[object, float]]:
        done = []
        async with Client(url) as client:
            for tool, args in calls:
                started = time.perf_counter()
                try:
                    result: object = await client.call_tool(tool, args, raise_on_error=False)
                except Exception as exc:  # a JSON-RPC error (unknown tool): the server's span says so
                    result = exc
                done.append((result, (time.perf_counter() - started) * 1000))
        return done

    return asyncio.run(go())


async def legacy_calls(url: str, count: int) -> None:
    async with SdkClient(url, mode="legacy") as client:
        for _ in range(count):
            await client.call_tool("get_skill", {"name": "release-notes"})


def tool_spans(receiver: OtlpReceiver) -> list[Span]:
    """The server's `tools/call` spans received so far, in the order the calls were made."""
    spans = [
        s for s in receiver.spans if s.kind == SERVER and s.attributes.get("mcp.method.name") == "tools/call"
    ]
    return sorted(spans, key=lambda s: s.start_ns)


def arriving_tool_spans(receiver: OtlpReceiver, count: int) -> list[Span]:
    """`tool_spans` once `count` of them arrived (the exporter sends them within a tenth of a second)."""

    def arrived() -> list[Span] | None:
        spans = tool_spans(receiver)
        return spans if len(spans) >= count else None

    return wait_for(arrived, timeout=30)


def test_each_tool_call_over_http_is_one_server_span_with_outcome_skill_revision_and_latency(
    tmp_path, skills_root, receiver
):
    calls = [
        ("route_and_load", {"task": MATCH_TASK}),
        ("route_and_load", {"task": NOVEL_TASK}),
        ("get_skill", {"name": "release-notes"}),
        ("get_skill", {"name": "no-such-skill"}),
        ("no_such_tool", {}),
    ]
    with serving(skills_root, child_env(receiver), tmp_path / "serve.log") as (url, _):
        done = timed_calls(url, calls)
        match, novel, get, failed, unknown = arriving_tool_spans(receiver, len(calls))
        asyncio.run(legacy_calls(url, 2))  # the handshake lane: an HTTP session, Mcp-Session-Id
        *_, first, second = arriving_tool_spans(receiver, len(calls) + 2)
    assert first.attributes["mcp.session.id"] == second.attributes["mcp.session.id"]
    assert first.attributes["mcp.protocol.version"] != "2026-07-28"
    (matched, _), _, (loaded, _), (refused, _), (protocol_error, _) = done
    assert matched.structured_content["match"] == "release-notes" and refused.is_error
    assert isinstance(protocol_error, Exception)
    revision = matched.structured_content["revision"]
    assert loaded.structured_content["revision"] == revision
    for span, (tool, _), (_, waited) in zip((match, novel, get, failed, unknown), calls, done, strict=True):
        assert span.name == ("tools/call" if tool == "no_such_tool" else f"tools/call {tool}")
        assert span.attributes["gen_ai.tool.name"] == tool
        assert span.attributes["network.transport"] == "tcp"
        assert span.attributes["jsonrpc.request.id"] and span.attributes["mcp.protocol.version"]
        assert 0 < span.duration_ms <= waited  # the server's part of the latency the client saw
        assert span.resource["service.name"] == "ingot-under-test" and span.scope == "fastmcp"
    for span in (match, novel, get, failed):
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert match.attributes["ingot.tool.outcome"] == "match"
    assert match.attributes["ingot.skill.name"] == "release-notes"
    assert match.attributes["ingot.skill.revision"] == revision
    assert match.attributes["ingot.route.score"] == pytest.approx(matched.structured_content["score"])
    assert novel.attributes["ingot.tool.outcome"] == "novel" and "ingot.skill.name" not in novel.attributes
    assert (get.attributes["ingot.tool.outcome"], get.status) == ("ok", 0)
    assert (get.attributes["ingot.skill.name"], get.attributes["ingot.skill.revision"]) == (
        "release-notes",
        revision,
    )
    assert failed.attributes["ingot.tool.outcome"] == "error" and failed.status == ERROR
    assert failed.attributes["error.type"] == "tool_error"
    assert unknown.attributes["ingot.tool.outcome"] == "error" and unknown.status == ERROR
    assert unknown.attributes["error.type"] == unknown.attributes["rpc.response.status_code"] == "-32602"
    # No content anywhere in what was exported: neither the tasks nor the body that was served.
    sent = exported_bytes(receiver)
    assert MATCH_TASK.encode() not in sent and NOVEL_TASK.encode() not in sent
    body_line = loaded.structured_content["body"].strip().splitlines()[-1]
    assert len(body_line) > 20 and body_line.encode() not in sent


def test_spans_still_queued_when_serve_gets_sigterm_are_exported_before_it_exits(
    tmp_path, skills_root, receiver
):
    with serving(skills_root, child_env(receiver, delay_ms=NEVER), tmp_path / "serve.log") as (url, process):
        timed_calls(url, [("route_and_load", {"task": MATCH_TASK})])
        assert not tool_spans(receiver)  # queued: the schedule would send them in ten minutes
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == -signal.SIGTERM  # it still ends the way SIGTERM ends it
    (span,) = tool_spans(receiver)  # already here: no waiting after the exit
    assert span.attributes["ingot.skill.name"] == "release-notes"


def test_ingot_mcp_over_stdio_exports_a_pipe_span_per_tool_call_when_the_host_closes_it(
    skills_root, receiver
):
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ingot.cli", "mcp", "--skills", str(skills_root)],
        env=child_env(receiver, delay_ms=NEVER),
        cwd=str(skills_root.parent),
    )

    async def go() -> tuple[dict, dict]:
        async with SdkClient(server, mode="legacy") as client:
            routed = (await client.call_tool("route_and_load", {"task": MATCH_TASK})).structured_content
            loaded = (await client.call_tool("get_skill", {"name": "release-notes"})).structured_content
            return routed, loaded

    routed, loaded = asyncio.run(go())  # returns once the server process has ended
    route, get = tool_spans(receiver)
    for span in (route, get):
        assert span.kind == SERVER and span.attributes["network.transport"] == "pipe"
        assert span.attributes["jsonrpc.request.id"] and span.attributes["mcp.protocol.version"]
        assert span.resource["service.name"] == "ingot-under-test"
    assert route.attributes["mcp.session.id"] == get.attributes["mcp.session.id"]  # one host connection
    assert route.attributes["gen_ai.tool.name"] == "route_and_load"
    assert route.attributes["ingot.tool.outcome"] == "match"
    assert route.attributes["ingot.skill.revision"] == routed["revision"] == loaded["revision"]
    assert get.attributes["ingot.skill.name"] == "release-notes"
    assert MATCH_TASK.encode() not in exported_bytes(receiver)


def _message(process: subprocess.Popen, message: dict) -> None:
    process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()


def _answer(process: subprocess.Popen, timeout: float = 60) -> dict:
    """The next line the server writes, within `timeout` seconds."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "ingot mcp did not answer in time"
    return json.loads(process.stdout.readline())


def test_ingot_mcp_exports_its_queued_spans_when_stdin_closes_and_exits_cleanly(
    tmp_path, skills_root, receiver
):
    log = tmp_path / "mcp.log"
    env = child_env(receiver, delay_ms=NEVER)
    # From .env, like every setting: the OpenTelemetry SDK alone would only look at the environment.
    (tmp_path / ".env").write_text(f"OTEL_EXPORTER_OTLP_ENDPOINT={env.pop('OTEL_EXPORTER_OTLP_ENDPOINT')}\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "ingot.cli", "mcp", "--skills", str(skills_root)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
    )
    try:
        _message(
            process,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "pipe-test", "version": "1"},
                },
            },
        )
        assert _answer(process)["id"] == 1
        _message(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _message(
            process,
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "get_skill", "arguments": {"name": "release-notes"}},
            },
        )
        assert _answer(process)["id"] == 2
        assert not receiver.spans  # queued, not sent: the schedule would send them in ten minutes
        process.stdin.close()  # the host goes away
        assert process.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
    (span,) = tool_spans(receiver)
    assert (span.attributes["gen_ai.tool.name"], span.attributes["jsonrpc.request.id"]) == ("get_skill", "2")


def test_the_agents_model_calls_are_genai_client_spans_with_usage_and_cost_but_no_prompt(
    tmp_path, served_copy, receiver
):
    url, *_ = served_copy
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"agent-model": {"input": 1.0, "output": 2.0}}))
    with scripted_llm() as llm:
        llm.add(model="agent-model", reply="Release notes for v3.1.", prompt_tokens=40, completion_tokens=10)
        env = child_env(
            receiver,
            MCP_URL=url,
            BASE_URL=llm.url,
            AGENT_MODEL="agent-model",
            STRONG_MODEL="strong-model",
            PRICES_FILE=str(prices),
            SKILLS_DIRS=str(tmp_path / "skills"),
            INGOT_HOME=str(tmp_path / "agent-home"),
        )
        done = subprocess.run(
            [sys.executable, "-m", "ingot.cli", "agent", MATCH_TASK],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "route: match release-notes" in done.stdout
    (span,) = receiver.named("chat agent-model")  # exported at exit, nothing waited for
    port = int(llm.url.split(":")[2].split("/")[0])
    assert span.kind == CLIENT and span.scope == "ingot.models"
    assert span.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "agent-model",
        "gen_ai.response.model": "agent-model",
        "gen_ai.usage.input_tokens": 40,
        "gen_ai.usage.output_tokens": 10,
        "gen_ai.response.finish_reasons": ["stop"],
        "server.address": "127.0.0.1",
        "server.port": port,
        "ingot.model.role": "agent",
        "ingot.model.cost_usd": pytest.approx((40 * 1.0 + 10 * 2.0) / 1e6),
    }
    assert span.duration_ms > 0 and {path for path, _, _ in receiver.requests} == {"/v1/traces"}
    assert MATCH_TASK.encode() not in exported_bytes(receiver)  # nor the skill body in the prompt


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_a_grpc_protocol_stops_the_server_with_one_line_saying_what_to_set(command, skills_root, receiver):
    args = ["--mcp-port", str(free_port()), "--no-ui"] if command == "serve" else []
    done = subprocess.run(
        [sys.executable, "-m", "ingot.cli", command, "--skills", str(skills_root), *args],
        cwd=skills_root.parent,
        env=child_env(receiver, OTEL_EXPORTER_OTLP_PROTOCOL="grpc"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: OTEL_EXPORTER_OTLP_PROTOCOL=grpc:") and "http/protobuf" in error
    assert done.stdout == ""


NOTHING = """
import signal
from opentelemetry import trace
from ingot.settings import load_settings
from mcp_server.telemetry import setup_telemetry
installed = setup_telemetry(load_settings())
hooked = signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
print(installed, type(trace.get_tracer_provider()).__name__, hooked)
"""


def test_without_an_endpoint_nothing_is_installed(tmp_path, receiver):
    env = child_env(receiver)
    del env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    done = subprocess.run(
        [sys.executable, "-c", NOTHING],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "ProxyTracerProvider", "False"]  # no provider, no SIGTERM hook
