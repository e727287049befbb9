"""Every prompt Ingot sends lives as a file in `optimize/prompts/`; this renders them.

Placeholders are `{name}` (str.format); values are inserted verbatim, so skill bodies and answers
containing braces are safe. A missing file or placeholder is an error, not a silent blank.
"""

from __future__ import annotations

from pathlib import Path

PROMPTS = Path(__file__).with_name("prompts")


def render(prompt: str, **values: object) -> str:
    """`optimize/prompts/<prompt>.md` with `values` filled in, stripped."""
    return (PROMPTS / f"{prompt}.md").read_text().format(**values).strip()
