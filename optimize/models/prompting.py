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


def templates_digest(*prompts: str) -> str:
    """SHA-256 over the named templates (all of them when none is named): a cache keyed on it is
    invalidated by any edit to a prompt that conditions its answers."""
    import hashlib

    names = sorted(prompts) if prompts else sorted(p.stem for p in PROMPTS.glob("*.md"))
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + b"\0" + (PROMPTS / f"{name}.md").read_bytes() + b"\0")
    return digest.hexdigest()
