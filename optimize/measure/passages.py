"""An answer read as passages and words: what commitments.py and coverage.py compare.

An answer's passages are its lines (a JSON answer's strings, a table's rows) split into
sentences, list markers and table pipes left out; its shape is its structural format (JSON, a
markdown table, a numbered or bulleted list). Words are tokens (numbers with their signs,
identifiers with digits, clock times, words with their hyphens and apostrophes); a passage's
content is its stemmed words without stop words, and its numbers. Plain text rules, no model
and no language model's idea of meaning: a synonym is another word here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


def words(text: str) -> frozenset[str]:
    """A vocabulary written as one space-separated string."""
    return frozenset(text.split())


TOKEN = re.compile(
    r"\d{1,2}:\d{2}(?::\d{2})?"  # a clock time
    r"|[#$€£¥]?\d[\d,]*(?:\.\d+)*%?"  # a number, with a sign or a percent
    r"|[A-Za-z][A-Za-z0-9]*(?:['’-][A-Za-z0-9]+)*(?:\.\d+)*"  # a word: don't, no-go, p99, CHG-2291
    r"|[%$€£¥]"
)
STOP = words(
    "a an the and or of to in on at for with by from as is are be was were been it its this that "
    "these those your you we our they their them i me my he she his her if then than so but into "
    "onto per via each any all both there here what which who whom when where how do does did has "
    "have had will would can could should may might must shall also just very"
)
NEGATIONS = words(
    "not no never none nobody nothing nowhere neither nor without unless except cannot avoid "
    "avoiding refrain forbid forbidden prohibit prohibited"
)


@dataclass(frozen=True)
class Passage:
    index: int  # 1-based, in the answer's order
    text: str  # what is compared (markers stripped)
    quote: str  # an exact piece of the answer (what a judge can cite)


def shape(text: str) -> str | None:
    """The answer's structural format, if it has one: JSON, a table, numbered steps, bullets."""
    stripped = text.strip()
    if stripped[:1] in "{[":
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, dict | list):
            return "a JSON " + ("object" if isinstance(data, dict) else "array")
    lines = [line for line in stripped.splitlines() if line.strip()]
    rows = sum(bool(re.match(r"^\s*\|.*\|\s*$", line)) for line in lines)
    if rows >= 2 and any(re.match(r"^\s*\|?\s*:?-{3,}", line) for line in lines):
        return "a markdown table"
    if sum(bool(re.match(r"^\s*\d+[.)]\s+\S", line)) for line in lines) >= 2:
        return "a numbered list"
    if sum(bool(re.match(r"^\s*[-*+•]\s+\S", line)) for line in lines) >= 2:
        return "a bulleted list"
    return None


def passages(text: str) -> list[Passage]:
    """The answer's passages: its lines (a JSON answer's strings, a table's rows), each split into
    sentences; list markers and table pipes are left out of what is compared."""
    stripped = text.strip()
    pieces: list[str] = []
    if shape(stripped) in ("a JSON object", "a JSON array"):
        pieces = [s for s in strings(json.loads(stripped)) if s.strip()]
    else:
        for line in stripped.splitlines():
            if re.match(r"^\s*\|?\s*:?-{3,}[-|: ]*$", line):
                continue  # a table's separator row
            pieces.extend(re.split(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(*])", line.strip()))
    found = []
    for piece in (p.strip() for p in pieces):
        clean = re.sub(r"^(?:[-*+•]|\d+[.)])\s+", "", piece)
        clean = " ".join(clean.replace("|", " ").replace("**", "").replace("`", "").split())
        if clean:
            found.append(Passage(len(found) + 1, clean, piece))
    return found


def strings(data: Any, key: str = "") -> Iterable[str]:
    if isinstance(data, Mapping):
        for k, v in data.items():
            yield from strings(v, str(k))
    elif isinstance(data, list):
        for v in data:
            yield from strings(v, key)
    elif isinstance(data, str):
        yield data
    elif data is not None:
        yield f"{key}: {data}" if key else str(data)


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def number(token: str) -> str | None:
    """A number token's canonical value ("1,000" -> "1000", "17.50%" -> "17.5"), else None."""
    raw = token.lstrip("#$€£¥").rstrip("%")
    if not raw or not raw[0].isdigit():
        return None
    if ":" in raw:
        return raw
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", raw):
        raw = raw.replace(",", "")
    if re.fullmatch(r"\d+\.\d+", raw):
        raw = raw.rstrip("0").rstrip(".")
    return raw


def stem(word: str) -> str:
    word = word.casefold().removesuffix("'s").removesuffix("’s")
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    for suffix in ("ingly", "edly", "ing", "ed", "ly", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content(text: str) -> set[str]:
    """A passage's content words (stemmed, no stop words) and numbers: what alignment compares."""
    found = set()
    for token in tokens(text):
        value = number(token)
        if value is not None:
            found.add(value)
        elif token[0].isalpha() and token.casefold() not in STOP and len(token) > 1:
            found.add(stem(token))
    return found


def negated(text: str) -> bool:
    for token in tokens(text.casefold()):
        if token in NEGATIONS or token.endswith(("n't", "n’t")):
            return True
        if token.endswith(("less", "lessly")) and token not in ("unless", "less", "bless", "nevertheless"):
            return True
    return False


# What makes a passage a rule (provenance.py never writes a moved value into one, and
# commitments.py never lets a moved value stand in for a rule's recorded one).
CONDITIONS = words("if unless when whenever until only otherwise else provided providing once")
COMPARATIVES = words("above below over under exceed exceeds exceeded exceeding beyond within before after")
# Obligations state a rule as well as conditions do ("deploy requires a green status", "the p99
# must stay within 95 ms"): over-reading one costs a substitution, missing one rewrites a rule.
OBLIGATIONS = words("must should shall require requires required need needs needed never always")
RULE_PHRASES = re.compile(
    r"\b(?:as long as|as soon as|in case|at (?:least|most)|up to|prior to"
    r"|(?:more|less|fewer|greater|higher|lower|older|newer|younger|longer|shorter|bigger|smaller"
    r"|earlier|later|cheaper) than|no (?:more|later|earlier|less) than|(?:or|and) (?:more|less|fewer"
    r"|above|below|over|under|higher|lower))\b",
    re.I,
)
# A comparison sign; an arrow ("->", "=>", "<-") restates a change, it states no condition.
COMPARISON = re.compile(r"(?<![-=])>|<(?!-)|[≤≥]")


def states_a_rule(text: str) -> bool:
    """Whether a passage states a condition or rule ("go only when the status is green",
    "unless", "if ... then", "page if p99 > 95 ms", "at least 3", "95 ms or more", "deploy
    requires a green status", "as soon as"): a value in it is a threshold or a condition the
    skill set, not a restatement of what a tool returned."""
    low = {t.casefold() for t in tokens(text)}
    return bool(
        low & (CONDITIONS | COMPARATIVES | OBLIGATIONS)
        or RULE_PHRASES.search(text)
        or COMPARISON.search(text)
    )
