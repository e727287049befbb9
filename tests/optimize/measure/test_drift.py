"""World drift: where a fact's value sits now, and how a moved value is corroborated."""

from __future__ import annotations

import json
from typing import Any

import pytest

from optimize.measure.drift import ResearchCheck, World, WorldUnavailable, drift_cards, locate
from optimize.measure.goldens import Review, WorldFact, golden_from_trace
from optimize.models.traces import TraceRecord
from tests.optimize.search.test_research import fake_search


@pytest.mark.parametrize(
    ("old", "value", "new", "found"),
    [
        ("EUR/USD 1.0842 (ECB)", "1.0842", "EUR/USD 1.0910 (ECB)", "1.0910"),
        ("EUR/USD 1.0842 (ECB)", "1.0842", "EUR/USD 1,091.0 (ECB)", "1,091.0"),
        ('{"rate": 1.0842, "pair": "EUR/USD"}', "1.0842", '{"pair": "EUR/USD", "rate": 1.091}', "1.091"),
        ('{"quote": {"source": "ECB"}}', "ECB", '{"quote": {"source": "Fed"}}', "Fed"),
        ("status: green, checked", "green", "status: amber, checked", "amber"),
        ("EUR/USD 1.0842", "1.0842", "the service is down", None),
        # the value's neighbour moved too: it is found after the nearest text still there
        ("status: green, p99 210 ms", "210", "status: amber, p99 840 ms", "840"),
    ],
)
def test_a_facts_new_value_is_read_where_the_old_one_sat(old, value, new, found):
    assert locate(old, value, new) == found


class Source:
    """A world source answering from a list (the last answer repeats); counts its calls."""

    name = "test source"

    def __init__(self, *answers: str) -> None:
        self.answers, self.calls = list(answers), 0

    def covers(self, tool: str) -> bool:
        return tool == "get_rate"

    def call(self, tool: str, arguments: Any) -> str:
        self.calls += 1
        if not self.answers:
            raise WorldUnavailable("down")
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def golden():
    messages = (
        {"role": "user", "content": "Quote EUR in USD"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "get_rate", "arguments": '{"pair": "EUR/USD"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "EUR/USD 1.0842"},
    )
    record = TraceRecord(
        task="Quote",
        answer="1.0842",
        route="match",
        skill="fx",
        revision="ab" * 32,
        model="m",
        messages=messages,
    )
    return golden_from_trace(record), Review(
        facts=(WorldFact("f1", 1, "get_rate", "EUR/USD rate", "1.0842"),)
    )


def test_each_call_is_observed_once_per_evaluation_for_everyone_who_asks():
    source = Source("EUR/USD 1.0910")
    world = World([source])
    assert world.observe("get_rate", {"pair": "EUR/USD"}).value == "EUR/USD 1.0910"
    assert world.observe("get_rate", {"pair": " EUR/USD"}).value == "EUR/USD 1.0910"  # the same call
    assert world.observe("get_fees", {}) is None and source.calls == 1


def test_an_unchanged_fact_has_no_card_a_corroborated_change_is_world_moved():
    g, review = golden()
    assert drift_cards(g, review, World([Source("EUR/USD 1.0842")])) == []
    (card,) = drift_cards(g, review, World([Source("EUR/USD 1.0910")]))
    assert (card.old, card.new, card.ruling, card.corroboration) == (
        "1.0842",
        "1.0910",
        "world moved",
        "a second call agrees",
    )


def test_a_second_call_that_disagrees_or_fails_leaves_the_change_unconfirmed():
    g, review = golden()
    (flapping,) = drift_cards(g, review, World([Source("EUR/USD 1.0910", "EUR/USD 1.0877")]))
    assert flapping.ruling == "unconfirmed" and flapping.corroboration == "a second call says 1.0877"
    once = Source("EUR/USD 1.0910")
    world = World([once])
    world.observe("get_rate", g.steps[0].arguments)
    once.answers.clear()  # the second call fails
    (failed,) = drift_cards(g, review, world)
    assert failed.ruling == "unconfirmed" and failed.corroboration == "no second call answered"


def test_research_can_corroborate_and_only_the_facts_label_leaves_the_machine():
    g, review = golden()
    results = [{"url": "https://ecb.example/fx", "title": "ECB", "content": "Today EUR/USD is 1.0910."}]
    with fake_search(results=results) as search:
        research = ResearchCheck("tvly-key", search.url)
        (card,) = drift_cards(g, review, World([Source("EUR/USD 1.0910", "EUR/USD 1.0877")], research))
    assert card.ruling == "world moved" and "research found it (https://ecb.example/fx)" in card.corroboration
    (headers, body) = search.requests[0]
    assert body["query"] == "EUR/USD rate" and json.dumps(body).count("1.08") == 0
    with fake_search(results=[]) as search:
        (card,) = drift_cards(
            g, review, World([Source("EUR/USD 1.0910", "x")], ResearchCheck("k", search.url))
        )
    assert card.ruling == "unconfirmed" and "research did not find it" in card.corroboration
