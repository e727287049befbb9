"""OpenTelemetry export, as a collector receives it: real `ingot serve` and a real model call in
child processes with OTEL_EXPORTER_OTLP_ENDPOINT pointed at a loopback OTLP receiver that decodes
every span (tests/otlp.py). Child processes, because a tracer provider is global to a process."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastmcp import Client

from mcp_server.telemetry import setup_telemetry
from tests.conftest import BUNDLED_SKILLS, free_port, wait_for
from tests.otlp import OtlpReceiver, Span, otlp_receiver
from tests.scripted_llm import scripted_llm

SERVER, CLIENT = 2, 3  # OTLP span kinds
ERROR = 2  # OTLP status code
MATCH_TASK = "Draft release notes for v3.1 from the merged pull requests"
NOVEL_TASK = "Recommend three novels like Dune"
PROMPT = "Summarise the quarterly figures for the board"


def child_env(receiver: OtlpReceiver, **extra: str) -> dict[str, str]:
    """This process's environment without any OTEL_/LANGFUSE_ setting of its own, exporting to
    `receiver` within a tenth of a second of each span ending."""
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LANGFUSE_")) and k != "INGOT_HOME"
    }
    return {
        **inherited,
        "HF_HUB_OFFLINE": "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_SERVICE_NAME": "ingot-under-test",
        **extra,
    }


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as state:
        yield state


@pytest.fixture
def served(tmp_path: Path, receiver: OtlpReceiver) -> Iterator[str]:
    """`ingot serve --no-ui` on the bundled skills, exporting to `receiver`; yields its /mcp URL."""
    root = tmp_path / "skills"
    shutil.copytree(BUNDLED_SKILLS, root)
    port = free_port()
    log = tmp_path / "serve.log"  # a file, not a pipe: nobody reads a pipe while it serves
    process = subprocess.Popen(
        [
            sys.executable,
            "/tmp/otelx/ingot_instrumented.py",
            "serve",
            "--skills",
            str(root),
            "--mcp-port",
            str(port),
            "--no-ui",
        ],
        cwd=tmp_path,
        env=child_env(receiver),
        stdout=log.open("w"),
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
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)


async def _list_tools(url: str) -> None:
    async with Client(url) as client:
        await client.list_tools()


def timed_calls(url: str, calls: list[tuple[str, dict]]) -> list[tuple[object, float]]:
    """Each call's result and the milliseconds the client waited for it."""

    async def go() -> list[tuple[object, float]]:
        done = []
        async with Client(url) as client:
            for tool, args in calls:
                started = time.perf_counter()
                result = await client.call_tool(tool, args, raise_on_error=False)
                done.append((result, (time.perf_counter() - started) * 1000))
        return done

    return asyncio.run(go())


def tool_spans(receiver: OtlpReceiver, count: int) -> list[Span]:
    """The server's `tools/call` spans, in the order the calls were made, once `count` arrived."""

    def arrived() -> list[Span] | None:
        spans = [
            s
            for s in receiver.spans
            if s.kind == SERVER and s.attributes.get("mcp.method.name") == "tools/call"
        ]
        return spans if len(spans) >= count else None

    return sorted(wait_for(arrived, timeout=30), key=lambda s: s.start_ns)


def test_each_tool_call_is_one_server_span_with_its_outcome_skill_revision_and_latency(served, receiver):
    calls = [
        ("route_and_load", {"task": MATCH_TASK}),
        ("route_and_load", {"task": NOVEL_TASK}),
        ("get_skill", {"name": "release-notes"}),
        ("get_skill", {"name": "no-such-skill"}),
    ]
    (matched, match_ms), (_, novel_ms), (loaded, get_ms), (failed, error_ms) = timed_calls(served, calls)
    assert matched.structured_content["match"] == "release-notes" and failed.is_error
    revision = matched.structured_content["revision"]
    assert loaded.structured_content["revision"] == revision
    match, novel, get, error = tool_spans(receiver, 4)
    for span, (tool, _), waited in zip(
        (match, novel, get, error), calls, (match_ms, novel_ms, get_ms, error_ms)
    ):
        assert span.name == f"tools/call {tool}"
        assert span.attributes["gen_ai.tool.name"] == tool
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["mcp.session.id"] and span.attributes["jsonrpc.request.id"]
        assert 0 < span.duration_ms <= waited  # the server's part of the latency the client saw
        assert span.resource["service.name"] == "ingot-under-test" and span.scope == "fastmcp"
    assert match.attributes["ingot.tool.outcome"] == "match"
    assert match.attributes["ingot.skill.name"] == "release-notes"
    assert match.attributes["ingot.skill.revision"] == revision
    assert match.attributes["ingot.route.score"] == pytest.approx(matched.structured_content["score"])
    assert novel.attributes["ingot.tool.outcome"] == "novel" and "ingot.skill.name" not in novel.attributes
    assert get.attributes["ingot.tool.outcome"] == "ok"
    assert (get.attributes["ingot.skill.name"], get.attributes["ingot.skill.revision"]) == (
        "release-notes",
        revision,
    )
    assert error.attributes["ingot.tool.outcome"] == "error" and error.status == ERROR
    assert error.attributes["error.type"] == "tool_error"
    # No content on a span: neither the tasks nor the body that was served.
    exported = repr([s.attributes for s in receiver.spans])
    assert MATCH_TASK not in exported and NOVEL_TASK not in exported
    assert loaded.structured_content["body"].strip().splitlines()[0] not in exported


MODEL_CALL = textwrap.dedent(
    """
    import sys
    from mcp_server.telemetry import setup_telemetry
    from optimize.models.ledger import Price, UsageLedger
    from optimize.models.llm import LLMClient, LLMConfig, make_endpoint

    telemetry = setup_telemetry()
    endpoint = make_endpoint("agent", sys.argv[1], None, "agent-model")
    ledger = UsageLedger("otel", {"agent-model": Price(1.0, 2.0)})
    LLMClient(LLMConfig({"agent": endpoint}), ledger).complete("agent", [{"role": "user", "content": sys.argv[2]}])
    assert telemetry.flush(), "the spans were not exported in time"
    """
)


def test_a_model_call_is_a_genai_client_span_with_usage_and_cost_but_no_prompt(tmp_path, receiver):
    with scripted_llm() as llm:
        llm.add(user_contains=PROMPT, reply="Revenue rose.", prompt_tokens=40, completion_tokens=10)
        done = subprocess.run(
            [sys.executable, "-c", MODEL_CALL, llm.url, PROMPT],
            cwd=Path(__file__).resolve().parents[2],
            env=child_env(receiver),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    (span,) = receiver.named("chat agent-model")
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
    assert span.duration_ms > 0 and receiver.requests[0][0] == "/v1/traces"


def test_without_an_endpoint_nothing_is_installed(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert setup_telemetry() is None


def test_a_grpc_protocol_stops_serve_with_one_line_saying_what_to_set(tmp_path, receiver):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ingot.cli",
            "serve",
            "--skills",
            str(tmp_path),
            "--mcp-port",
            str(free_port()),
            "--no-ui",
        ],
        cwd=tmp_path,
        env=child_env(receiver, OTEL_EXPORTER_OTLP_PROTOCOL="grpc"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=grpc" in done.stderr and "http/protobuf" in done.stderr
