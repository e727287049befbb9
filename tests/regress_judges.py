"""Scripted judges, coverage judge and teacher for regression replay (installed by
tests/regress_sim.py): deterministic stand-ins that read only the prompt they are served.

- `judge(tier)`: a criterion's quoted phrases ("...") must be in the replay's answer, and one
  naming a format ("answers as a table") is checked against the replay's own format; every
  world fact's value (as the prompt states it now) must be there; every commitment the prompt
  lists as MISSING counts as lost (the stand-ins take L0's marks as read: a real judge checks
  them and finds its own). L1 is also nervous: it is "unsure" when the answer's line count moved
  by more than one. L2 cites the golden passage that held what was lost; L3 agrees.
- `coverage_judge`: rules an altered instruction "unchanged" when it is a rewording (its anchors
  — numbers, negations and conditions, backticked names, upper-case codes, format words — the
  same, and at least half its words kept), else "changed"; it never claims a run exercises what
  no replay showed (it cannot evaluate a condition).
- `teacher`: drafts blind, from the golden and the skill as served alone: a criterion per term
  the answer quotes, one for the format the skill asks for, and each value a tool returned as a
  world fact, quoted where the answer states it.
- `rationale`: one line naming the verdict.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from typing import Any

from optimize.measure.passages import words

QUOTED = re.compile(r'"([^"]+)"')
TICKED = re.compile(r"`([^`]+)`")
SKILL_TAG = re.compile(r"<skill[^>]*>(.*?)</skill>", re.S)
STEP = re.compile(r"^\s*(?:\d+[.)]|[-*+])\s+(.*\S)\s*$")
FORMAT = re.compile(
    r"\b(?:answer|reply|respond)\s+(?:as|in)\s+(?:an?\s+)?"
    r"(JSON|table|bulleted list|bullet list|numbered list)\b",
    re.I,
)
FILLER = words("a an the is are was were be it its of to in on at for and or any there this that")


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def sections(prompt: str) -> dict[str, str]:
    """A judge prompt's parts by heading: `TITLE:` (or `TITLE (note):`) on its own line, or
    `TITLE: value` on one line."""
    found: dict[str, list[str]] = {}
    current = None
    for line in prompt.splitlines():
        heading = re.match(r"^([A-Z][A-Z ,/]+[A-Z])(?: \([^\n]*\))?:\s*(.*)$", line)
        if heading:
            current = heading.group(1)
            found[current] = [heading.group(2)] if heading.group(2) else []
        elif current is not None:
            found[current].append(line)
    return {k: "\n".join(v).strip() for k, v in found.items()}


def _missing(prompt: str) -> tuple[list[str], dict[str, str], str, str]:
    """(failed criterion and commitment ids, what each lost (a phrase, or the golden passage),
    golden answer, replay answer)."""
    parts = sections(prompt)
    golden, replay = parts.get("GOLDEN ANSWER", ""), parts.get("REPLAY ANSWER", "")
    low = replay.casefold()
    failed, lost = [], {}
    for line in parts.get("SUCCESS CRITERIA", "").splitlines():
        found = re.match(r"- (c\d+): (.*)", line)
        if not found:
            continue
        form = re.search(r"answers as an? (?:\w+ )?(json|table|bullet|numbered)", found.group(2), re.I)
        if form and _shape(replay) != form.group(1).casefold():
            failed.append(found.group(1))
            lost[found.group(1)] = golden.strip().splitlines()[0] if golden.strip() else form.group(0)
            continue
        gone = [p for p in QUOTED.findall(found.group(2)) if p.casefold() not in low]
        if gone:
            failed.append(found.group(1))
            lost[found.group(1)] = next(
                (x.strip() for x in golden.splitlines() if gone[0].casefold() in x.casefold()), gone[0]
            )
    for line in parts.get("WORLD FACTS", "").splitlines():
        found = re.match(r"- (f\d+): .*? = (.*?) \(from step", line)
        if found and found.group(2).casefold() not in low:
            failed.append(found.group(1))
            lost[found.group(1)] = found.group(2)
    for line in parts.get("COMMITMENTS OF THE GOLDEN ANSWER", "").splitlines():
        found = re.match(r"- (k\d+) \[\w+\] .*? \| golden: (.*) \| MISSING", line)
        if found:
            failed.append(found.group(1))
            lost[found.group(1)] = ast.literal_eval(found.group(2))
    return failed, lost, golden, replay


def _shape(text: str) -> str | None:
    """The scripted judges' own reading of an answer's format."""
    text = text.strip()
    try:
        if isinstance(json.loads(text), dict | list):
            return "json"
    except ValueError:
        pass
    lines = text.splitlines()
    for name, pattern in (("table", r"^\s*\|"), ("numbered", r"^\s*\d+[.)] "), ("bullet", r"^\s*[-*] ")):
        if sum(bool(re.match(pattern, line)) for line in lines) >= 2:
            return name
    return None


def judge(tier: str) -> Callable[[dict[str, Any]], str]:
    def decide(body: dict[str, Any]) -> str:
        prompt = _text(body["messages"][-1])
        failed, lost, golden, replay = _missing(prompt)
        if tier == "L1":
            if failed:
                return json.dumps({"verdict": "fail", "failed": failed, "rationale": "something is missing"})
            jumpy = abs(len(golden.strip().splitlines()) - len(replay.strip().splitlines())) > 1
            verdict = "unsure" if jumpy else "pass"
            return json.dumps({"verdict": verdict, "failed": [], "rationale": f"screened: {verdict}"})
        if not failed:
            return json.dumps(
                {"verdict": "pass", "failed": [], "cited_step": None, "rationale": "everything holds"}
            )
        what = lost[failed[0]]
        reply: dict[str, Any] = {"verdict": "regressed", "failed": failed, "rationale": f"lost {what!r}"}
        if tier == "L2":
            reply["cited_step"] = {"run": "golden", "step": "answer", "quote": what.strip()[:120]}
        return json.dumps(reply)

    return decide


def rationale(body: dict[str, Any]) -> str:
    prompt = _text(body["messages"][-1])
    verdict = re.search(r"VERDICT: ([^\n]+)", prompt)
    return f"Scripted rationale: the replay cell is {verdict.group(1) if verdict else '?'}."


ANCHOR_WORDS = words(
    "not no never none only unless without except always json table bulleted numbered template"
)


def anchors(text: str) -> set[str]:
    """What the scripted coverage judge compares: numbers, condition words, backticked names,
    upper-case codes and format words."""
    found = {t.casefold() for t in re.findall(r"[\w%.:/-]+", text) if any(c.isdigit() for c in t)}
    found |= {t.casefold() for t in re.findall(r"[A-Za-z]+", text) if t.casefold() in ANCHOR_WORDS}
    found |= {t for t in re.findall(r"\b[A-Z]{2,5}\b", text)}
    return found | set(TICKED.findall(text))


def _words(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z]{3,}", text.casefold()) if w not in FILLER}


def coverage_judge(body: dict[str, Any]) -> str:
    """Rules an instruction "unchanged" when it is a rewording: every anchor the same and at
    least half its words kept; anything else "changed". Claims no run exercises it."""
    prompt = _text(body["messages"][-1])
    rulings = []
    for line in sections(prompt).get("ALTERED INSTRUCTIONS", "").splitlines():
        found = re.match(r"- (i\d+) \(.*?, (\w+)\) was: (.*) \| now: (.*)$", line)
        if not found:
            continue
        old, new = ast.literal_eval(found.group(3)), ast.literal_eval(found.group(4))
        kept = len(_words(old) & _words(new)) / max(1, len(_words(old)))
        same = bool(old) and bool(new) and anchors(old) == anchors(new) and kept >= 0.5
        rulings.append(
            {
                "id": found.group(1),
                "behaviour": "unchanged" if same else "changed",
                "exercised_by": [],
                "rationale": "the same anchors" if same else "its anchors differ",
            }
        )
    return json.dumps({"instructions": rulings})


def exercised_by(*goldens: str) -> Callable[[dict[str, Any]], str]:
    """A coverage ruling for tests whose golden's task calls for every altered instruction."""

    def rule(body: dict[str, Any]) -> str:
        ids = re.findall(r"^- (i\d+) \(", _text(body["messages"][-1]), re.M)
        found = [{"id": i, "behaviour": "changed", "exercised_by": list(goldens)} for i in ids]
        return json.dumps({"instructions": found})

    return rule


