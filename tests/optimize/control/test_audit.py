"""Audit chain: append, verify, and detect every kind of tampering by the first bad line."""

from __future__ import annotations

import json

import pytest

from optimize.control.audit import AuditError, AuditLog


@pytest.fixture
def log(tmp_path) -> AuditLog:
    audit = AuditLog(tmp_path)
    for i in range(5):
        audit.append(
            action="promote",
            skill=f"s{i}",
            from_revision="a" * 64,
            to_revision="b" * 64,
            actor="tester",
            reason=f"change {i}",
        )
    return audit


def lines(log: AuditLog) -> list[bytes]:
    return log.path.read_bytes().splitlines(keepends=True)


def test_a_fresh_chain_verifies_and_reports_its_head(log):
    result = log.verify()
    assert result.ok and result.lines == 5 and result.head_hash == log.entries()[-1].hash


def test_an_empty_log_verifies(tmp_path):
    assert AuditLog(tmp_path).verify().ok


def test_audit_records_refuse_anything_but_metadata(tmp_path):
    with pytest.raises(AuditError, match="metadata only"):
        AuditLog(tmp_path).append(action="promote", body="# the whole skill text")


def test_an_edited_field_is_detected_at_its_line(log):
    data = lines(log)
    data[2] = data[2].replace(b'"actor":"tester"', b'"actor":"mallory"')
    log.path.write_bytes(b"".join(data))
    result = log.verify()
    assert not result.ok and result.bad_line == 3 and "edited" in result.problem


def test_a_deleted_line_is_detected(log):
    data = lines(log)
    del data[1]
    log.path.write_bytes(b"".join(data))
    result = log.verify()
    assert not result.ok and result.bad_line == 2


def test_two_swapped_lines_are_detected(log):
    data = lines(log)
    data[1], data[2] = data[2], data[1]
    log.path.write_bytes(b"".join(data))
    result = log.verify()
    assert not result.ok and result.bad_line == 2


def test_a_truncated_tail_is_detected_through_the_head_anchor(log):
    log.path.write_bytes(b"".join(lines(log)[:3]))
    result = log.verify()
    assert not result.ok and "truncated" in result.problem and result.bad_line == 4


def test_a_torn_last_line_is_detected(log):
    log.path.write_bytes(log.path.read_bytes()[:-10])
    result = log.verify()
    assert not result.ok and "incomplete" in result.problem


def test_a_head_one_line_behind_is_a_crash_not_tampering(log):
    entries = log.entries()
    log.head_path.write_text(json.dumps({"seq": entries[-2].seq, "hash": entries[-2].hash}))
    result = log.verify()
    assert result.ok and "behind" in result.note
    log.append(action="reject", skill="x", actor="tester", reason="r")
    assert log.verify().ok and log.verify().note is None


def test_nothing_is_appended_to_a_broken_chain(log):
    data = lines(log)
    del data[0]
    log.path.write_bytes(b"".join(data))
    with pytest.raises(AuditError, match="broken at line 1"):
        log.append(action="promote", skill="x", actor="tester")
