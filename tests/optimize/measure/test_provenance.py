"""World values by provenance: every value of a golden's answer a recorded tool call supplied is
tracked to that call without a model; when the call answers differently now the value has moved
by construction; and a moved value is put back only where the answer restates it, never into a
line stating a rule on it."""

from __future__ import annotations

from typing import Any

import pytest

from optimize.measure.drift import World, WorldUnavailable, drift_cards
from optimize.measure.goldens import Review, WorldFact, golden_from_trace
from optimize.measure.level0 import Expected, level0, lost_commitments
from optimize.measure.provenance import moved_calls, restating, states_a_rule, supplied, value_cards
from optimize.measure.replay import ReplayRun, ReplayStep
from optimize.models.traces import TraceRecord

LATENCY = "checkout p99 95 ms, errors 0.4%"
OWNER = "owner: dana"


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def golden(answer: str, latency: str = LATENCY, task: str = "How is checkout doing?"):
    messages = (
        {"role": "user", "content": task},
        {
            "role": "assistant",
            "tool_calls": [
                call("a", "get_latency", '{"service": "checkout"}'),
                call("b", "get_owner", '{"service": "checkout"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": latency},
        {"role": "tool", "tool_call_id": "b", "content": OWNER},
    )
    record = TraceRecord(
        task=task,
        answer=answer,
        route="match",
        skill="latency",
        revision="ab" * 32,
        model="m",
        messages=messages,
    )
    return golden_from_trace(record)


class Source:
    """A live world for `get_latency`: answers in order, the last one repeated; None: down."""

    name = "test world"

    def __init__(self, *answers: str | None) -> None:
        self.answers, self.calls = list(answers), 0

    def covers(self, tool: str) -> bool:
        return tool == "get_latency"

    def call(self, tool: str, arguments: Any) -> str:
        self.calls += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer is None:
            raise WorldUnavailable("down")
        return answer


ANSWER = "Checkout p99 is 95 ms with 0.4% errors; owner dana.\nPage the owner if p99 > 95 ms."


def test_every_value_a_tool_supplied_is_tracked_to_its_call_and_none_the_user_said():
    values = {(v.value, v.step, v.tool) for v in supplied(golden(ANSWER))}
    # "checkout" is in the task (and the calls' arguments): the user said it, no tool supplied it.
    assert values == {
        ("p99", 1, "get_latency"),
        ("95", 1, "get_latency"),
        ("0.4%", 1, "get_latency"),
        ("dana", 2, "get_owner"),
    }
    (p99,) = [v for v in supplied(golden(ANSWER)) if v.value == "95"]
    # Where a moved 95 would go: the passage restating it, not the rule stating a threshold with it.
    assert p99.quotes == ("Checkout p99 is 95 ms with 0.4% errors; owner dana.",)


def test_a_value_the_user_or_the_call_said_first_is_not_the_tools():
    echoed = golden("Checkout p99 is 95 ms.", latency='{"service": "checkout", "p99_ms": 95}')
    assert [(v.value, v.recorded) for v in supplied(echoed)] == [("95", "95")]  # not "Checkout"


def test_a_value_the_skill_itself_says_is_not_restating_the_tool():
    answer = "Checkout p99 is 95 ms. Quote the SLO of 95 ms."
    skill = {"SKILL.md": b"1. Read `get_latency`.\n2. Quote the SLO of 95 ms.\n"}
    (value,) = [v for v in supplied(golden(answer), skill) if v.value == "95"]
    assert value.quotes == ("Checkout p99 is 95 ms.",)
    assert restating(answer, "95") == ("Checkout p99 is 95 ms.", "Quote the SLO of 95 ms.")


def test_a_value_whose_call_answers_differently_is_moved_by_construction_and_corroborated():
    g = golden(ANSWER)
    source = Source("checkout p99 130 ms, errors 0.4%")
    world = World([source])
    cards = value_cards(g, supplied(g), Review(), world)
    assert [(c.old, c.new, c.step, c.tool, c.ruling, c.listed) for c in cards] == [
        ("95", "130", 1, "get_latency", "world moved", False)
    ]
    assert cards[0].corroboration == "a second call agrees" and source.calls == 2  # one call, one check
    assert moved_calls(g, world) == [
        {"step": 1, "tool": "get_latency", "arguments": {"service": "checkout"}, "source": "test world"}
    ]
    # Unchanged: no card and no moved call; a recorded-only tool (get_owner) never moves.
    assert value_cards(g, supplied(g), Review(), World([Source(LATENCY)])) == []
    assert moved_calls(g, World([Source(LATENCY)])) == []
    flapping = value_cards(
        g, supplied(g), Review(), World([Source("checkout p99 130 ms, errors 0.4%", LATENCY)])
    )
    assert [(c.new, c.ruling) for c in flapping] == [("130", "unconfirmed")]


def test_a_listed_fact_keeps_its_own_card_and_provenance_adds_none_for_it():
    g = golden(ANSWER)
    review = Review(facts=(WorldFact("f1", 1, "get_latency", "checkout p99", "95"),))
    world = World([Source("checkout p99 130 ms, errors 0.4%")])
    assert value_cards(g, supplied(g), review, world) == []
    (card,) = drift_cards(g, review, world)
    assert (card.fact, card.old, card.new, card.step, card.listed) == ("f1", "95", "130", 1, True)


def replayed(g, revision: str, result: str, source: str = "sandbox") -> ReplayRun:
    steps = (ReplayStep(1, "get_latency", {"service": "checkout"}, result, source, 1),)
    return ReplayRun(g.id, revision, "x", steps, (), ())


def test_the_live_revision_at_its_recorded_bytes_counts_a_changed_sandbox_answer_as_the_world():
    g = golden(ANSWER)
    run = replayed(g, g.revision, "checkout p99 130 ms, errors 0.4%")
    (card,) = value_cards(g, supplied(g), Review(), World(), run)
    assert (card.old, card.new, card.ruling) == ("95", "130", "world moved")
    assert "recorded revision's bytes" in card.source and moved_calls(g, World(), run)[0]["step"] == 1
    # Other bytes (a candidate): the sandbox ran the candidate's scripts, so it may be the candidate.
    other = replayed(g, "cd" * 32, "checkout p99 130 ms, errors 0.4%")
    assert (
        value_cards(g, supplied(g), Review(), World(), other) == [] and moved_calls(g, World(), other) == []
    )
    # An answer replayed from the recording is the recording: it never moves.
    recorded = replayed(g, g.revision, "checkout p99 130 ms, errors 0.4%", source="recorded")
    assert value_cards(g, supplied(g), Review(), World(), recorded) == []


@pytest.mark.parametrize(
    "rule",
    [
        "Go only when the status is green.",
        "Hold the deploy unless the status is green.",
        "If the status is green then deploy.",
        "When the status is green, deploy.",
        "Page the on-call if p99 > 95 ms.",
        "Page the on-call when p99 exceeds 95 ms.",
        "Deploy as long as p99 stays at most 95 ms.",
        "p99 ≥ 95 ms pages the on-call.",
        "Keep p99 under 95 ms.",
        "Roll back after more than 95 ms of p99.",
        # Rules without a condition word (found by an outside review): obligations, "or more",
        # "within", "as soon as".
        "Deploy as soon as the status is green.",
        "Deploy requires a green status.",
        "Page the on-call engineer at a p99 of 95 ms or more.",
        "The p99 must stay within 95 ms.",
        "Never page for a p99 of 95 ms.",
    ],
)
def test_a_line_stating_a_rule_is_never_rewritten_by_a_moved_value(rule):
    assert states_a_rule(rule)
    answer = f"Status: green, p99 95 ms.\n{rule}"
    latency = "status: green, p99 95 ms"
    g = golden(answer, latency=latency)
    values = supplied(g)
    world = World([Source("status: amber, p99 130 ms")])
    now = {c.fact: c.new for c in value_cards(g, values, Review(), world)}
    assert sorted(now.values()) == ["130", "amber"]
    assert Expected(g, Review(), now, values).answer == f"Status: amber, p99 130 ms.\n{rule}"
    # A listed fact quoting the rule line itself does not rewrite it either (the drift bug).
    quoted = WorldFact("f1", 1, "get_latency", "status", "green", ("Status: green", rule))
    fact = Expected(g, Review(facts=(quoted,)), {"f1": "amber"})
    assert fact.answer == f"Status: amber, p99 95 ms.\n{rule}"


@pytest.mark.parametrize(
    "restated",
    [
        "Status: green, p99 95 ms.",
        "p99 went 95 -> 130 ms since the deploy.",
        "Status: amber <- green at 14:05.",
        "Build 12 of 12 passed.",
        "Checkout p99 is 95 ms and the status is green.",
        "The status was green at 14:05 with p99 95 ms.",
    ],
)
def test_a_line_restating_values_states_no_rule(restated):
    assert not states_a_rule(restated)


def test_the_replay_that_reports_the_value_now_passes_at_L0_and_keeps_the_rule():
    answer = "Checkout p99 is 95 ms with 0.4% errors; owner dana.\nPage the owner if p99 > 95 ms."
    g = golden(answer)
    values = supplied(g)
    now = {
        c.fact: c.new
        for c in value_cards(g, values, Review(), World([Source("checkout p99 130 ms, errors 0.4%")]))
    }
    expected = Expected(g, Review(), now, values)
    today = "Checkout p99 is 130 ms with 0.4% errors; owner dana.\nPage the owner if p99 > 95 ms."
    run = ReplayRun(g.id, g.revision, today, (), (), ())
    assert level0(expected, run, frozenset()).verdict == "pass"
    assert "was 95 when recorded; the world moved" in expected.facts_text()
    # Reworded, the value now keeps the commitment; the recorded value would too (either holds).
    reworded = ReplayRun(
        g.id,
        g.revision,
        "p99 for checkout: 130 ms, 0.4% errors, owner dana. Page if p99 > 95 ms.",
        (),
        (),
        (),
    )
    assert not [c for c in lost_commitments(expected, reworded).missing if c.kind == "number"]


@pytest.mark.parametrize("listed", [True, False])
def test_an_uncorroborated_move_caps_the_verdict_at_warn_listed_or_tracked_by_provenance(listed):
    """A value whose world flapped (the second call disagrees) was judged against a guess: no
    PASS, whether a world fact listed it or provenance alone tracked it (`ingot bench regress`'s
    wu-p99-flaps found the provenance card left out)."""
    from optimize.measure.replay_verdict import golden_verdict

    card = {"label": "value from get_latency", "old": "95", "new": "130", "tool": "get_latency", "step": 1}
    entry = {
        "verdict_found": "pass",
        "evidence": "L0",
        "drift": [{**card, "ruling": "unconfirmed", "listed": listed}],
    }
    verdict, why = golden_verdict(entry)
    assert verdict == "WARN" and "changed without corroboration (value from get_latency 95 -> 130)" in why
    moved = {**entry, "drift": [{**card, "ruling": "world moved", "listed": listed}]}
    assert golden_verdict(moved)[0] == "PASS"


def test_a_moved_value_never_stands_in_for_the_recorded_one_in_a_rule_line():
    """The status moved green -> amber: a line restating it may say amber, but a rule line that
    now says "go only when the status is amber" lost the golden's rule (`ingot bench regress`'s
    wr-amber-flip-rule passed L0 when the moved value kept any commitment)."""
    from optimize.measure.commitments import compare, fact_values

    golden = "Status: green, p99 210 ms.\nGive a go/no-go call: go only when the status is green."
    facts = fact_values(["status: green, p99 210 ms"], ["amber"])
    kept = "Status: amber, p99 210 ms.\nGive a go/no-go call: go only when the status is green."
    flipped = "Status: amber, p99 210 ms.\nGive a go/no-go call: go only when the status is amber."
    assert not compare(golden, kept, facts, {"green": "amber"}).lost
    lost = compare(golden, flipped, facts, {"green": "amber"})
    assert [(c.value, c.quote) for c in lost.missing] == [
        ("green", "Give a go/no-go call: go only when the status is green.")
    ], lost.labels()
