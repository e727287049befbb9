"""The model client against a real scripted OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import os

import pytest
from pydantic import BaseModel

from ingot.errors import ConfigError
from ingot.model_runtime import llm_client
from ingot.settings import load_settings
from optimize.models.cassette import Cassette, CassetteMiss
from optimize.models.endpoints import LLMConfig, make_endpoint
from optimize.models.ledger import BudgetExceeded, Price, UsageLedger
from optimize.models.llm import LLMClient, LLMError
from tests.scripted_llm import scripted_llm


@pytest.fixture
def server():
    with scripted_llm() as state:
        yield state


def client_for(server, base_url=None, **kwargs) -> LLMClient:
    url = base_url or server.url
    endpoints = {
        role: make_endpoint(role, url, "sk-test-key", f"{role}-model")
        for role in ("agent", "strong", "teacher", "judge")
    }
    config = LLMConfig(endpoints, max_retries=kwargs.pop("max_retries", 2), retry_backoff_s=0)
    return LLMClient(config, **kwargs)


def test_a_plain_completion_goes_to_the_roles_model_and_counts_usage(server):
    server.add(user_contains="hello", reply="hi there", prompt_tokens=20, completion_tokens=5)
    ledger = UsageLedger("run-1", {"agent-model": Price(1.0, 2.0)})
    completion = client_for(server, ledger=ledger).complete("agent", [{"role": "user", "content": "hello"}])
    assert completion.text == "hi there" and completion.model == "agent-model"
    assert server.chat_requests()[0].body["model"] == "agent-model"
    assert ledger.totals()["total"]["usd"] == pytest.approx((20 * 1.0 + 5 * 2.0) / 1e6)


def test_no_zdr_preference_off_openrouter(server):
    server.add(reply="ok")
    client_for(server).complete("agent", [{"role": "user", "content": "x"}])
    assert "provider" not in server.chat_requests()[0].body


def test_openrouter_requests_carry_the_zdr_preference(server, monkeypatch):
    # The scripted server acts as an HTTP proxy for openrouter.ai: real requests, no patching.
    monkeypatch.setenv("HTTP_PROXY", server.url.removesuffix("/v1"))
    monkeypatch.setenv("NO_PROXY", "")
    server.add(reply="ok")
    client_for(server, base_url="http://openrouter.ai/api/v1").complete(
        "judge", [{"role": "user", "content": "x"}]
    )
    request = server.chat_requests()[0]
    assert request.body["provider"] == {"zdr": True, "data_collection": "deny"}
    assert "openrouter.ai" in request.path


def test_a_model_without_a_zdr_endpoint_fails_loudly(server, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", server.url.removesuffix("/v1"))
    monkeypatch.setenv("NO_PROXY", "")
    server.add(
        error_status=404,
        error_times=99,
        error_body={"error": {"message": "No endpoints found matching your data policy"}},
    )
    with pytest.raises(LLMError, match="no zero-data-retention endpoint"):
        client_for(server, base_url="http://openrouter.ai/api/v1").complete(
            "agent", [{"role": "user", "content": "x"}]
        )


def test_429_is_retried_then_succeeds(server):
    rule = server.add(reply="finally", error_status=429, error_times=2)
    completion = client_for(server, max_retries=3).complete("agent", [{"role": "user", "content": "x"}])
    assert completion.text == "finally" and rule.used == 3


def test_tool_calls_and_streaming_are_assembled(server):
    server.add(user_contains="weather", tool_calls=[{"name": "get_weather", "arguments": {"city": "Lisbon"}}])
    server.add(user_contains="story", reply="once upon a time, far away")
    client = client_for(server)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    called = client.complete("agent", [{"role": "user", "content": "weather?"}], tools=tools)
    assert called.tool_calls[0].name == "get_weather" and json.loads(called.tool_calls[0].arguments) == {
        "city": "Lisbon"
    }
    streamed = client.complete("agent", [{"role": "user", "content": "a story"}], stream=True)
    assert streamed.text == "once upon a time, far away" and streamed.tokens_in == 11


class Verdict(BaseModel):
    score: float
    reason: str


def test_structured_output_is_validated_with_one_repair_retry(server):
    server.add(user_contains="That reply was not valid", reply='{"score": 0.8, "reason": "fixed"}')
    server.add(user_contains="judge this", reply='{"score": "high"}')
    verdict, calls = client_for(server).complete_json(
        "judge", [{"role": "user", "content": "judge this"}], Verdict
    )
    assert verdict == Verdict(score=0.8, reason="fixed") and len(calls) == 2
    assert server.chat_requests()[0].body["response_format"] == {"type": "json_object"}


def test_the_cap_aborts_the_run_with_totals(server):
    server.add(reply="expensive", prompt_tokens=1_000_000, completion_tokens=0)
    ledger = UsageLedger("run-cap", {"agent-model": Price(5.0, 5.0)}, max_run_usd=1.0)
    client = client_for(server, ledger=ledger)
    client.complete("agent", [{"role": "user", "content": "x"}])
    with pytest.raises(BudgetExceeded, match=r"would pass MAX_RUN_USD \$1.0000") as caught:
        client.complete("agent", [{"role": "user", "content": "y"}])
    assert "'tokens_in': 1000000" in str(caught.value)
    assert len(server.chat_requests()) == 1


def test_unknown_prices_make_cost_unknown_not_zero(server):
    server.add(reply="ok")
    ledger = UsageLedger("run-u", {})
    client_for(server, ledger=ledger).complete("agent", [{"role": "user", "content": "x"}])
    assert ledger.totals()["total"]["usd"] is None and ledger.totals()["total"]["unknown_cost_calls"] == 1


def test_record_then_replay_is_identical_with_zero_network_calls(server, tmp_path):
    server.add(reply="first sample")
    path = tmp_path / "c.jsonl"
    recorder = client_for(server, cassette=Cassette(path, "record"))
    messages = [{"role": "user", "content": "sample me"}]
    recorded = [
        recorder.complete("agent", messages, temperature=1.0, skill_revision="abc").text for _ in range(2)
    ]
    before = len(server.requests)
    player = client_for(server, cassette=Cassette(path, "replay"))
    replayed = [
        player.complete("agent", messages, temperature=1.0, skill_revision="abc").text for _ in range(2)
    ]
    assert replayed == recorded and len(server.requests) == before
    assert "sk-test-key" not in path.read_text() and "uthorization" not in path.read_text()
    with pytest.raises(CassetteMiss, match="no recorded response"):
        player.complete("agent", messages, temperature=1.0, skill_revision="abc")  # a third call
    with pytest.raises(CassetteMiss):
        player.complete("agent", messages, temperature=1.0, skill_revision="other-revision")


def test_cassettes_store_the_request_redacted_and_still_replay(server, tmp_path):
    server.add(reply="Sent to the finance team.")
    path = tmp_path / "c.jsonl"
    messages = [{"role": "user", "content": "Mail jane.doe@example.com; the db password is Hunter2!x"}]
    recorded = client_for(server, cassette=Cassette(path, "record")).complete("agent", messages).text
    stored = path.read_text()
    assert "jane.doe@example.com" not in stored and "Hunter2!x" not in stored and "[REDACTED:email]" in stored
    assert "Sent to the finance team." in stored  # the answer is kept verbatim: replay must return it
    before = len(server.requests)
    assert client_for(server, cassette=Cassette(path, "replay")).complete("agent", messages).text == recorded
    assert len(server.requests) == before


def test_settings_without_a_key_for_a_remote_url_say_what_to_set(monkeypatch):
    monkeypatch.setenv("BASE_URL", "https://openrouter.ai/api/v1")
    monkeypatch.setenv("AGENT_MODEL", "some/model")
    monkeypatch.delenv("API_KEY", raising=False)
    with pytest.raises(ConfigError, match="set MODEL_API_KEY or API_KEY"):
        llm_client(load_settings(), "run")
    monkeypatch.setenv("BASE_URL", "http://localhost:11434/v1")  # local: no key needed
    assert llm_client(load_settings(), "run").config.endpoint("agent").api_key is None


def test_secrets_are_masked_in_settings_repr(monkeypatch):
    monkeypatch.setenv("API_KEY", "sk-very-secret")
    assert "sk-very-secret" not in repr(load_settings()) and os.environ["API_KEY"] == "sk-very-secret"


def test_concurrent_callers_cannot_all_slip_under_the_cap(server):
    import concurrent.futures

    server.add(reply="ok", prompt_tokens=100_000, completion_tokens=0)  # $0.50 a call
    ledger = UsageLedger("run-race", {"agent-model": Price(5.0, 5.0)}, max_run_usd=1.5)
    client = client_for(server, ledger=ledger)
    client.complete("agent", [{"role": "user", "content": "warm-up"}])  # the ledger learns a call's cost

    def call(n):
        try:
            client.complete("agent", [{"role": "user", "content": f"call {n}"}])
            return "sent"
        except BudgetExceeded:
            return "refused"

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(call, range(16)))
    assert ledger.totals()["total"]["usd"] <= 1.5 + 1e-9
    assert results.count("sent") == 2


def test_a_cap_with_an_unpriced_model_is_refused_before_sending(server):
    server.add(reply="ok")
    client = client_for(server, ledger=UsageLedger("run-x", {}, max_run_usd=0.01))
    with pytest.raises(BudgetExceeded, match="has no price"):
        client.complete("agent", [{"role": "user", "content": "x"}])
    assert server.chat_requests() == []


def test_endpoint_repr_hides_the_key():
    assert "sk-test-key" not in repr(make_endpoint("agent", "https://example.org/v1", "sk-test-key", "m"))


@pytest.mark.parametrize(
    "garbage",
    [
        "<!doctype html><html><body>Bad gateway</body></html>",
        "not json at all",
        '{"id": "x"}',
        '{"choices": []}',
        "",
        "[1, 2]",
        "null",
        '{"choices": {"0": {}}}',
        '{"choices": [{"message": "hi"}]}',
    ],
)
def test_a_malformed_200_is_retried_then_one_clear_error(server, garbage):
    server.add(user_contains="hello", garbage=garbage)
    ledger = UsageLedger("run-g", {})
    with pytest.raises(LLMError, match="not a chat completion") as failure:
        client_for(server, ledger=ledger).complete("agent", [{"role": "user", "content": "hello"}])
    assert "3 times" in str(failure.value) and "\n" not in str(failure.value)
    assert len(server.chat_requests()) == 3  # the first try and max_retries=2 retries
    assert ledger.totals()["total"]["calls"] == 3 and ledger.totals()["total"]["unknown_cost_calls"] == 3


def test_a_malformed_200_that_recovers_is_just_a_retry(server):
    server.add(user_contains="hello", garbage="<html>busy</html>", garbage_times=1, reply="fine")
    assert client_for(server).complete("agent", [{"role": "user", "content": "hello"}]).text == "fine"
    assert len(server.chat_requests()) == 2


NOT_UTF8 = [
    (False, b"\x80\x81 not utf-8", "application/json"),
    (False, '{"choices": [{"message": {"content": "caf\u00e9"}}]}'.encode("latin-1"), "application/json"),
    (False, b"\xff\xfe\x00garbage", "application/json"),  # a UTF-16 byte-order mark, then junk
    (True, b'data: {"choices": [{"index": 0, "delta": {"content": "caf\xe9"}}]}\n\n', "text/event-stream"),
    (True, b"\x80\x81 not utf-8", "application/json"),
]


@pytest.mark.parametrize(("stream", "body", "content_type"), NOT_UTF8)
def test_a_200_body_that_is_not_utf8_is_retried_then_one_clear_error(server, stream, body, content_type):
    server.add(user_contains="hello", garbage_bytes=body, garbage_type=content_type)
    ledger = UsageLedger("run-b", {})
    with pytest.raises(LLMError, match="not a chat completion") as failure:
        client_for(server, ledger=ledger).complete(
            "agent", [{"role": "user", "content": "hello"}], stream=stream
        )
    assert "3 times" in str(failure.value) and "\n" not in str(failure.value)
    assert len(server.chat_requests()) == 3  # the first try and max_retries=2 retries
    assert ledger.totals()["total"]["unknown_cost_calls"] == 3


@pytest.mark.parametrize(("stream", "body", "content_type"), NOT_UTF8[:1] + NOT_UTF8[3:4])
def test_a_body_that_is_not_utf8_then_a_good_reply_is_just_a_retry(server, stream, body, content_type):
    server.add(
        user_contains="hello", garbage_bytes=body, garbage_type=content_type, garbage_times=2, reply="fine"
    )
    completion = client_for(server).complete("agent", [{"role": "user", "content": "hello"}], stream=stream)
    assert completion.text == "fine" and completion.tokens_in == 11
    assert len(server.chat_requests()) == 3


@pytest.mark.parametrize(
    "body",
    [
        "<!doctype html><html><body>Bad gateway</body></html>",  # no events at all, not an empty answer
        "",
        "data: [DONE]\n\n",
        'data: "text"\n\n',
        "data: null\n\n",
        'data: {"id": "x"}\n\n',
        'data: {"choices": [1]}\n\n',
        'data: {"choices": "abc"}\n\n',
        'data: {"choices": [{"index": 0, "delta": "abc"}]}\n\n',
        'data: {"error": {"message": "upstream\\nfailed"}}\n\n',  # an error event, mid-stream
    ],
)
def test_a_streamed_200_that_is_not_a_completion_is_retried_then_one_clear_error(server, body):
    server.add(
        user_contains="hello", garbage=body, garbage_type="text/event-stream" if body[:1] != "<" else None
    )
    with pytest.raises(LLMError, match="not a chat completion") as failure:
        client_for(server).complete("agent", [{"role": "user", "content": "hello"}], stream=True)
    assert "3 times" in str(failure.value) and "\n" not in str(failure.value)
    assert len(server.chat_requests()) == 3


def test_a_journal_keeps_what_a_failed_run_paid_for(server, tmp_path):
    server.add(user_contains="step 3", garbage="<html>down</html>")
    server.add(reply="ok")
    journal = tmp_path / "journal.jsonl"
    first = client_for(server, cassette=Cassette(journal, "record-missing"))
    for step in (1, 2):
        first.complete("agent", [{"role": "user", "content": f"step {step}"}])
    with pytest.raises(LLMError):
        first.complete("agent", [{"role": "user", "content": "step 3"}])
    paid = len(server.chat_requests())
    server.rules[0].garbage, server.rules[0].reply = None, "ok"  # healthy again: rerun the same work
    again = client_for(server, cassette=Cassette(journal, "record-missing"))
    answers = [again.complete("agent", [{"role": "user", "content": f"step {s}"}]).text for s in (1, 2, 3)]
    assert answers == ["ok", "ok", "ok"]
    assert [r.body["messages"][0]["content"] for r in server.chat_requests()[paid:]] == ["step 3"]


def test_a_base_url_with_a_line_break_is_one_config_error_not_a_traceback_from_the_client():
    with pytest.raises(ConfigError, match="contains whitespace or control characters"):
        make_endpoint("agent", "http://127.0.0.1:1/v1\nhttp://127.0.0.1:2/v1", None, "m")
