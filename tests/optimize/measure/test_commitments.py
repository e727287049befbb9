"""What L0 finds a golden answer committed to, and which of it a replay lost: commitments (numbers,
units, time zones, decisions, negations, facts, format, passages) survive or not; wording is free."""

from __future__ import annotations

from optimize.measure.commitments import commitments_of, compare, fact_values
from optimize.measure.passages import passages, shape

GOLDEN = """Look up the rate with get_rate: EUR/USD 1.0842 (ECB fixing)
State the amount in both currencies, rounded to cents.
Mention that transfers under 1000 EUR have no fees.
Give the quote time in UTC.
Give a go/no-go call: go only when the status is green."""
FACTS = fact_values(["EUR/USD 1.0842 (ECB fixing)", "status: green, p99 210 ms"])


def lost(replay: str, answer: str = GOLDEN, **kw) -> list[tuple[str, str]]:
    return [(c.kind, c.value) for c in compare(answer, replay, FACTS, **kw).missing]


def test_each_kind_of_commitment_is_found_with_the_passage_it_is_in():
    found = {(c.kind, c.value, c.passage) for c in commitments_of(GOLDEN, FACTS)}
    assert {
        ("number", "1.0842", 1),
        ("unit", "cent", 2),
        ("number", "1000", 3),
        ("unit", "eur", 3),
        ("negation", "negated", 3),
        ("zone", "utc", 4),
        ("decision", "go", 5),
        ("decision", "no-go", 5),
        ("fact", "green", 5),
        ("negation", "affirmative", 2),
    } <= found
    assert [c.id for c in commitments_of(GOLDEN, FACTS)][:2] == ["k1", "k2"]
    assert {"green", "210", "1.0842"} <= FACTS and "status" not in FACTS  # a key is not a value


def test_wording_order_and_markdown_are_free():
    reworded = """- **Give** the amount in the two currencies, to the nearest cent.
- Give a go/no-go decision: go only when the status is green.
- Look up the rate with `get_rate`: EUR/USD 1.0842 (ECB fixing)
- Mention that no fee applies to transfers under 1,000 EUR.
- Give the quote time in UTC."""
    assert lost(reworded) == []  # the golden has no format of its own: bullets are wording here
    assert lost(GOLDEN.replace("\n", "\n\n")) == []


def test_a_changed_number_unit_time_zone_or_negation_is_lost_though_every_other_word_stays():
    assert lost(GOLDEN.replace("under 1000 EUR", "under 10 EUR")) == [("number", "1000")]
    assert lost(GOLDEN.replace("rounded to cents", "rounded to whole units")) == [("unit", "cent")]
    assert lost(GOLDEN.replace("time in UTC", "time in local time")) == [("zone", "utc")]
    assert lost(GOLDEN.replace("have no fees", "pay fees")) == [("negation", "negated")]
    assert lost(GOLDEN.replace("State the amount", "Never state the amount")) == [("negation", "affirmative")]


def test_a_fact_changed_in_its_passage_is_lost_even_when_the_word_is_still_elsewhere():
    answer = "Check the service: status: green, p99 210 ms\n" + GOLDEN.splitlines()[-1]
    flipped = answer.replace("go only when the status is green", "go unless the status is red")
    assert ("fact", "green") in lost(flipped, answer)  # "green" is still in the first line


def test_a_dropped_passage_is_lost_with_what_only_it_said():
    dropped = lost("\n".join(line for line in GOLDEN.splitlines() if "fees" not in line))
    assert ("passage", "mention that transfers under 1000 eur have no fees.") in dropped
    assert ("number", "1000") in dropped and ("negation", "negated") in dropped
    assert ("fact", "green") not in dropped


def test_the_answers_format_is_a_commitment():
    table = "| item |\n|---|\n| Status green |\n| Latency 210 ms |"
    assert shape(table) == "a markdown table" and shape('{"a": [1]}') == "a JSON object"
    assert shape("- a\n- b") == "a bulleted list" and shape("1. a\n2. b") == "a numbered list"
    assert lost("item\nStatus green\nLatency 210 ms", table) == [("shape", "a markdown table")]
    assert (
        lost(
            '{"answer": ["Status green", "Latency 210 ms"]}', '{"answer": ["Status green", "Latency 210 ms"]}'
        )
        == []
    )
    assert [p.text for p in passages('{"answer": ["Status green.", "Latency 210 ms"]}')] == [
        "Status green.",
        "Latency 210 ms",
    ]


def test_a_moved_world_fact_counts_at_its_value_now():
    moved = GOLDEN.replace("1.0842", "1.0910")
    assert lost(moved) == [("number", "1.0842")]
    assert lost(moved, moved={"1.0842": "1.0910"}) == []


def test_the_judges_read_missing_commitments_first_with_the_golden_passage_to_cite():
    comparison = compare(GOLDEN, GOLDEN.replace("under 1000 EUR", "under 10 EUR"), FACTS)
    first = comparison.text().splitlines()[0]
    assert first.startswith("- k") and "[number] 1000" in first and "| MISSING from" in first
    assert "golden: 'Mention that transfers under 1000 EUR have no fees.'" in first
    assert comparison.labels() == [
        f"{comparison.missing[0].id}: number '1000' missing (golden: "
        "'Mention that transfers under 1000 EUR have no fees.')"
    ]
    assert compare(GOLDEN, GOLDEN, FACTS).text().count("MISSING") == 0
