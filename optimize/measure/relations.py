"""Comparatives, quantifiers, recipients and owners in a passage of text, found without a model.

What commitments.py (what an answer committed to, L0) and wording.py (whether a changed
instruction is wording only) share. A comparative is a relation to a quantity or an order, read
as one canonical relation: "under 1000" and "less than 1000" are both "below", "over 1000" is
"above", then "at least", "at most", "before", "after". A bare "under", "over", "above",
"below", "within", "up to" or "exceeds" counts only before a quantity (a number, a number word
or a time unit within three words), so "group them under Added" states none. A quantifier is
each / every / all (one canonical "every"; "both" is left out: "the two" says it as well),
only, none, and for instructions any. A recipient is who a message or a task goes to: the
words after a verb that takes one (page, notify, ask, ...) or after a preposition of a verb
that sends (send ... to, post in, share with); an owner is named by "owner", "owned by",
"assigned to" and the like.
A recipient also comes before such a verb in the passive ("the on-call engineer was paged",
"the customer must be notified"): the words before a form of "be" or "get" (and any modal or
adverb in between) that precede the verb's participle.
What it cannot do: parse a sentence. It reads word sequences, so a recipient further from its
verb ("the engineer, who is on call, was paged") is not found as one, and a word outside its
tables is not a relation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from optimize.measure.passages import STOP, TOKEN, stem, tokens, words

# (words, canonical relation, whether a quantity must follow), longest first where they overlap.
_COMPARATIVES: tuple[tuple[tuple[str, ...], str, bool], ...] = (
    (("no", "more", "than"), "at most", False),
    (("not", "more", "than"), "at most", False),
    (("no", "later", "than"), "before", False),
    (("no", "less", "than"), "at least", False),
    (("not", "less", "than"), "at least", False),
    (("no", "fewer", "than"), "at least", False),
    (("no", "earlier", "than"), "after", False),
    (("at", "least"), "at least", False),
    (("at", "most"), "at most", False),
    (("or", "more"), "at least", False),
    (("and", "over"), "at least", False),
    (("and", "above"), "at least", False),
    (("or", "less"), "at most", False),
    (("or", "fewer"), "at most", False),
    (("and", "under"), "at most", False),
    (("and", "below"), "at most", False),
    (("up", "to"), "at most", True),
    (("more", "than"), "above", False),
    (("greater", "than"), "above", False),
    (("higher", "than"), "above", False),
    (("larger", "than"), "above", False),
    (("less", "than"), "below", False),
    (("fewer", "than"), "below", False),
    (("lower", "than"), "below", False),
    (("smaller", "than"), "below", False),
    (("older", "than"), "above", False),
    (("longer", "than"), "above", False),
    (("bigger", "than"), "above", False),
    (("newer", "than"), "below", False),
    (("younger", "than"), "below", False),
    (("shorter", "than"), "below", False),
    (("cheaper", "than"), "below", False),
    (("earlier", "than"), "before", False),
    (("prior", "to"), "before", False),
    (("later", "than"), "after", False),
    (("before",), "before", False),
    (("after",), "after", False),
    (("over",), "above", True),
    (("above",), "above", True),
    (("exceeds",), "above", True),
    (("exceeding",), "above", True),
    (("exceed",), "above", True),
    (("beyond",), "above", True),
    (("under",), "below", True),
    (("below",), "below", True),
    (("within",), "at most", True),
)
_QUANTITY = words(
    "one two three four five six seven eight nine ten eleven twelve dozen hundred thousand million "
    "second seconds minute minutes hour hours day days week weeks month months year years"
)
QUANTIFIERS = {
    **dict.fromkeys(("each", "every", "all", "everyone", "everybody", "everything"), "every"),
    **dict.fromkeys(("only", "solely", "exclusively"), "only"),
    **dict.fromkeys(("none", "nobody", "nothing"), "none"),
    **dict.fromkeys(("any", "anyone", "anybody", "anything"), "any"),
}
# The words comparatives and quantifiers are made of (coverage.py compares them like content words).
RELATION_WORDS = frozenset(w for phrase, _, _ in _COMPARATIVES for w in phrase) | frozenset(QUANTIFIERS)

# Verbs whose object is who receives (page the on-call engineer: not after a determiner, where the
# word is a noun), and verbs that send to whoever follows one of their prepositions (post in the
# ops channel, give the quote to Dana).
_TO_WHOM = words("page notify email e-mail ping alert tell inform ask contact remind warn cc consult invite")
_SENDING = {
    **dict.fromkeys(
        words(
            "send forward escalate report hand submit assign give deliver route pass mail write reply "
            "respond address raise flag mention"
        ),
        frozenset({"to"}),
    ),
    **dict.fromkeys(words("email e-mail"), frozenset({"to"})),
    "post": frozenset({"to", "in", "on"}),
    "share": frozenset({"with"}),
}
_IRREGULAR = {"sent": "send", "told": "tell", "gave": "give", "given": "give", "wrote": "write"}
_OWNER = words("owner owners assignee assignees dri")
_OWNED = words("owned owns assigned responsible accountable")
_DETERMINERS = words("the a an our your their his her its my this that these those some")
# A passive's auxiliaries ("was paged", "gets notified") and what may stand between the phrase and
# them ("must always be told").
_BE = words("be is are was were been being get gets got gotten")
_BETWEEN = words("must should shall will would can could may might not never always also then promptly")
_NOT = words("not never no don't doesn't")
# What may stand before a verb that starts a clause ("then send ...", "please forward ...").
_CLAUSE = words("and then please to must should shall will can also always first not never do don't or")
# Words that end a recipient's phrase besides stop words: prepositions, adverbs of time and order.
_BOUNDARY = words(
    "within about before after during until unless via per than first last next then now immediately "
    "promptly directly asap urgently right away also again too once whenever"
)


def comparatives(text: str) -> list[tuple[str, str]]:
    """(canonical relation, words as written) of each comparative in `text`."""
    found = tokens(text)
    low = [t.casefold() for t in found]
    out, i = [], 0
    while i < len(low):
        for phrase, relation, quantity in _COMPARATIVES:
            end = i + len(phrase)
            if tuple(low[i:end]) != phrase:
                continue
            if quantity and not any(_is_quantity(t) for t in low[end : end + 3]):
                continue
            out.append((relation, " ".join(found[i:end])))
            i = end - 1
            break
        i += 1
    return out


def _is_quantity(token: str) -> bool:
    return any(ch.isdigit() for ch in token) or token in _QUANTITY


def quantifiers(text: str, with_any: bool = False) -> list[tuple[str, str]]:
    """(canonical quantifier, word as written) of each quantifier in `text`: "at all",
    "not only" and "all right" are not ones; "any" only `with_any` (in an answer it is mostly a
    negation's wording: "not any" is "no")."""
    found = tokens(text)
    low = [t.casefold() for t in found]
    out = []
    for i, token in enumerate(low):
        value = QUANTIFIERS.get(token)
        before = low[i - 1] if i else ""
        after = low[i + 1] if i + 1 < len(low) else ""
        if value is None or (value == "any" and not with_any):
            continue
        if (token, before) in (("all", "at"), ("only", "not")) or (token, after) == ("all", "right"):
            continue
        out.append((value, found[i]))
    return out


def lemma(token: str) -> str:
    """A verb's base form, as far as these tables need it (paged, notifies, emailing -> page...)."""
    low = token.casefold()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    verbs = _TO_WHOM | set(_SENDING)
    if low in verbs:
        return low
    suffixes = (("ied", "y"), ("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""), ("d", ""))
    for suffix, repl in suffixes:
        if low.endswith(suffix) and len(low) > len(suffix) + 2:
            base = low[: -len(suffix)] + repl
            for candidate in (base, base + "e", base[:-1] if base[-1:] == base[-2:-1] else base):
                if candidate in verbs:
                    return candidate
    return low


def _spans(text: str) -> tuple[list[str], set[int]]:
    """`text`'s tokens, and the indices of those a punctuation mark follows (a phrase ends there)."""
    found = list(TOKEN.finditer(text))
    pairs = enumerate(zip(found, found[1:], strict=False))
    breaks = {i for i, (a, b) in pairs if re.search(r"[^\w\s'’-]", text[a.end() : b.start()])}
    return [m.group() for m in found], breaks


def _phrase(found: Sequence[str], start: int, breaks: set[int]) -> list[str]:
    """The words of the noun phrase starting at `start`: determiners skipped, at most four words,
    ending at punctuation, a stop word, a boundary word, a number or a relation word."""
    i = start
    while i < len(found) and found[i].casefold() in _DETERMINERS and i not in breaks:
        i += 1
    out: list[str] = []
    while i < len(found) and len(out) < 4 and (not out or i - 1 not in breaks):
        low = found[i].casefold()
        if not found[i][0].isalpha() or low in STOP or low in _BOUNDARY or low in RELATION_WORDS:
            break
        if low in _OWNER or low in _OWNED:
            break
        out.append(found[i])
        i += 1
    return out


def _sender(low: Sequence[str], lemmas: Sequence[str], i: int, breaks: set[int]) -> int | None:
    """Where the verb whose preposition `low[i]` is stands ("send ... to"), within eight words:
    one that starts its clause first ("the weekly report" is no verb), else the nearest one not
    after a determiner."""
    found = [
        j
        for j in range(i - 1, max(-1, i - 9), -1)
        if low[i] in _SENDING.get(lemmas[j], ()) and not (j and low[j - 1] in _DETERMINERS)
    ]
    starts = [j for j in found if not j or j - 1 in breaks or low[j - 1] in _CLAUSE]
    return (starts or found or [None])[0]


def _phrase_before(found: Sequence[str], low: Sequence[str], aux: int, breaks: set[int]) -> list[str]:
    """The noun phrase that ends before the auxiliary at `aux` (and the modals and adverbs before
    it): at most four words, not across punctuation, stopping at a determiner, stop word,
    boundary word, number or relation word."""
    first, last = _span_before(found, low, aux, breaks)
    return list(found[first:last])


def _span_before(found: Sequence[str], low: Sequence[str], aux: int, breaks: set[int]) -> tuple[int, int]:
    """[first, last) of `_phrase_before`'s words in `found`."""
    j = aux - 1
    while j >= 0 and (low[j] in _BE or low[j] in _BETWEEN) and j not in breaks:
        j -= 1
    last, count = j + 1, 0
    while j >= 0 and count < 4 and j not in breaks:
        if not found[j][0].isalpha() or low[j] in STOP or low[j] in _BOUNDARY or low[j] in RELATION_WORDS:
            break
        if low[j] in _DETERMINERS or low[j] in _OWNER or low[j] in _OWNED:
            break
        j, count = j - 1, count + 1
    return j + 1, last


def party_words(text: str) -> set[str]:
    """Stemmed words of `text` with hyphenated ones split ("on-call" -> "call"), stop words out:
    what a recipient's or owner's words are looked for in."""
    out = set()
    for token in tokens(text):
        for part in token.split("-"):
            if part and part[0].isalpha() and part.casefold() not in STOP:
                out.add(stem(part))
    return out


def _value(phrase: Sequence[str]) -> str:
    return " ".join(sorted(party_words(" ".join(phrase))))


@dataclass(frozen=True)
class Party:
    """Who receives or owns something in a passage, and, for a recipient, what reaches them."""

    kind: str  # recipient | owner
    value: str  # canonical: stemmed words, sorted
    said: str  # the words as written
    verb: str = ""  # a recipient's verb, in its base form (page, send, notify)
    thing: tuple[str, ...] = ()  # what is sent, when the words before the preposition name it
    negated: bool = False  # "not to support", "do not page the manager"


def parties(text: str) -> list[tuple[str, str, str]]:
    """(recipient | owner, canonical value, words as written) of who receives or owns something in
    `text`. An owner word with no name after it ("with an owner each") is the owner `owner`: the
    passage requires one."""
    return [(p.kind, p.value, p.said) for p in find_parties(text)]


def find_parties(text: str) -> list[Party]:
    """`parties`, with each recipient's verb, what is sent and whether it is negated."""
    found, breaks = _spans(text)
    low = [t.casefold() for t in found]
    lemmas = [lemma(t) for t in found]
    out: list[Party] = []
    for i, token in enumerate(low):
        phrase: list[str] = []
        if token in ("owns", "own") and i and low[i - 1] not in _BE:  # "Alice owns the rollout"
            phrase = _phrase_before(found, low, i, breaks)
            if phrase:
                out.append(Party("owner", _value(phrase), " ".join(phrase)))
                continue
        if token in _OWNER or token in _OWNED:
            out.append(Party("owner", "owner", found[i]))
            nxt = i + 1 + (i + 1 < len(low) and low[i + 1] in ("by", "to", "is", "are"))
            phrase = _phrase(found, nxt, breaks) if token in _OWNER or nxt > i + 1 else []
            if phrase:
                out.append(Party("owner", _value(phrase), " ".join(phrase)))
            continue
        if i in breaks:
            continue  # "ask, then ...": nothing follows the verb in its clause
        verb, thing = "", ()
        takes = lemmas[i] in _TO_WHOM and (not i or low[i - 1] not in _DETERMINERS)
        sent_on = i + 1 < len(low) and low[i + 1] in _SENDING.get(lemmas[i], ()) and i not in breaks
        at = _sender(low, lemmas, i, breaks)
        sender = lemmas[at] if at is not None else ""
        if takes and lemmas[i] != token and i >= 2 and low[i - 1] in _BE and not sent_on:
            phrase, verb = _phrase_before(found, low, i - 1, breaks), lemmas[i]  # passive: who comes first
        elif takes:
            phrase, verb = _phrase(found, i + 1, breaks), lemmas[i]
        elif sender:
            phrase, verb = _phrase(found, i + 1, breaks), sender
            first, last = _span_before(found, low, i, breaks)
            thing = tuple(found[max(first, (at or 0) + 1) : last])  # what stands between verb and "to"
        if phrase and _value(phrase):
            negated = any(low[j] in _NOT for j in range(max(0, i - 3), i))
            out.append(Party("recipient", _value(phrase), " ".join(phrase), verb, thing, negated))
    return out
