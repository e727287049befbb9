"""Markdown as the review UI shows it: EVIDENCE.md and skill bodies rendered, never trusted.

CommonMark plus tables (markdown-it-py) with raw HTML off: a `<script>` or `<img onerror>` in a
skill body an agent wrote comes out as text, and markdown-it's link check drops `javascript:` and
`data:` URLs. The page's Content-Security-Policy forbids inline script besides. Images are not
fetched (the image rule is off: one shows as a plain link), so a body cannot make the reviewer's
browser call out by being looked at. `inline` renders one line of Ingot's own prose (a passport
cell's why, a refusal, a note naming a command in backticks) the same way, without a paragraph.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markupsafe import Markup

_MD = MarkdownIt("commonmark", {"html": False}).enable("table").disable("image")


def render(text: str) -> Markup:
    """`text` as safe HTML (every raw tag escaped)."""
    return Markup(_MD.render(text))  # noqa: S704 - markdown-it escapes everything with html off


def inline(text: object) -> Markup:
    """One line of `text` as safe inline HTML: `code` in backticks, *emphasis*, links; no block
    elements, every raw tag escaped (the `md` filter in templates)."""
    return Markup(_MD.renderInline(str(text)))  # noqa: S704 - escaped as above
