"""Whether a changed instruction is wording only, decided without a model.

A coverage ruling of "wording only" (coverage.py) stands only when this comparison agrees: the
instruction before and after names the same actions, objects and recipients (its content words,
stemmed, hyphenated ones split, a few listed synonyms taken as one), numbers, units, time zones,
formats, negations (how many), comparatives and quantifiers (relations.py). Each difference is
named, and replay_verdict.py then counts the instruction exercised only where a replay showed it,
whatever a model ruled. A heading is compared by its numbers and relations alone: it names a
section, and what the section asks is in the blocks under it.
Who gets what is compared too (`who_gets_what`): the same words can send other things to other
people. What it cannot do: know a synonym outside its table (it names the word as a difference,
so a rewording it does not know is a WARN a person reads, never a silent PASS); pair a recipient
it does not find as one (relations.py: "send legal the invoice" names none), which is then
compared by its words alone; and see a change of meaning that keeps every word and pairing
("go when green" -> "go when not red" aside).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from optimize.measure.commitments import stated
from optimize.measure.passages import NEGATIONS, STOP, number, stem, tokens
from optimize.measure.relations import RELATION_WORDS, Party, comparatives, find_parties, lemma, quantifiers

# Words an instruction may swap without changing what it asks: each group is read as its first.
SYNONYMS = (
    "stay remain",
    "give provide state say",
    "show display present",
    "use employ",
    "check verify",
    "notify inform tell",
    "begin start",
    "finish complete",
    "list enumerate",
    "pick choose select",
    "need require",
    "ask request",
)
_SAME = {stem(w): stem(group.split()[0]) for group in SYNONYMS for w in group.split()}


def _negations(text: str) -> list[str]:
    return [t for t in tokens(text.casefold()) if t in NEGATIONS or t.endswith(("n't", "n’t"))]


def _words(text: str) -> dict[str, str]:
    """Canonical word -> the word as written, for the content words that are neither a number, a
    unit, a time zone, a format, a negation nor part of a comparative or quantifier (those are
    compared on their own)."""
    out: dict[str, str] = {}
    apart = {s.casefold() for kind, _, s in stated(text, frozenset()) if kind in ("unit", "zone", "format")}
    for token in tokens(text):
        if token.casefold() in apart:
            continue
        if any(ch.isdigit() for ch in token) or not token[0].isalpha():
            continue
        for part in token.split("-"):
            low = part.casefold()
            if not low or low in STOP or low in NEGATIONS or low in RELATION_WORDS or len(low) < 2:
                continue
            base = stem(lemma(low))  # "paged" is "page": the passive names the same action
            out.setdefault(_SAME.get(base, base), token)
    return out


def _kinds(text: str) -> dict[str, dict[str, str]]:
    """What is compared, kind -> canonical value -> as written."""
    found: dict[str, dict[str, str]] = {
        "numbers": {},
        "units": {},
        "time zones": {},
        "formats": {},
        "comparatives": {},
        "quantifiers": {},
    }
    for kind, value, said in stated(text, frozenset()):
        key = {"number": "numbers", "unit": "units", "zone": "time zones", "format": "formats"}.get(kind)
        if key:
            found[key].setdefault(value, said)
    for token in tokens(text):
        if any(ch.isdigit() for ch in token):
            found["numbers"].setdefault(number(token) or token.casefold(), token)
    for value, said in comparatives(text):
        found["comparatives"].setdefault(value, said)
    for value, said in quantifiers(text, with_any=True):
        found["quantifiers"].setdefault(value, said)
    return found


def _received(text: str) -> dict[str, list[Party]]:
    """Each word of a recipient (stemmed) -> the recipients it is part of, in `text`."""
    found: dict[str, list[Party]] = {}
    for party in find_parties(text):
        if party.kind == "recipient":
            for word in party.value.split():
                found.setdefault(word, []).append(party)
    return found


def _how(party: Party) -> tuple[str, bool]:
    verb = stem(party.verb)
    return _SAME.get(verb, verb), party.negated


def _delivery(party: Party) -> str:
    thing = f" {' '.join(party.thing)}" if party.thing else ""
    return f"{'not ' if party.negated else ''}{party.verb}{thing} -> {party.said}"


def who_gets_what(old: str, new: str) -> str | None:
    """Whether the same recipients get the same things the same way: for each recipient both
    name, the verb that reaches them (synonyms as one), whether it is negated, and what is sent
    (when both say it, sharing a word). A word bag cannot see a swap ("page the engineer, email
    the manager" -> "email the engineer, page the manager"); this can."""
    before, after = _received(old), _received(new)
    changed = []
    for word in sorted(set(before) & set(after)):
        a, b = before[word], after[word]
        things_a = {stem(w.casefold()) for p in a for w in p.thing}
        things_b = {stem(w.casefold()) for p in b for w in p.thing}
        other_things = bool(things_a and things_b and not things_a & things_b)
        if {_how(p) for p in a} != {_how(p) for p in b} or other_things:
            changed.append(word)
    if not changed:
        return None
    gone = _listed(_delivery(p) for word in changed for p in before[word])
    came = _listed(_delivery(p) for word in changed for p in after[word])
    return f"who gets what: {gone} => {came}"


def _listed(said: Iterable[str]) -> str:
    return ", ".join(dict.fromkeys(said)) or "nothing"


def _plain(block: str) -> str:
    """A block without its list markers (a renumbered step states no other number)."""
    return "\n".join(re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", line) for line in block.splitlines())


def differences(old: str, new: str) -> tuple[str, ...]:
    """What the change from `old` to `new` changes besides wording, one line a kind ("comparatives:
    under -> over"); empty when the comparison finds the two the same instruction."""
    out = []
    heading = all(re.match(r"^\s*#{1,6}\s", t) for t in (old, new) if t.strip())
    old, new = _plain(old), _plain(new)
    before, after = _kinds(old), _kinds(new)
    for kind in before:
        a, b = before[kind], after[kind]
        if set(a) != set(b):
            gone = [a[k] for k in a if k not in b]
            came = [b[k] for k in b if k not in a]
            out.append(f"{kind}: {_listed(gone)} -> {_listed(came)}")
    no, yes = _negations(old), _negations(new)
    if len(no) != len(yes):
        out.append(f"negations: {_listed(no)} -> {_listed(yes)}")
    if not heading:
        a, b = _words(old), _words(new)
        if set(a) != set(b):
            gone = [a[k] for k in a if k not in b]
            came = [b[k] for k in b if k not in a]
            out.append(f"actions, objects or recipients: {_listed(gone)} -> {_listed(came)}")
        elif swapped := who_gets_what(old, new):  # the same words, put together otherwise
            out.append(swapped)
    return tuple(out)
