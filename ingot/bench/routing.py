"""`ingot bench routing`: routing quality over real MCP, on labelled cases; also used by `ingot calibrate`.

Cases are JSON lines `{"id", "task", "expected": name | null, "kind", "acceptable"?: [names]}`.
The benchmark starts `ingot serve` (same binary, same settings) and calls `route_and_load` once per
case; every metric is computed from what the server returned. Definitions (printed with the numbers):
- top1: share of cases with an expected skill whose loaded skill (match or related_match) is the
  expected one or listed in `acceptable`.
- recall_at_3: share of those cases with a right skill (the expected one or one in `acceptable`,
  as for top1) among the first three names the server returned (the loaded skill, then
  `alternatives`), so it measures the hint a caller gets.
- no_route_rate: share of null cases where neither match nor related_match is returned (strict).
- false_route_rate: share of loaded skills that were wrong (null cases included).
- match_precision: share of direct matches (not related_match) that were right.
A metric with no cases is null, never 1.0.
With `strip_bodies`, the server gets a copy of the roots whose every body is cut to a title (its
name), as in libraries of plugin descriptions without bodies; the originals are never touched.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from fastmcp import Client

from ingot.bench.percentiles import percentiles
from ingot.errors import ConfigError
from ingot.progress import Count, OnStep, Steps, uncounted


@dataclass(frozen=True)
class Case:
    id: str
    task: str
    expected: str | None
    kind: str
    acceptable: frozenset[str]

    @property
    def right(self) -> frozenset[str]:
        return self.acceptable | {self.expected} if self.expected else frozenset()


@dataclass(frozen=True)
class Decision:
    """What a router returned for one case: the loaded skill and the names it listed, best first."""

    loaded: str | None
    names: tuple[str, ...]
    score: float
    matched: bool = False  # loaded as a direct match (not related_match)


def route_in_process(library, cases: Sequence[Case]) -> list[Decision]:
    """Route every case through a `mcp_server.library.Library` in this process, recording the
    names route_and_load would return (the loaded skill, then the nearest others)."""
    decisions = []
    for case in cases:
        result = library.route(case.task)
        loaded = result.skill.name if result.skill else None
        names = ((loaded,) if loaded else ()) + tuple(c.name for c in result.nearest)
        decisions.append(Decision(loaded, names, result.score, result.match is not None))
    return decisions


def load_cases(path: Path) -> list[Case]:
    """Parse a cases file; one clear error naming the first bad line."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {exc.start}); a cases file is JSON lines"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            expected = raw.get("expected")
            if not isinstance(raw["task"], str) or not (expected is None or isinstance(expected, str)):
                raise TypeError("task must be a string and expected a string or null")
            cases.append(
                Case(
                    str(raw.get("id", number)),
                    raw["task"],
                    expected,
                    str(raw.get("kind", "?")),
                    _acceptable(raw.get("acceptable")),
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(
                f"{path}:{number}: not a routing case ({exc}); see `ingot bench routing --help`"
            ) from None
    if not cases:
        raise ConfigError(f"{path} holds no routing cases")
    return cases


def _acceptable(value: object) -> frozenset[str]:
    """A case's other right answers: a list of skill names (one name alone is read as a list)."""
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset((value,))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise TypeError("acceptable must be a list of skill names")


def threshold_for_no_route(null_scores: np.ndarray, goal: float) -> float:
    """The lowest score threshold that leaves `goal` of the null cases unrouted, a case being
    routed when its score is above the threshold (how a threshold is fitted on labels)."""
    ordered = np.sort(np.asarray(null_scores, dtype=np.float64))
    keep = max(math.ceil(goal * len(ordered) - 1e-9), 1)  # null cases that must stay unrouted
    return float(ordered[keep - 1])


def _share(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def score(cases: Sequence[Case], decisions: Sequence[Decision], details: bool = False) -> dict:
    """top1, recall@3 of the returned names, strict no-route and false-route rate, per kind too."""
    positives = [(c, d) for c, d in zip(cases, decisions, strict=True) if c.expected]
    nulls = [d for c, d in zip(cases, decisions, strict=True) if not c.expected]
    loaded = [(c, d) for c, d in zip(cases, decisions, strict=True) if d.loaded]
    per_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    misses = []
    for case, decision in zip(cases, decisions, strict=True):
        correct = decision.loaded in case.right if case.expected else decision.loaded is None
        per_kind[case.kind][0] += correct
        per_kind[case.kind][1] += 1
        if details and not correct:
            misses.append(
                {"id": case.id, "kind": case.kind, "expected": case.expected, "got": decision.loaded,
                 "score": round(decision.score, 4), "names": list(decision.names[:3])}
            )  # fmt: skip
    report = {
        "n": len(cases),
        "top1": _share(sum(d.loaded in c.right for c, d in positives), len(positives)),
        "recall_at_3": _share(sum(bool(c.right & set(d.names[:3])) for c, d in positives), len(positives)),
        "no_route_rate": _share(sum(d.loaded is None for d in nulls), len(nulls)),
        "false_route_rate": _share(sum(d.loaded not in c.right for c, d in loaded), len(loaded)),
        "match_precision": _share(
            sum(d.loaded in c.right for c, d in loaded if d.matched), sum(d.matched for _, d in loaded)
        ),
        "positives": len(positives),
        "nulls": len(nulls),
        "accuracy_by_kind": {k: round(v[0] / v[1], 4) for k, v in sorted(per_kind.items())},
    }
    if details:
        report["misses"] = misses
    return report


async def _route_all(
    url: str, cases: Sequence[Case], count: Count = uncounted
) -> tuple[list[Decision], list[float], list[float]]:
    import time

    decisions, round_trip, route_ms = [], [], []
    async with Client(url) as client:
        for case in cases:
            count(len(decisions), len(cases), "cases routed")
            start = time.perf_counter()
            data = (await client.call_tool("route_and_load", {"task": case.task})).structured_content
            round_trip.append((time.perf_counter() - start) * 1000)
            loaded = data["match"] or data["related_match"]
            names = ((loaded,) if loaded else ()) + tuple(a["name"] for a in data["alternatives"])
            decisions.append(Decision(loaded, names, data["score"], bool(data["match"])))
            route_ms.append(float(data["components"].get("route_ms", 0.0)))
    count(len(decisions), len(cases), "cases routed")
    return decisions, round_trip, route_ms


@contextmanager
def _bodies_stripped(roots: tuple[Path, ...]) -> Iterator[tuple[Path, ...]]:
    """Copies of `roots` with each SKILL.md's body replaced by a title; other files left out."""
    import frontmatter
    import yaml

    work = Path(tempfile.mkdtemp(prefix="ingot-bench-bodyless-"))
    try:
        copies = []
        for n, root in enumerate(roots):
            copy = work / str(n) / root.name
            for skill_md in sorted(root.glob("*/SKILL.md")):
                target = copy / skill_md.parent.name / "SKILL.md"
                target.parent.mkdir(parents=True)
                text = skill_md.read_text(encoding="utf-8")
                try:
                    post = frontmatter.loads(text)
                except (yaml.YAMLError, ValueError):  # left as it is: the server refuses it itself
                    target.write_text(text, encoding="utf-8")
                    continue
                post.content = f"# {skill_md.parent.name}\n"
                target.write_text(frontmatter.dumps(post) + "\n", encoding="utf-8")
            copies.append(copy)
        yield tuple(copies)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(
    skills: tuple[Path, ...],
    vectors: Path,
    cases_path: Path,
    details: bool = False,
    strip_bodies: bool = False,
    on_step: OnStep | None = None,
) -> dict:
    """Serve `skills` in a child `ingot serve` (its vector cache at `vectors`, kept between runs),
    route every case over MCP, score the answers; each step reported to `on_step`."""
    from ingot.bench.served import served

    cases = load_cases(cases_path)
    steps = Steps(["starting ingot serve", "routing the cases", "calibration"], on_step)
    copied = _bodies_stripped(skills) if strip_bodies else nullcontext(skills)
    steps.begin("starting ingot serve")
    with copied as roots, served(roots, vectors) as server:
        count = steps.begin("routing the cases")
        decisions, round_trip, route_ms = asyncio.run(_route_all(server.url, cases, count))
        steps.begin("calibration")
        calibration = asyncio.run(_calibration(server.url))
    return {
        "skills_roots": [str(s) for s in skills],
        "bodies": "stripped to a title" if strip_bodies else "as they are",
        "skills": calibration.pop("candidates_considered"),
        **score(cases, decisions, details),
        "calibration": calibration,
        "mcp_route_and_load_ms": percentiles(round_trip),
        "server_route_ms": percentiles(route_ms),
        "cold_start_s": round(server.cold_start_s, 2),
    }


async def _calibration(url: str) -> dict:
    async with Client(url) as client:
        data = (await client.call_tool("route_and_load", {"task": "calibration probe"})).structured_content
    keys = ("candidates_considered", "background_anchor", "own_anchor", "related_at", "match_at")
    return {k: data["components"].get(k) for k in keys}
