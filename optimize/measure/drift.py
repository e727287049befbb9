"""World drift: when a tool result a golden relied on has changed since it was recorded.

Replays answer tool calls from the recording, so the world cannot move inside one, except for
the read-only tools a user opts in (REPLAY_WORLD_TOOLS, executed live at REPLAY_WORLD_URL).
`World` observes each such call once per evaluation and shares the result between the
candidate's replays and the controls, so both see the same world. When a golden's world fact
reads differently now, the new value is corroborated by a second call, or by a second source
(the optional research tool: does a web search for the fact's label find the new value?). A
corroborated change is ruled "world moved" and the replay is judged against the new value; an
uncorroborated one is "unconfirmed", and the verdict can be no better than WARN. Nothing is
re-executed that the user did not list: a tool with side effects is never called twice here.
These cards are for the listed world facts; provenance.py makes the same cards, with the same
corroboration, for every other value of the answer a tool call supplied.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import rfc8785

from optimize.measure.goldens import Golden, Review, call_key

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


class WorldUnavailable(Exception):
    """A world source could not answer (network, status, shape); the call stays recorded."""


class WorldSource(Protocol):
    name: str

    def covers(self, tool: str) -> bool: ...

    def call(self, tool: str, arguments: Any) -> str: ...


@dataclass(frozen=True)
class WorldEndpoint:
    """Read-only tools executed live: POST `<url>/<tool>` with the JSON arguments; the reply's
    `result` (or its body) is the tool result. Only `tools` are ever called."""

    url: str
    tools: frozenset[str]
    timeout_s: float = 20.0

    @property
    def name(self) -> str:
        return f"world endpoint {self.url}"

    def covers(self, tool: str) -> bool:
        return tool in self.tools

    def call(self, tool: str, arguments: Any) -> str:
        try:
            response = httpx.post(f"{self.url.rstrip('/')}/{tool}", json=arguments, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise WorldUnavailable(f"{tool}: {exc}") from exc
        if response.status_code != 200:
            raise WorldUnavailable(f"{tool}: HTTP {response.status_code}")
        try:
            data = response.json()
        except ValueError:
            return response.text
        if isinstance(data, Mapping) and "result" in data:
            result = data["result"]
            return result if isinstance(result, str) else json.dumps(result)
        return json.dumps(data)


@dataclass(frozen=True)
class ResearchCheck:
    """The optional research tool (Tavily) as a second source. Only a fact's label leaves the
    machine (e.g. "EUR/USD exchange rate"), never a task, an answer or a tool result."""

    api_key: str
    base_url: str = "https://api.tavily.com"
    timeout_s: float = 20.0

    def confirms(self, label: str, value: str) -> tuple[bool, str]:
        try:
            response = httpx.post(
                f"{self.base_url.rstrip('/')}/search",
                json={"query": label[:380], "max_results": 5, "search_depth": "basic"},
                headers={"Authorization": f"Bearer {self.api_key}"},
                timeout=self.timeout_s,
            )
            results = response.json().get("results") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            results = None
        if not isinstance(results, list):
            return False, "research unavailable"
        for result in results:
            if isinstance(result, Mapping) and value in str(result.get("content", "")):
                return True, f"research found it ({result.get('url', 'a search result')})"
        return False, "research did not find it"


@dataclass(frozen=True)
class Observation:
    tool: str
    arguments: Any
    value: str
    source: str


class World:
    """The world as one evaluation sees it: each covered call observed once (and once more to
    corroborate), whoever asks; thread-safe, since replays run concurrently."""

    def __init__(self, sources: Sequence[WorldSource] = (), research: ResearchCheck | None = None) -> None:
        self.sources, self.research = tuple(sources), research
        self._seen: dict[tuple[str, int], Observation | None] = {}
        self._lock = threading.Lock()

    def covers(self, tool: str) -> bool:
        return any(s.covers(tool) for s in self.sources)

    def _observe(self, tool: str, arguments: Any, attempt: int) -> Observation | None:
        key = (call_key(tool, arguments), attempt)
        with self._lock:
            if key in self._seen:
                return self._seen[key]
            found = None
            for source in self.sources:
                if source.covers(tool):
                    try:
                        found = Observation(tool, arguments, source.call(tool, arguments), source.name)
                    except WorldUnavailable:
                        found = None
                    break
            self._seen[key] = found
            return found

    def observe(self, tool: str, arguments: Any) -> Observation | None:
        """The tool's result now, or None when no source covers it (or it could not answer)."""
        return self._observe(tool, arguments, 1) if self.covers(tool) else None

    def again(self, tool: str, arguments: Any) -> Observation | None:
        """A second, independent call of the same tool, to corroborate a changed value."""
        return self._observe(tool, arguments, 2) if self.covers(tool) else None

    def digest(self, calls: Iterable[tuple[str, Any]]) -> str:
        """Digest of what the world said for `calls` (part of the controls' cache key)."""
        seen = []
        for tool, arguments in calls:
            found = self.observe(tool, arguments)
            seen.append([call_key(tool, arguments), found.value if found else None])
        return hashlib.sha256(rfc8785.dumps(seen)).hexdigest()


