"""Audit chain: append, verify, and detect every kind of tampering by the first bad line."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
import rfc8785

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


def test_a_head_one_announced_line_behind_is_a_crash_not_tampering(tmp_path):
    audit = AuditLog(tmp_path, on_step=_kill_at("audit: write head", after=1))
    audit.append(action="promote", skill="a", actor="tester")
    with pytest.raises(_Killed):
        audit.append(action="reject", skill="b", actor="tester", reason="r")
    log = AuditLog(tmp_path)
    result = log.verify()
    assert result.ok and result.behind and "behind" in result.note and result.lines == 2
    assert log.settle_head() and log.verify().note is None
    log.append(action="reject", skill="x", actor="tester", reason="r")
    assert log.verify().ok and log.verify().lines == 3


def _forged_line(log: AuditLog, **fields) -> bytes:
    """A well-formed line computed by hand the way the code does, but without the key."""
    last = log.entries()[-1]
    record = {
        "schema": 2,
        "seq": last.seq + 1,
        "time": "2026-11-30T00:00:00+00:00",
        "prev": last.hash,
        **fields,
    }
    record["hash"] = hashlib.sha256(rfc8785.dumps(record)).hexdigest()
    record["mac"] = hmac.new(b"\x00" * 32, record["hash"].encode(), hashlib.sha256).hexdigest()
    return rfc8785.dumps(record) + b"\n"


def test_one_appended_well_formed_forged_line_is_refused(log):
    log.path.write_bytes(
        log.path.read_bytes() + _forged_line(log, action="promote", skill="x", outcome="done")
    )
    result = log.verify()
    assert not result.ok and result.bad_line == 6 and "forged" in result.problem


def test_a_forged_line_with_a_head_rewritten_to_match_is_refused(log):
    forged = _forged_line(log, action="promote", skill="x", outcome="done")
    log.path.write_bytes(log.path.read_bytes() + forged)
    record = json.loads(forged)
    log.head_path.write_text(
        json.dumps({"seq": record["seq"], "hash": record["hash"], "next": None, "mac": "0" * 64})
    )
    assert not log.verify().ok


def test_a_head_moved_one_line_back_by_hand_is_refused(log):
    entries = log.entries()
    log.head_path.write_text(json.dumps({"seq": entries[-2].seq, "hash": entries[-2].hash}))
    result = log.verify()
    assert not result.ok and "head" in result.problem


def test_an_unkeyed_line_appended_to_a_keyed_chain_is_refused(log):
    last = log.entries()[-1]
    record = {"schema": 1, "seq": last.seq + 1, "time": "t", "prev": last.hash, "action": "promote"}
    record["hash"] = hashlib.sha256(rfc8785.dumps(record)).hexdigest()
    log.path.write_bytes(log.path.read_bytes() + rfc8785.dumps(record) + b"\n")
    result = log.verify()
    assert not result.ok and result.bad_line == 6 and "forged" in result.problem


def test_both_files_rewritten_consistently_without_the_key_are_refused(log):
    lines_ = [json.loads(raw) for raw in log.path.read_bytes().splitlines()]
    lines_[1]["actor"] = "mallory"
    prev = lines_[0]["hash"]
    out = [rfc8785.dumps(lines_[0]) + b"\n"]
    for record in lines_[1:]:
        record["prev"] = prev
        body = {k: v for k, v in record.items() if k not in ("hash", "mac")}
        record["hash"] = hashlib.sha256(rfc8785.dumps(body)).hexdigest()
        prev = record["hash"]
        out.append(rfc8785.dumps(record) + b"\n")
    log.path.write_bytes(b"".join(out))
    log.head_path.write_text(
        json.dumps({"seq": lines_[-1]["seq"], "hash": prev, "next": None, "mac": "0" * 64})
    )
    result = log.verify()
    assert not result.ok and result.bad_line == 2 and "MAC" in result.problem


def test_a_missing_key_leaves_nothing_trusted(log):
    log.key_path.unlink()
    result = log.verify()
    assert not result.ok and "missing" in result.problem
    with pytest.raises(AuditError):
        log.append(action="promote", skill="x", actor="tester")


def test_the_key_is_private(log):
    assert log.key_path.stat().st_mode & 0o777 == 0o600 and len(log.key_path.read_bytes()) == 32


def test_an_unkeyed_chain_from_an_older_ingot_is_adopted_and_then_protected(tmp_path):
    prev = "0" * 64
    out = []
    for seq in (1, 2):
        record = {"schema": 1, "seq": seq, "time": "t", "prev": prev, "action": "promote", "skill": f"s{seq}"}
        record["hash"] = prev = hashlib.sha256(rfc8785.dumps(record)).hexdigest()
        out.append(rfc8785.dumps(record) + b"\n")
    (tmp_path / "audit.jsonl").write_bytes(b"".join(out))
    (tmp_path / "audit.head").write_text(json.dumps({"seq": 2, "hash": prev}))
    log = AuditLog(tmp_path)
    before = log.verify()
    assert not before.ok and "ingot migrate" in before.problem
    with pytest.raises(AuditError, match="broken"):
        log.append(action="promote", skill="x", actor="tester")
    entry = log.adopt("tester")
    assert entry.get("action") == "adopt" and entry.get("legacy_head") == prev
    assert log.verify().ok and log.verify().lines == 3
    data = log.path.read_bytes().splitlines(keepends=True)
    data[0] = data[0].replace(b'"s1"', b'"s9"')
    log.path.write_bytes(b"".join(data))
    assert not log.verify().ok


def test_nothing_is_appended_to_a_broken_chain(log):
    data = lines(log)
    del data[0]
    log.path.write_bytes(b"".join(data))
    with pytest.raises(AuditError, match="broken at line 1"):
        log.append(action="promote", skill="x", actor="tester")


class _Killed(BaseException):
    pass


def _kill_at(step: str, after: int = 0):
    seen = {"n": 0}

    def hook(name: str) -> None:
        if name == step:
            seen["n"] += 1
            if seen["n"] > after:
                raise _Killed(name)

    return hook


def test_an_old_head_replayed_over_a_longer_chain_is_refused(log):
    """Only a crash between append and head move leaves the head behind, and then it names the
    line it announced; a genuine earlier head put back by hand does not."""
    old_head = log.head_path.read_bytes()
    log.append(action="reject", skill="x", actor="tester", reason="r")
    log.head_path.write_bytes(old_head)
    result = log.verify()
    assert not result.ok and "does not match the last line" in result.problem


def test_a_line_edited_after_a_verification_is_still_caught_by_the_same_log(log):
    assert log.verify().ok  # the verified prefix is remembered by this AuditLog
    data = lines(log)
    data[0] = data[0].replace(b'"actor":"tester"', b'"actor":"tesTer"')  # same length, same size
    log.path.write_bytes(b"".join(data))
    result = log.verify()
    assert not result.ok and result.bad_line == 1 and "edited" in result.problem


def test_lines_appended_after_a_verification_are_checked(log):
    assert log.verify().ok
    forged = json.loads(lines(log)[-1]) | {"seq": 6, "prev": log.verify().head_hash, "reason": "forged"}
    log.path.write_bytes(log.path.read_bytes() + json.dumps(forged).encode() + b"\n")
    result = log.verify()
    assert not result.ok and result.bad_line == 6


# -- anchors outside the state home: the key's fingerprint and the chain's length ----------------


@pytest.fixture
def homed(tmp_path) -> AuditLog:
    """A chain in a real state home (claims beside its root), five lines long."""
    from ingot.home import establish

    root = tmp_path / "lib" / "skills"
    root.mkdir(parents=True)
    home = establish((root,))
    audit = AuditLog(home.path)
    for i in range(5):
        audit.append(action="reject", skill=f"s{i}", actor="tester", reason=f"r{i}")
    return audit


def _rewrite_with(log: AuditLog, key: bytes, records: list[dict]) -> None:
    """Both files rewritten consistently under `key`: what someone with write access to the state
    home can do after replacing audit.key with their own."""
    prev, out = "0" * 64, []
    for record in records:
        record = {k: v for k, v in record.items() if k not in ("hash", "mac")} | {"prev": prev}
        record["hash"] = hashlib.sha256(rfc8785.dumps(record)).hexdigest()
        record["mac"] = hmac.new(key, record["hash"].encode(), hashlib.sha256).hexdigest()
        prev = record["hash"]
        out.append(rfc8785.dumps(record) + b"\n")
    log.path.write_bytes(b"".join(out))
    message = rfc8785.dumps({"seq": len(records), "hash": prev, "next": None})
    head = {
        "seq": len(records),
        "hash": prev,
        "next": None,
        "mac": hmac.new(key, message, hashlib.sha256).hexdigest(),
    }
    log.head_path.write_text(json.dumps(head))
    log.key_path.write_bytes(key)


def test_a_replaced_key_with_both_files_re_maced_is_refused(homed):
    records = [json.loads(raw) for raw in homed.path.read_bytes().splitlines()]
    records[2]["actor"] = "mallory"
    _rewrite_with(homed, b"\x07" * 32, records)
    result = AuditLog(homed.key_path.parent).verify()
    assert not result.ok and "it was replaced" in result.problem and result.bad_line == 1
    with pytest.raises(AuditError, match="replaced"):
        AuditLog(homed.key_path.parent).append(action="reject", skill="x", actor="mallory", reason="r")


def test_a_replaced_key_is_caught_by_the_claim_even_with_the_first_line_rewritten(homed):
    from optimize.control.audit import key_fingerprint

    key = b"\x07" * 32
    records = [json.loads(raw) for raw in homed.path.read_bytes().splitlines()]
    records[0]["key_fingerprint"] = key_fingerprint(key)
    _rewrite_with(homed, key, records)
    result = AuditLog(homed.key_path.parent).verify()
    assert not result.ok and "the key the claim" in result.problem and ".claim" in result.problem


def test_a_truncated_chain_with_a_head_captured_mid_append_is_refused(homed):
    """The head is captured while line 6 is being appended (it announces it), the chain grows to
    8 lines, then both are put back as they were at line 6: the claim remembers line 8."""
    from tests.optimize.control import killpoints

    def append_sixth() -> None:
        AuditLog(homed.key_path.parent).append(action="reject", skill="s5", actor="tester", reason="r5")

    from ingot.home import claim_path

    claim = claim_path(homed.key_path.parent.parent.parent / "skills")
    saved = {p: p.read_bytes() for p in (homed.path, homed.head_path, claim)}
    names = killpoints.points(append_sixth)  # a dry run appends it: put the files back after
    for path, data in saved.items():
        path.write_bytes(data)
    killed = killpoints.run(append_sixth, names.index("audit: write head"))
    assert killed.killed
    captured_head, captured_lines = homed.head_path.read_bytes(), homed.path.read_bytes()
    log = AuditLog(homed.key_path.parent)
    assert log.verify().ok and log.verify().behind  # a real crash: accepted, one announced line behind
    for i in (6, 7):
        log.append(action="reject", skill=f"s{i}", actor="tester", reason=f"r{i}")
    assert log.verify().ok and log.verify().lines == 8
    homed.path.write_bytes(captured_lines)
    homed.head_path.write_bytes(captured_head)
    result = AuditLog(homed.key_path.parent).verify()
    assert not result.ok and "lacks line 8" in result.problem and "removed or rewritten" in result.problem


def test_the_first_line_pins_the_key_and_each_claim_anchors_the_newest_line(homed):
    from ingot.home import claim_path
    from optimize.control.audit import key_fingerprint

    fingerprint = key_fingerprint(homed.key_path.read_bytes())
    assert json.loads(homed.path.read_bytes().splitlines()[0])["key_fingerprint"] == fingerprint
    root = homed.key_path.parent.parent.parent / "skills"
    anchor = json.loads(claim_path(root).read_text())["audit"]
    assert anchor == {"key": fingerprint, "seq": 5, "hash": homed.entries()[-1].hash}


def test_without_claims_the_first_lines_pin_still_catches_a_replaced_key(log):
    """A chain with no home (no claims to anchor it): the first line's fingerprint is what a
    re-MAC under a new key leaves behind, unless line 1 is rewritten too."""
    records = [json.loads(raw) for raw in log.path.read_bytes().splitlines()]
    _rewrite_with(log, b"\x09" * 32, records)
    result = log.verify()
    assert not result.ok and "its first line pins" in result.problem and result.bad_line == 1
