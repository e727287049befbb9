"""The local trace store: redaction, file modes, rotation, retention, opt-out, corrupt lines."""

from __future__ import annotations

import datetime as dt
import stat

from optimize.models.redaction import redact
from optimize.models.traces import LocalTraceStore, TraceRecord

KEY = "sk-or-v1-0123456789abcdef0123456789abcdef"


def record(task="write release notes", **kwargs) -> TraceRecord:
    return TraceRecord(
        task=task,
        answer="done",
        route="match",
        skill="release-notes",
        revision="abc",
        model="agent-model",
        **kwargs,
    )


def test_a_planted_key_never_reaches_disk(tmp_path):
    store = LocalTraceStore(tmp_path / "runs" / "traces.jsonl")
    store.append(
        record(
            task=f"use my key {KEY} and Authorization: Bearer abcdefghijklmnop123",
            errors=("password=hunter22 failed",),
        )
    )
    text = store.path.read_text()
    assert KEY not in text and "abcdefghijklmnop123" not in text and "hunter22" not in text
    assert "[REDACTED:api-key]" in text and "[REDACTED:bearer-token]" in text
    assert store.read().records[0].errors == ("password=[REDACTED:secret-assignment] failed",)


def test_redaction_covers_private_keys_and_leaves_prose_alone():
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"
    assert redact(f"here: {pem} end") == "here: [REDACTED:private-key] end"
    assert (
        redact("Explain how token buckets rate-limit an API.")
        == "Explain how token buckets rate-limit an API."
    )


def test_files_are_private(tmp_path):
    store = LocalTraceStore(tmp_path / "runs" / "traces.jsonl")
    store.append(record())
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700


def test_rotation_keeps_n_backups(tmp_path):
    store = LocalTraceStore(tmp_path / "traces.jsonl", max_bytes=2000, backups=2)
    for i in range(40):
        store.append(record(task=f"task number {i} " + "x" * 200))
    assert [p.name for p in store.files()] == ["traces.jsonl.2", "traces.jsonl.1", "traces.jsonl"]
    tasks = [r.task for r in store.read().records]
    assert tasks[-1].startswith("task number 39") and len(tasks) < 40


def test_opt_out_writes_nothing(tmp_path):
    store = LocalTraceStore(tmp_path / "traces.jsonl", enabled=False)
    store.append(record())
    assert not store.path.exists() and store.read().records == ()


def test_old_records_are_dropped_by_age(tmp_path):
    now = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
    store = LocalTraceStore(tmp_path / "traces.jsonl", retention_days=30, clock=lambda: now)
    store.append(record(task="old", time=(now - dt.timedelta(days=40)).isoformat()))
    store.append(record(task="recent", time=(now - dt.timedelta(days=3)).isoformat()))
    assert [r.task for r in store.read().records] == ["recent"]
    assert store.prune() == 1 and len(store.path.read_text().splitlines()) == 1
    before = store.path.stat().st_mtime_ns
    assert store.prune() == 0 and store.path.stat().st_mtime_ns == before  # nothing left to drop


def test_commands_that_read_all_traffic_delete_expired_records_from_disk(tmp_path):
    from ingot.model_runtime import trace_store
    from ingot.settings import load_settings

    (tmp_path / "skills").mkdir()
    settings = load_settings(
        ingot_home=tmp_path / "home", skills_dirs=(tmp_path / "skills",), traces=True, trace_retention_days=30
    )
    now = dt.datetime.now(dt.UTC)
    writer = trace_store(settings)
    writer.append(record(task="PRIVATE old task", time=(now - dt.timedelta(days=40)).isoformat()))
    writer.append(record(task="recent", time=now.isoformat()))
    assert "PRIVATE old task" in writer.path.read_text()  # an agent run does not rewrite the file
    trace_store(settings, prune_expired=True)
    assert "PRIVATE old task" not in writer.path.read_text() and "recent" in writer.path.read_text()


def test_corrupt_and_non_utf8_lines_are_skipped_and_counted(tmp_path):
    store = LocalTraceStore(tmp_path / "traces.jsonl")
    store.append(record(task="good one"))
    with store.path.open("ab") as handle:
        handle.write(b'{not json\n\xff\xfe binary junk\n{"schema_version": 99}\n')
    store.append(record(task="good two"))
    result = store.read()
    assert [r.task for r in result.records] == ["good one", "good two"] and result.skipped == 3


def test_secrets_in_urls_quoted_json_and_secret_named_fields_are_redacted(tmp_path):
    assert redact("postgres://admin:s3cretpw@db/x") == "postgres://[REDACTED:url-credentials]@db/x"
    assert "battery" not in redact('{"password": "correct horse battery staple"}')
    assert "hunter22" not in redact(r"escaped {\"password\": \"hunter22\"}")
    store = LocalTraceStore(tmp_path / "traces.jsonl")
    store.append(
        record(tool_calls=({"name": "login", "arguments": {"password": "hunter2hunter2", "city": "Lisbon"}},))
    )
    text = store.path.read_text()
    assert "hunter2hunter2" not in text and "Lisbon" in text
