"""Goldens: what a recorded run keeps, what it refuses to become, how it is stored and drafted."""

from __future__ import annotations

import json
import stat

import pytest

from optimize.measure.golden_criteria import approved, draft_review
from optimize.measure.golden_store import GoldenStore
from optimize.measure.goldens import GoldenError, Review, golden_from_trace
from optimize.models.traces import LocalTraceStore, TraceRecord
from tests.scripted_llm import scripted_llm

SECRET = "sk-live-0123456789abcdefghijklmnop"
MESSAGES = (
    {
        "role": "system",
        "content": "You are quote-bot.\n<skill>\n1. Look up the rate with `get_rate`.\n</skill>",
    },
    {"role": "user", "content": "earlier question"},
    {"role": "assistant", "content": "earlier answer"},
    {"role": "user", "content": "Quote 250 EUR in USD for dana@example.com"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_rate", "arguments": '{"pair": "EUR/USD"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "EUR/USD 1.0842"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "send_quote", "arguments": f'{{"key": "{SECRET}"}}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "content": "sent"},
)


def trace(**overrides) -> TraceRecord:
    values = dict(
        task="Quote 250 EUR in USD for dana@example.com",
        answer="250 EUR is 271.05 USD at 1.0842.",
        route="match",
        skill="fx-quote",
        revision="ab" * 32,
        model="agent-model",
        harness="quote-bot",
        messages=MESSAGES,
        tools=({"type": "function", "function": {"name": "get_rate"}},),
    )
    return TraceRecord(**{**values, **overrides})


def test_a_golden_keeps_the_run_its_tool_calls_in_order_and_where_it_came_from():
    record = trace()
    golden = golden_from_trace(record)
    assert (golden.skill, golden.revision, golden.harness, golden.model) == (
        "fx-quote",
        "ab" * 32,
        "quote-bot",
        "agent-model",
    )
    assert golden.answer == "250 EUR is 271.05 USD at 1.0842." and golden.source["trace"] == record.id
    steps = golden.steps  # only the run's own calls, after the last user message
    assert [(s.index, s.name, s.result) for s in steps] == [
        (1, "get_rate", "EUR/USD 1.0842"),
        (2, "send_quote", "sent"),
    ]
    assert steps[0].arguments == {"pair": "EUR/USD"}


def test_goldens_are_redacted_like_traces_even_from_an_unredacted_store(tmp_path):
    store = LocalTraceStore(tmp_path / "traces.jsonl", redaction=False)
    store.append(trace())
    raw = store.read().records[0]
    assert SECRET in json.dumps(raw.as_json())  # the user turned trace redaction off
    stored = json.dumps(golden_from_trace(raw).content())
    assert SECRET not in stored and "dana@example.com" not in stored
    assert "[REDACTED:" in stored


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"route": "novel", "skill": None, "revision": None}, "was not served by a skill"),
        ({"answer": "", "tool_calls": ({"name": "get_rate"},)}, "it asked for tools: get_rate"),
        ({"messages": ()}, "has no transcript"),
        ({"errors": ("upstream answered 500",)}, "failed (upstream answered 500)"),
        ({"revision": "../../../etc/x"}, "not a skill revision Ingot serves"),
        ({"skill": "../fx"}, "not a skill revision Ingot serves"),
    ],
)
def test_a_trace_that_cannot_be_a_golden_says_why(overrides, says):
    with pytest.raises(GoldenError, match=r".*") as caught:
        golden_from_trace(trace(**overrides))
    assert says in str(caught.value)