def teacher(body: dict[str, Any]) -> str:
    """Drafts, from the golden and the skill alone: a criterion per term the answer quotes, one
    for the format the skill asks for, and each value a tool returned as a world fact."""
    parts = sections(_text(body["messages"][-1]))
    answer, skill = parts.get("ANSWER", ""), parts.get("THE SKILL AS SERVED TO THIS RUN", "")
    try:
        json.loads(answer)
        terms = []  # a JSON answer's quotes are its syntax, not terms
    except ValueError:
        terms = list(dict.fromkeys(t for t in QUOTED.findall(answer) if len(t) <= 40))
    criteria = [f'keeps "{t}"' for t in terms][:6]
    found = SKILL_TAG.search(skill)
    body = found.group(1) if found else skill
    asked = FORMAT.search(" ".join(m.group(1) for m in map(STEP.match, body.splitlines()) if m))
    if asked:
        criteria.append(f"answers as a {asked.group(1)}, as the skill asks")
    facts = []
    for found in re.finditer(r"Step (\d+): (\w+)\(.*?\nResult: (.*)", parts.get("TOOL CALLS, IN ORDER", "")):
        for segment in re.split(r"[,;]\s*", found.group(3)):
            value = re.search(r":\s*([\w.#%-]+)\s*$", segment) or re.search(
                r"(?<![\w.])(\d[\d.,]*%?)", segment
            )
            if value and segment.strip() in answer:
                facts.append(
                    {
                        "step": int(found.group(1)),
                        "label": segment.split(":")[0].strip()[:40]
                        if ":" in segment
                        else f"{found.group(2)} result",
                        "value": value.group(1).rstrip(".,"),
                        "quotes": [segment.strip()],
                    }
                )
    return json.dumps({"criteria": criteria or ["answers the task"], "world_facts": facts[:12]})
