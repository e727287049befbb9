"""World facts in the Traces page's edit box: `step | label | value | quote…`, and an approval
through the real app keeping the quotes a person typed."""

from __future__ import annotations

import html

from tests.ui.test_replay import ui_world  # noqa: F401  (the fixture: a regress world behind the UI)
from ui.replay import fact_line, parse_facts


def test_a_fact_line_round_trips_bars_backslashes_and_line_breaks_in_its_fields():
    line = fact_line(1, "rate | EUR/USD", "1.0842", "at 1.0842 | ECB", "C:\\rates\\new", "two\nlines")
    assert "\n" not in line
    assert parse_facts(line) == [
        {
            "step": 1,
            "label": "rate | EUR/USD",
            "value": "1.0842",
            "quotes": ["at 1.0842 | ECB", "C:\\rates\\new", "two\nlines"],
        }
    ]
    assert parse_facts("1 | rate | 1.0842") == [{"step": 1, "label": "rate", "value": "1.0842", "quotes": []}]


def test_quotes_typed_in_the_edit_box_are_approved_and_shown_again(ui_world):  # noqa: F811
    w = ui_world.w
    stored = w.bless(w.record(), ['keeps "no fees"'])
    quote = next(line for line in stored.golden.answer.splitlines() if "1.0842" in line).strip()
    approved = ui_world.http.post(
        f"{ui_world.ui}/goldens/{stored.id}/approve",
        data={"criteria": 'keeps "no fees"', "facts": f"1 | rate | 1.0842 | {quote}"},
    )
    assert approved.status_code == 303
    (fact,) = w.admin.store.find(stored.id).review.facts
    assert (fact.value, fact.quotes) == ("1.0842", (quote,))
    page = ui_world.http.get(f"{ui_world.ui}/traces?skill=fx-quote").text
    assert html.escape(fact_line(1, "rate", "1.0842", quote), quote=False) in page
    wrong = ui_world.http.post(
        f"{ui_world.ui}/goldens/{stored.id}/approve",
        data={"criteria": 'keeps "no fees"', "facts": "1 | rate | 1.0842 | not in the answer"},
    )
    assert wrong.status_code == 422 and "is not in the answer" in wrong.text