def test_stored_private_content_addressed_and_checked_on_read(tmp_path):
    store = GoldenStore(tmp_path / "goldens")
    golden = golden_from_trace(trace())
    stored, created = store.add(golden, {"SKILL.md": b"x"}, Review())
    other, created_other = store.add(golden_from_trace(trace()), {"SKILL.md": b"x"}, Review())
    assert created and stored.path.name == f"{golden.digest}.json" and stored.id == f"g-{golden.digest[:12]}"
    assert created_other and other.path != stored.path  # another run of the same task is another golden
    for path in (stored.path, stored.path.with_suffix(".review.json")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "goldens" / "fx-quote").stat().st_mode) == 0o700
    assert store.add(golden, {"SKILL.md": b"x"}, Review())[1] is False  # the same run: already there
    assert store.revision_files("fx-quote", golden.revision) == {"SKILL.md": b"x"}
    text = stored.path.read_text().replace("271.05", "999.99")
    stored.path.write_text(text)
    found, problems = store.all("fx-quote")
    assert stored.id not in [s.id for s in found] and any("does not hash to its name" in p for p in problems)


def test_the_teacher_drafts_criteria_and_facts_that_hold_and_drops_the_rest():
    golden = golden_from_trace(trace())
    reply = {
        "criteria": ["states the converted amount", "names the rate used"],
        "world_facts": [
            {"step": 1, "label": "EUR/USD rate", "value": "1.0842"},
            {"step": 1, "label": "invented", "value": "1.2000"},
            {"step": 9, "label": "no such step", "value": "1"},
        ],
    }
    with scripted_llm() as server:
        server.add(model="teacher-model", reply=json.dumps(reply))
        review, calls = draft_review(server.client("teacher"), golden)
        prompt = server.chat_requests()[0].body["messages"][0]["content"]
    assert review.status == "teacher-drafted" and review.drafted_by == "teacher-model" and len(calls) == 1
    assert [c.text for c in review.criteria] == reply["criteria"]
    assert [(f.tool, f.value) for f in review.facts] == [("get_rate", "1.0842")]
    assert len(review.notes) == 2 and "'1.2000' is not in step 1's result" in review.notes[0]
    assert "Step 1: get_rate" in prompt and "EUR/USD 1.0842" in prompt
    assert "THE SKILL AS SERVED TO THIS RUN" in prompt and "1. Look up the rate with `get_rate`." in prompt


def test_the_goldens_format_becomes_a_criterion_without_a_model_unless_the_teacher_named_one():
    table = "| currency | amount |\n|---|---|\n| EUR | 250.00 |\n| USD | 271.05 |"
    golden = golden_from_trace(trace(answer=table))
    with scripted_llm() as server:
        server.add(model="teacher-model", reply=json.dumps({"criteria": ["states both amounts"]}))
        review, _ = draft_review(server.client("teacher"), golden)
        assert [c.text for c in review.criteria] == [
            "states both amounts",
            "answers as a markdown table (the golden's format)",
        ]
        assert review.notes == ("added without a model: the golden answers as a markdown table",)
        server.rules.insert(
            0,
            server.rules[0].__class__(
                model="teacher-model", reply=json.dumps({"criteria": ["a table of both"]})
            ),
        )
        named, _ = draft_review(server.client("teacher"), golden)
    assert [c.text for c in named.criteria] == ["a table of both"]  # the teacher named it: no duplicate
    plain, _ = draft_review_with(["states both amounts"], golden_from_trace(trace()))
    assert [c.text for c in plain.criteria] == ["states both amounts"]  # no format of its own


def draft_review_with(criteria: list[str], golden) -> tuple[Review, list]:
    with scripted_llm() as server:
        server.add(model="teacher-model", reply=json.dumps({"criteria": criteria}))
        return draft_review(server.client("teacher"), golden)


def test_a_person_approves_criteria_only_with_facts_that_hold():
    golden = golden_from_trace(trace())
    review = approved(
        golden, ["states the amount", " "], [{"step": 1, "label": "rate", "value": "1.0842"}], "ana"
    )
    assert review.status == "human-approved" and review.approved_by == "ana" and len(review.criteria) == 1
    with pytest.raises(GoldenError, match="not in step 1's result"):
        approved(golden, ["states the amount"], [{"step": 1, "label": "rate", "value": "1.2"}], "ana")
    with pytest.raises(GoldenError, match="at least one success criterion"):
        approved(golden, [], [], "ana")
