"""The Langfuse backend through the real SDK against a fake Langfuse server on loopback."""

from __future__ import annotations

import secrets

import pytest
from langfuse import Langfuse

from optimize.models.traces import TraceRecord
from optimize.models.traces_langfuse import LangfuseTraceStore, trace_tags
from tests.fake_langfuse import fake_langfuse

KEY = "sk-or-v1-0123456789abcdef0123456789abcdef"


@pytest.fixture
def store():
    # The SDK keeps one client per public key for the process: a fresh key per test.
    public_key = f"pk-lf-{secrets.token_hex(4)}"
    with fake_langfuse(public_key=public_key) as server:
        client = Langfuse(public_key=public_key, secret_key="sk-lf-test", base_url=server.url)
        store = LangfuseTraceStore(client)
        yield store, server
        store.close()


def test_records_round_trip_with_mining_tags_and_redaction(store):
    traces, server = store
    served = TraceRecord(
        task=f"write release notes, key {KEY}",
        answer="done",
        route="match",
        skill="release-notes",
        revision="abc123",
        model="agent-model",
        tokens_in=10,
    )
    novel = TraceRecord(
        task="plan a trip", answer="ok", route="novel", skill=None, revision=None, model="strong"
    )
    traces.append(served)
    traces.append(novel)
    assert [o["tags"] for o in server.observations] == [
        ["release-notes", "revision=release-notes@abc123"],
        ["novel"],
    ]
    assert KEY not in str(server.observations)
    result = traces.read()
    assert [r.task for r in result.records] == ["write release notes, key [REDACTED:api-key]", "plan a trip"]
    assert result.records[0].revision == "abc123" and result.skipped == 0


def test_related_runs_are_tagged_related():
    record = TraceRecord(task="t", answer=None, route="related", skill="pdf", revision="r1", model=None)
    assert trace_tags(record) == ["related", "pdf", "revision=pdf@r1"]


def test_unreadable_observations_are_skipped_and_counted(store):
    traces, server = store
    traces.append(TraceRecord(task="fine", answer="ok", route="novel", skill=None, revision=None, model=None))
    server.observations.append({**server.observations[0], "id": "x", "metadata": {"ingot_record": "{broken"}})
    result = traces.read()
    assert [r.task for r in result.records] == ["fine"] and result.skipped == 1


def test_settings_choose_langfuse_only_when_both_keys_are_set(monkeypatch, tmp_path):
    from ingot.model_runtime import trace_store
    from ingot.settings import load_settings
    from optimize.models.traces import LocalTraceStore

    monkeypatch.setenv("INGOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLS_DIRS", str(tmp_path))
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-only")
    monkeypatch.delenv("LANGFUSE_SECRET_KEY", raising=False)
    assert isinstance(trace_store(load_settings()), LocalTraceStore)
    with fake_langfuse(public_key="pk-lf-settings") as server:
        monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-settings")
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-test")
        monkeypatch.setenv("LANGFUSE_BASE_URL", server.url)
        store = trace_store(load_settings())
        assert isinstance(store, LangfuseTraceStore)
        store.append(TraceRecord(task="t", answer="a", route="novel", skill=None, revision=None, model=None))
        assert [r.task for r in store.read().records] == ["t"]
        store.close()  # stop the exporter while the server is still up
