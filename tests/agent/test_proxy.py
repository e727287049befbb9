"""The capture proxy: forwards unchanged (plain and streamed), records, never stores keys."""

from __future__ import annotations

import json
import threading

import openai
import pytest
import uvicorn

from agent.proxy import build_proxy
from mcp_server.sessions import SessionRoutes
from optimize.models.cassette import Cassette
from optimize.models.traces import LocalTraceStore
from tests.conftest import free_port, wait_for
from tests.scripted_llm import scripted_llm

KEY = "sk-live-proxy-test-key-0123456789"


@pytest.fixture
def upstream():
    with scripted_llm() as server:
        server.add(
            user_contains="story",
            reply="once upon a time, far far away",
            prompt_tokens=9,
            completion_tokens=6,
        )
        server.add(
            user_contains="weather", tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}}]
        )
        yield server


def run_proxy(app):
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started)
    return server, thread, f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def proxied(upstream, tmp_path):
    store = LocalTraceStore(tmp_path / "runs" / "traces.jsonl")
    sessions = SessionRoutes(tmp_path / "runs")
    cassette = Cassette(tmp_path / "runs" / "cassettes" / "proxy.jsonl", "record")
    server, thread, url = run_proxy(build_proxy(upstream.url, store, sessions, cassette, harness="test"))
    yield url, store, sessions, cassette, tmp_path
    server.should_exit = True
    thread.join(timeout=10)


def ask(base_url, text, stream=False, headers=None):
    client = openai.OpenAI(base_url=base_url, api_key=KEY, default_headers=headers or {}, max_retries=0)
    messages = [{"role": "user", "content": text}]
    if stream:
        chunks = client.chat.completions.create(model="agent-model", messages=messages, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return client.chat.completions.create(model="agent-model", messages=messages).choices[0].message.content


def test_plain_and_streamed_completions_pass_through_unchanged(proxied, upstream):
    url = proxied[0]
    assert ask(url, "a story") == ask(upstream.url, "a story") == "once upon a time, far far away"
    assert ask(url, "a story", stream=True) == ask(upstream.url, "a story", stream=True)
    forwarded = [r for r in upstream.chat_requests()]
    lowered = [{k.lower(): v for k, v in r.headers.items()} for r in forwarded]
    assert all(h.get("authorization") == f"Bearer {KEY}" for h in lowered)  # the key is forwarded
    assert not any(k.startswith("x-ingot-") for h in lowered for k in h)


def test_both_kinds_are_recorded_with_the_header_attribution_and_no_key(proxied):
    url, store, _, cassette, tmp_path = proxied
    ask(url, "a story", headers={"X-Ingot-Skill": "storytelling@rev123"})
    ask(url, "a story", stream=True, headers={"X-Ingot-Skill": "storytelling@rev123"})
    # Each call's trace, then its cassette entry, is written after the answer went out.
    wait_for(lambda: len(store.read().records) == 2)
    wait_for(lambda: cassette.path.exists() and len(cassette.path.read_text().splitlines()) == 2)
    records = store.read().records
    assert {r.revision for r in records} == {"rev123"} and {r.skill for r in records} == {"storytelling"}
    assert [r.answer for r in records] == ["once upon a time, far far away"] * 2
    assert records[0].tokens_in == 9 and records[0].harness == "test"  # the stream sent no usage
    everything = "".join(p.read_text() for p in (tmp_path / "runs").rglob("*") if p.is_file())
    assert KEY not in everything and "authorization" not in everything.lower()
    assert len(cassette.path.read_text().splitlines()) == 2


def test_a_session_is_attributed_to_its_last_route(proxied):
    url, store, sessions, _, _ = proxied
    sessions.record("conv-42", "related", "release-notes", "abc")
    ask(url, "a story", headers={"X-Ingot-Session": "conv-42"})
    record = wait_for(lambda: store.read().records)[0]
    assert (record.route, record.skill, record.revision) == ("related", "release-notes", "abc")


def test_tool_calls_are_recorded(proxied):
    url, store, *_ = proxied
    client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)
    client.chat.completions.create(model="agent-model", messages=[{"role": "user", "content": "weather?"}])
    record = wait_for(lambda: store.read().records)[0]
    assert record.tool_calls[0]["name"] == "get_weather" and json.loads(
        record.tool_calls[0]["arguments"]
    ) == {"city": "Oslo"}


def test_an_unwritable_trace_store_never_costs_the_response(upstream, tmp_path, caplog):
    blocked = tmp_path / "traces.jsonl"
    blocked.mkdir()  # appending to a directory fails, whoever we run as
    server, thread, url = run_proxy(build_proxy(upstream.url, LocalTraceStore(blocked)))
    try:
        assert ask(url, "a story") == "once upon a time, far far away"
        assert ask(url, "a story", stream=True) == "once upon a time, far far away"
        wait_for(lambda: "could not record a trace" in caplog.text)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_models_and_other_paths_are_forwarded_and_are_not_runs(proxied, upstream):
    url, store, *_ = proxied
    client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)
    assert [m.id for m in client.models.list()] == list(upstream.models)
    # Traces are written after the response, so "no trace yet" would prove nothing: a run made
    # afterwards is the barrier. Once its trace is on disk, any trace for the listing would be too.
    assert ask(url, "a story") == "once upon a time, far far away"
    records = wait_for(lambda: store.read().records)
    assert [r.task for r in records] == ["a story"]


def test_ingot_proxy_command_serves_and_records(upstream, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import free_port

    port = free_port()
    (tmp_path / "skills").mkdir()
    env = {
        **os.environ,
        "INGOT_HOME": str(tmp_path / "runs"),
        "SKILLS_DIRS": str(tmp_path / "skills"),
        "HF_HUB_OFFLINE": "1",
        "LOG_LEVEL": "WARNING",
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ingot.cli",
            "proxy",
            "--upstream",
            upstream.url,
            "--port",
            str(port),
            "--harness",
            "cli-test",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}/v1"

        def answer():
            try:
                return ask(url, "a story", headers={"X-Ingot-Skill": "tales@r9"})
            except openai.APIConnectionError:
                return None

        assert wait_for(answer, timeout=30, interval=0.2) == "once upon a time, far far away"
        store = LocalTraceStore(tmp_path / "runs" / "traces.jsonl")
        record = wait_for(lambda: store.read().records)[0]
        assert (record.skill, record.revision, record.harness) == ("tales", "r9", "cli-test")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)


def test_a_recorded_tool_call_replays_through_the_model_client(proxied):
    from optimize.models.llm import _from_json

    url, _, _, cassette, _ = proxied
    client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)
    client.chat.completions.create(model="agent-model", messages=[{"role": "user", "content": "weather?"}])
    wait_for(lambda: cassette.path.exists() and cassette.path.read_text().strip())
    entry = json.loads(cassette.path.read_text().splitlines()[-1])
    replayed = _from_json("agent", entry["response"])  # the reader LLMClient uses on replay
    assert replayed.finish_reason == "tool_calls" and replayed.tool_calls[0].name == "get_weather"
    assert replayed.tool_calls[0].id and json.loads(replayed.tool_calls[0].arguments) == {"city": "Oslo"}
