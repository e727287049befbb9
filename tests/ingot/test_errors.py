"""ingot/errors.py's helpers for one-line errors."""

from __future__ import annotations

from ingot.errors import first_line


def test_first_line_quotes_one_line_of_a_long_message_or_names_a_silent_exception():
    assert first_line(ValueError("bad token at 3\n  context\n  more")) == "bad token at 3"
    assert first_line(RuntimeError("x" * 500), 200) == "x" * 200
    assert first_line(KeyError()) == "KeyError"
    assert first_line(Exception("\n\n")) == "Exception"  # a blank message says nothing either
