"""A world fact's quotes: where in the golden's answer a moved value is replaced, and only there.

Regression test for the drift bug: a moved fact used to be substituted by a text replace over the
whole expected answer, so "green" -> "amber" also rewrote a rule the answer quoted."""

from __future__ import annotations

import json

import pytest

from optimize.measure.golden_criteria import approved, draft_review
from optimize.measure.golden_store import GoldenStore
from optimize.measure.goldens import Criterion, GoldenError, Review, WorldFact, golden_from_trace
from optimize.measure.level0 import Expected, level0
from optimize.measure.replay import ReplayRun
from optimize.models.traces import TraceRecord
from tests.scripted_llm import scripted_llm


def golden_answering(answer: str, result: str = "status: green, p99 205 ms, build 12"):
    messages = (
        {"role": "user", "content": "May we deploy payments?"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "get_service_status", "arguments": '{"service": "payments"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": result},
    )
    record = TraceRecord(
        task="May we deploy payments?",
        answer=answer,
        route="match",
        skill="deploy-check",
        revision="ab" * 32,
        model="m",
        messages=messages,
    )
    return golden_from_trace(record)


def status(value: str = "green", *quotes: str, fact_id: str = "f1") -> WorldFact:
    return WorldFact(fact_id, 1, "get_service_status", "payments status", value, quotes)


def expected(answer: str, facts: tuple[WorldFact, ...], now: dict[str, str]) -> Expected:
    return Expected(golden_answering(answer), Review(facts=facts), now)


def test_a_moved_fact_is_replaced_inside_its_quote_and_nowhere_else():
    answer = "Status: green. Rule: go only when green."
    moved = expected(answer, (status("green", "Status: green"),), {"f1": "amber"})
    assert moved.answer == "Status: amber. Rule: go only when green."
    assert "was green when recorded; the world moved" in moved.facts_text()


def test_l0_passes_the_replay_that_reports_the_new_value_and_keeps_the_rule():
    moved = expected(
        "Status: green. Rule: go only when green.", (status("green", "Status: green"),), {"f1": "amber"}
    )

    def replay(answer: str) -> ReplayRun:
        return ReplayRun(moved.golden.id, "cd" * 32, answer, (), (), ())

    passed = level0(moved, replay("Status: amber. Rule: go only when green."), frozenset())
    assert passed is not None and passed.verdict == "pass"
    # The answer a whole-text replace expected (the rule rewritten) is not the golden's any more.
    assert level0(moved, replay("Status: amber. Rule: go only when amber."), frozenset()) is None


@pytest.mark.parametrize(
    ("answer", "value", "quote", "now", "becomes"),
    [
        (
            "Status: green, a greenfield service.",
            "green",
            "Status: green, a greenfield",
            "amber",
            "Status: amber, a greenfield service.",
        ),
        (
            "Build 12 of 125 passed (12.5%).",
            "12",
            "Build 12 of 125 passed (12.5%)",
            "13",
            "Build 13 of 125 passed (12.5%).",
        ),
        ("Build 12.", "12", "Build 12.", "13", "Build 13."),  # a full stop after it is not a decimal
        ("Status: green.", "green", "Status: greenish", "amber", "Status: green."),  # quote not in answer
    ],
)
def test_a_value_inside_a_longer_word_or_number_is_not_replaced(answer, value, quote, now, becomes):
    assert expected(answer, (status(value, quote),), {"f1": now}).answer == becomes


def test_every_occurrence_of_a_quote_is_updated_and_two_moves_do_not_chain():
    answer = "Payments: green. Search: amber. Payments: green."
    facts = (
        status("green", "Payments: green", fact_id="f1"),
        WorldFact("f2", 1, "get_service_status", "search status", "amber", ("Search: amber",)),
    )
    moved = expected(answer, facts, {"f1": "amber", "f2": "red"})
    assert moved.answer == "Payments: amber. Search: red. Payments: amber."


def test_a_fact_without_quotes_leaves_the_answer_as_recorded_but_the_judges_learn_it_moved():
    answer = "Status: green. Rule: go only when green."
    moved = expected(answer, (status("green"),), {"f1": "amber"})
    assert moved.answer == answer
    assert moved.facts_text() == (
        "- f1: payments status = amber (from step 1, get_service_status) "
        "(was green when recorded; the world moved)"
    )


def test_the_teacher_drafts_quotes_and_a_quote_not_stating_the_value_is_dropped_with_a_note():
    golden = golden_answering("Status: green. Rule: go only when green.")
    quotes = ["Status: green", "Status: amber", "Rule: go only when"]
    reply = {
        "criteria": ["says whether to deploy"],
        "world_facts": [
            {"step": 1, "label": "payments status", "value": "green", "quotes": quotes},
            {"step": 1, "label": "invented", "value": "purple", "quotes": ["Status: green"]},
        ],
    }
    with scripted_llm() as server:
        server.add(model="teacher-model", reply=json.dumps(reply))
        review, _ = draft_review(server.client("teacher"), golden)
        prompt = server.chat_requests()[0].body["messages"][0]["content"]
    assert '"quotes"' in prompt
    (fact,) = review.facts
    assert (fact.value, fact.quotes) == ("green", ("Status: green",))
    assert review.notes == (
        "dropped f2: 'purple' is not in step 1's result",
        "dropped a quote of f1 (payments status): 'Status: amber' is not in the answer "
        "(quote it exactly, as one passage)",
        "dropped a quote of f1 (payments status): 'Rule: go only when' does not contain 'green' "
        "as a whole word or number",
    )


def test_a_person_may_give_quotes_and_is_refused_one_that_is_not_in_the_answer():
    golden = golden_answering("Status: green. Rule: go only when green.")
    fact = {"step": 1, "label": "payments status", "value": "green"}
    review = approved(golden, ["says whether to deploy"], [{**fact, "quotes": ["Status: green"]}], "ana")
    assert review.facts[0].quotes == ("Status: green",)
    one = approved(golden, ["x"], [{**fact, "quotes": " Status: green "}], "ana")  # one passage, as text
    assert one.facts[0].quotes == ("Status: green",)
    assert approved(golden, ["x"], [fact], "ana").facts[0].quotes == ()  # quotes are optional
    with pytest.raises(GoldenError, match="'Status: grey' is not in the answer"):
        approved(golden, ["x"], [{**fact, "quotes": ["Status: grey"]}], "ana")
    with pytest.raises(GoldenError, match="quotes must be a list of passages"):
        approved(golden, ["x"], [{**fact, "quotes": {"a": 1}}], "ana")


def test_a_review_without_quotes_keeps_the_digest_it_had_before_facts_had_quotes():
    review = Review(
        (Criterion("c1", "says the status"),),
        (WorldFact("f1", 1, "ci_status", "CI status", "green"),),
        "human-approved",
    )
    # Computed with the code before quotes existed: cached controls and bundles are keyed on it.
    assert review.digest == "e7d75921ee65a3ca6262e677ef80a8efa55c838d205bc2acb636ba77725a737a"
    quoted = Review(review.criteria, (WorldFact("f1", 1, "ci_status", "CI status", "green", ("CI: green",)),))
    assert quoted.digest != review.digest  # a quote changes what the replay is judged against


def test_quotes_are_stored_with_the_review_and_an_older_review_file_without_them_loads(tmp_path):
    store = GoldenStore(tmp_path / "goldens")
    golden = golden_answering("Status: green. Rule: go only when green.")
    review = Review(facts=(status("green", "Status: green"),))
    stored, _ = store.add(golden, {"SKILL.md": b"x"}, review)
    assert store.load(stored.path).review == review
    older = review.to_json()
    del older["facts"][0]["quotes"]
    stored.path.with_suffix(".review.json").write_text(json.dumps(older))
    assert store.load(stored.path).review.facts == (status("green"),)