def locate(old_result: str, old_value: str, new_result: str) -> str | None:
    """Where `old_value` sat in `old_result` (after the nearest text before it that is still
    there), what sits there in `new_result` (None: cannot tell)."""
    try:
        old_json, new_json = json.loads(old_result), json.loads(new_result)
    except ValueError:
        old_json = new_json = None
    if old_json is not None:
        path = _path_to(old_json, old_value)
        if path is not None:
            leaf = _follow(new_json, path)
            return None if leaf is _MISSING else (leaf if isinstance(leaf, str) else json.dumps(leaf))
    at = old_result.find(old_value)
    if at < 0:
        return None
    line_start = old_result.rfind("\n", 0, at) + 1
    prefix = old_result[max(line_start, at - 32) : at]
    # The nearest text before the value that is still there (a neighbour may have moved too).
    anchor = next((prefix[-k:] for k in range(len(prefix), 2, -1) if prefix[-k:] in new_result), "")
    if prefix and not anchor:
        return None
    start = new_result.find(anchor) + len(anchor) if anchor else 0
    if NUMBER.fullmatch(old_value):
        found = NUMBER.match(new_result, start)
        return found.group(0) if found else None
    after = old_result[at + len(old_value) : at + len(old_value) + 1]
    end = new_result.find(after, start) if after else len(new_result)
    return new_result[start : end if end >= 0 else len(new_result)].strip() or None


_MISSING = object()


def _path_to(node: Any, value: str, path: tuple = ()) -> tuple | None:
    if isinstance(node, Mapping):
        items: Iterable = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        text = node if isinstance(node, str) else json.dumps(node)
        return path if text == value else None
    for key, child in items:
        found = _path_to(child, value, (*path, key))
        if found is not None:
            return found
    return None


def _follow(node: Any, path: tuple) -> Any:
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return node


@dataclass(frozen=True)
class DriftCard:
    """One world value that reads differently now: what it was, what it is, and the ruling."""

    golden: str
    fact: str
    label: str
    tool: str
    arguments: Any
    old: str
    new: str | None
    source: str
    corroboration: str
    ruling: str  # "world moved" | "unconfirmed"
    step: int | None = None  # the recorded call it came from
    listed: bool = True  # a world fact of the review; False: tracked by provenance (provenance.py)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def drift_cards(golden: Golden, review: Review, world: World) -> list[DriftCard]:
    """A card for every world fact of `golden` whose tool now answers differently."""
    steps = {s.index: s for s in golden.steps}
    cards = []
    for fact in review.facts:
        step = steps.get(fact.step)
        now = world.observe(step.name, step.arguments) if step else None
        if step is None or now is None:
            continue
        new = locate(step.result, fact.value, now.value)
        if new == fact.value:
            continue
        second = world.again(step.name, step.arguments)
        again = locate(step.result, fact.value, second.value) if second else None
        corroboration, ruling = corroborate(new, again, second is not None, world.research, fact.label)
        cards.append(
            DriftCard(
                golden.id,
                fact.id,
                fact.label,
                step.name,
                step.arguments,
                fact.value,
                new,
                now.source,
                corroboration,
                ruling,
                step=fact.step,
            )
        )
    return cards


def corroborate(
    new: str | None,
    again: str | None,
    answered: bool,
    research: ResearchCheck | None = None,
    label: str | None = None,
) -> tuple[str, str]:
    """(corroboration, ruling) of a value that reads `new` now: "world moved" when a second call
    (`again`; `answered` False: it failed) agrees, or the research tool finds `new` under
    `label`; "unconfirmed" otherwise."""
    if new is not None and again == new:
        return "a second call agrees", "world moved"
    corroboration = (
        "no second call answered" if not answered else f"a second call says {again or 'something else'}"
    )
    if new is None or research is None or label is None:
        return corroboration, "unconfirmed"
    found, detail = research.confirms(label, new)
    return f"{corroboration}; {detail}", "world moved" if found else "unconfirmed"
