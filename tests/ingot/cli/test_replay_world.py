"""`ingot replay` of the live revision when the world moved and when it did not, as real
processes: a p99 latency of 95 ms in a golden's answer came from a tool (not a listed world fact)
and the tool now says 130. That is stale, never an incident: autonomy keeps its level and the
revision autonomy put live stays. A failure with every tool answering as recorded is an incident
(a model or harness change), and the output says which of the two it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from optimize.control.lock import change_lock
from tests.conftest import write_skill
from tests.ingot.cli.test_goldens import env_for
from tests.ingot.cli.test_main import ingot
from tests.optimize.conftest import ready_body
from tests.optimize.measure.test_regress import world_server
from tests.regress_sim import edited, regress_world

SKILL = "latency-check"
BODY = """# Latency check

1. Read the latency with `get_latency`.
2. Report the p99 latency in ms.
3. If the slo is breached, say that the on-call engineer must be paged.
"""
TASK = "How is checkout latency right now?"
RECORDED = "checkout p99 95 ms, slo met"


@contextmanager
def latency_world(tmp_path, library_factory) -> Iterator:
    """fx-quote's regress world with `latency-check` beside it, live at a revision autonomy
    promoted, its body class at level auto; `get_latency` answers RECORDED while recording."""
    write_skill(
        tmp_path / "skills",
        SKILL,
        "Reports a service's p99 latency and whether its SLO is breached. Use when asked how a "
        "service's latency is.",
        BODY,
    )
    with regress_world(tmp_path, library_factory) as w:
        first = w.control.live_revision(SKILL)
        candidate = edited(w.files(SKILL), "2. Report the p99", "2. Report the **p99**")
        change, _ = w.control.propose(SKILL, "optimizer", candidate, ready_body())
        w.control.approve(SKILL, "autonomy", change.id)  # as the autopilot does
        with change_lock(w.control.runs_dir):
            w.control.autonomy.allow(SKILL, "body", "auto", "operator")
            for _ in range(6):
                w.control.autonomy.record(SKILL, "body", "clean", "test", "earned")
        assert w.control.autonomy.trust(SKILL, "body").level == "auto"
        w.tools["get_latency"] = lambda _: RECORDED
        w.first = first
        yield w


def replay(w, tmp_path, url: str, *flags: str, **env: str):
    settings = env_for(w, REPLAY_WORLD_URL=url, REPLAY_WORLD_TOOLS="get_latency", **env)
    return ingot("replay", SKILL, *flags, cwd=tmp_path, env=settings)


def test_a_tool_value_the_world_moved_makes_the_golden_stale_never_an_incident(tmp_path, library_factory):
    with latency_world(tmp_path, library_factory) as w:
        live = w.control.live_revision(SKILL)
        # Two goldens of the same run: one judged by its commitments alone, and one whose criterion
        # quotes the recorded value (as a teacher drafts it), which no replay today can keep.
        held = w.bless(w.record(TASK, skill=SKILL), ['keeps "Report the p99 latency"'])
        pinned = w.bless(w.record(TASK + " Be brief.", skill=SKILL), ['keeps "p99 95 ms"'])
        assert not held.review.facts and not pinned.review.facts  # 95 is not a listed world fact
        levels = w.control.autonomy.table(SKILL)
        # The tool says 130 now, and the SLO is breached: the answer follows the world (it adds
        # the paging line), as the live revision should.
        with world_server(["checkout p99 130 ms, slo breached"]) as url:
            shown = replay(w, tmp_path, url)
            cell = json.loads(replay(w, tmp_path, url, "--json").stdout)
        assert shown.returncode == 1, shown.stdout + shown.stderr  # a golden is stale: re-bless it
        assert "incident" not in shown.stderr and cell["verdict"] == "WARN"
        entries = {e["id"]: e for e in cell["goldens"]}
        for stored in (held, pinned):
            entry = entries[stored.id]
            assert entry["ruling"] == "stale" and entry["moved_calls"][0]["tool"] == "get_latency"
            (card,) = entry["drift"]
            assert (card["old"], card["new"], card["step"], card["listed"], card["ruling"]) == (
                "95",
                "130",
                1,
                False,
                "world moved",
            )
            assert f"`ingot goldens retire {stored.id}" in entry["rebless"]
        # Judged against the value now, the first golden held; the second cannot hold, and that
        # is not blamed on the live revision.
        assert entries[held.id]["verdict"] == "PASS" and entries[held.id]["verdict_found"] == "pass"
        assert entries[pinned.id]["verdict_found"] != "pass"  # the judges saw "p99 95 ms" go
        assert entries[pinned.id]["verdict"] == "WARN"
        assert entries[pinned.id]["why"].startswith("stale: the world moved since it was recorded (")
        assert "value from get_latency 95 -> 130 (get_latency step 1)" in entries[pinned.id]["why"]
        text = shown.stdout
        assert 'drift: value from get_latency 95 -> 130 (step 1 get_latency({"for": ' in text
        assert "stale: the world moved, it held against the values now: no incident" in text
        assert "stale: the world moved, not blamed on the skill: no incident" in text
        assert f"re-bless: run {TASK!r} again through quote-bot (the proxy records it)" in text
        assert "`ingot bless TRACE_ID`" in text and "regressed (L" not in text  # not the verdict
        # (the judges' own rulings are named as such: "ruled by a model: ... ruled regressed")
        # No incident: autonomy keeps its levels and the revision autonomy promoted stays live.
        assert w.control.autonomy.table(SKILL) == levels
        assert w.control.live_revision(SKILL) == live != w.first
        actions = [(e.get("action"), str(e.get("reason"))) for e in w.control.history(SKILL)]
        assert not [a for a in actions if a[0] == "rollback" or "incident" in a[1]], actions


def test_a_failure_with_the_world_unchanged_is_an_incident_and_says_so(tmp_path, library_factory):
    with latency_world(tmp_path, library_factory) as w:
        golden = w.bless(w.record(TASK, skill=SKILL), ['keeps "Report the p99 latency"'])
        rule = w.server.rules[0].__class__(model="agent-model-2", reply="Latency is fine.")
        w.server.rules.insert(0, rule)  # the serving model changed and drops the report
        with world_server([RECORDED]) as url:
            broken = replay(w, tmp_path, url, AGENT_MODEL="agent-model-2")
        assert broken.returncode == 1 and "replay: fail" in broken.stdout, broken.stdout + broken.stderr
        said = (
            "the world is unchanged (every world tool answered as recorded): the serving model changed "
            "(recorded with agent-model, replayed with agent-model-2)"
        )
        assert f"incident: regressed; {said}" in broken.stdout
        assert f"{golden.id}" in broken.stdout and "stale" not in broken.stdout
        assert said in broken.stderr
        assert "every class is manual" in broken.stderr and "rolled back" in broken.stderr
        assert w.control.autonomy.trust(SKILL, "body").level == "manual"
        assert w.control.live_revision(SKILL) == w.first  # autonomy's promotion undone


def test_a_failure_the_world_move_does_not_explain_is_still_an_incident(tmp_path, library_factory):
    """The world moved and the serving model changed at once: the move would make the golden
    stale, but replayed once more with every call answered as recorded the live revision fails
    too, so the move does not explain it: an incident, naming both."""
    with latency_world(tmp_path, library_factory) as w:
        golden = w.bless(w.record(TASK, skill=SKILL), ['keeps "Report the p99 latency"'])
        rule = w.server.rules[0].__class__(model="agent-model-2", reply="Latency is fine.")
        w.server.rules.insert(0, rule)
        with world_server(["checkout p99 130 ms, slo breached"]) as url:
            broken = replay(w, tmp_path, url, AGENT_MODEL="agent-model-2")
            cell = json.loads(replay(w, tmp_path, url, "--json", AGENT_MODEL="agent-model-2").stdout)
        assert broken.returncode == 1 and "replay: fail" in broken.stdout, broken.stdout + broken.stderr
        (entry,) = cell["goldens"]
        assert entry["id"] == golden.id and entry["moved_calls"] and entry["verdict"] == "BLOCK"
        assert entry["recorded_world"]["verdict_found"] == "regressed" and entry["ruling"] == "regressed"
        said = (
            "the world moved (value from get_latency 95 -> 130 (get_latency step 1)), but replayed with "
            "every call answered as recorded it regressed too: the serving model changed (recorded with "
            "agent-model, replayed with agent-model-2)"
        )
        assert f"incident: regressed; {said}" in broken.stdout and said in broken.stderr
        assert "stale: the world moved" not in broken.stdout
        assert w.control.autonomy.trust(SKILL, "body").level == "manual"
        assert w.control.live_revision(SKILL) == w.first


def test_a_world_move_alone_is_stale_because_the_recorded_world_still_passes(tmp_path, library_factory):
    """The stale ruling rests on a replay, not on the move alone: with every call answered as
    recorded, the unchanged model passes the golden, so the difference today is the world's."""
    with latency_world(tmp_path, library_factory) as w:
        w.bless(w.record(TASK, skill=SKILL), ['keeps "p99 95 ms"'])
        with world_server(["checkout p99 130 ms, slo breached"]) as url:
            cell = json.loads(replay(w, tmp_path, url, "--json").stdout)
        (entry,) = cell["goldens"]
        assert entry["verdict_found"] != "pass" and entry["recorded_world"]["verdict_found"] == "pass"
        assert entry["ruling"] == "stale" and entry["verdict"] == "WARN"
        assert "95" in entry["recorded_world"]["answer"] and entry["serving_model"] == "agent-model"
