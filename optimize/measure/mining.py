"""`ingot mine SKILL`: how a skill is doing on real traffic, and which tasks to evaluate it on.

Traces are attributed to the skill by their tag, or by the router placing the skill in its top 5
as at least related to the task (so traffic the router sent elsewhere still counts). Near-duplicate tasks are
clustered by embedding cosine and one representative per cluster is judged; verdicts are cached
by the digest of (task, answer), so re-mining judges only what is new. The report gives the mean
score, failing dimensions with counts, and the weakest tasks as candidates for the eval set
(offered, never written into a holdout). `record` keeps the latest live score per skill, with
the number of distinct tasks it rests on and when it was measured, for the skills page.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ingot.fsutil import write_atomic
from mcp_server.library import Library
from optimize.measure.judge import DIMENSIONS, Judge
from optimize.models.redaction import redact
from optimize.models.traces import TraceRecord, TraceStore

DUPLICATE_COSINE = 0.92
FAILING_BELOW = 0.5
SCORE_SCHEMA = 1


@dataclass(frozen=True)
class MiningReport:
    skill: str
    traces: int
    by_tag: int
    by_routing: int
    clusters: int
    judged: int  # new judge calls this run (the rest came from the cache)
    mean_score: float | None
    failing_dimensions: dict[str, int]
    weakest: tuple[tuple[float, str], ...]  # (score, task), lowest first
    skipped_lines: int


def _digest(record: TraceRecord) -> str:
    return hashlib.sha256(json.dumps([record.task, record.answer]).encode()).hexdigest()


def _routed_to(skill: str, task: str, library: Library) -> bool:
    """The router ranks `skill` in its top 5 for `task` at least as related (not merely ranked)."""
    result = library.route(task, k=5)
    related = {c.name for c in result.alternatives}
    if result.skill is not None:
        related.add(result.skill.name)
    return skill in related


def attributed(
    skill: str, records: tuple[TraceRecord, ...], library: Library
) -> tuple[list[TraceRecord], int, int]:
    tagged = [r for r in records if r.skill == skill and r.answer]
    routed = [r for r in records if r.skill != skill and r.answer and _routed_to(skill, r.task, library)]
    return tagged + routed, len(tagged), len(routed)


def cluster(records: list[TraceRecord], library: Library) -> list[list[TraceRecord]]:
    """Greedy clustering: a task joins the first cluster whose representative is near-identical."""
    if not records:
        return []
    vectors = library.embed([r.task for r in records])
    clusters: list[list[int]] = []
    for i, vector in enumerate(vectors):
        for members in clusters:
            if float(vectors[members[0]] @ vector) >= DUPLICATE_COSINE:
                members.append(i)
                break
        else:
            clusters.append([i])
    return [[records[i] for i in members] for members in clusters]


def mine(skill: str, store: TraceStore, library: Library, judge: Judge, cache: Path) -> MiningReport:
    result = store.read()
    traffic, by_tag, by_routing = attributed(skill, result.records, library)
    groups = cluster(traffic, library)
    verdicts = _load(cache)
    judged = 0
    scored: list[tuple[float, str, dict[str, float]]] = []
    for group in groups:
        representative = group[0]
        key = _digest(representative)
        # Records from before redaction covered addresses may hold them: neither the judge nor
        # the report (whose weakest tasks become eval-set candidates) sees them.
        task = redact(representative.task)
        if key not in verdicts:
            grade = judge.grade(task, redact(representative.answer or ""))
            verdicts[key] = {"score": grade.score, "dimensions": dict(grade.dimensions)}
            judged += 1
            _append(cache, key, verdicts[key])
        scored.append((verdicts[key]["score"], task, verdicts[key]["dimensions"]))
    failing = Counter(d for _, _, dims in scored for d in DIMENSIONS if dims.get(d, 1.0) < FAILING_BELOW)
    weakest = tuple(sorted(((round(s, 3), t) for s, t, _ in scored), key=lambda x: x[0])[:5])
    mean = round(sum(s for s, _, _ in scored) / len(scored), 4) if scored else None
    return MiningReport(
        skill,
        len(traffic),
        by_tag,
        by_routing,
        len(groups),
        judged,
        mean,
        dict(failing),
        weakest,
        result.skipped,
    )


def _load(path: Path) -> dict[str, dict]:
    verdicts: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
                verdicts[entry["key"]] = entry["verdict"]
            except (ValueError, KeyError):
                continue
    return verdicts


def _append(path: Path, key: str, verdict: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps({"key": key, "verdict": verdict}) + "\n")


@dataclass(frozen=True)
class LiveScore:
    """A skill's latest mined score: the mean over `samples` distinct tasks (clusters), when."""

    skill: str
    mean_score: float
    samples: int
    traces: int
    measured_at: str  # ISO 8601, UTC


def record(folder: Path, report: MiningReport, now: dt.datetime) -> LiveScore | None:
    """Keep `report`'s score as the skill's latest in `folder/<skill>.json` (None: no traffic,
    nothing recorded, so an older score stays with its own date)."""
    if report.mean_score is None:
        return None
    score = LiveScore(
        report.skill, report.mean_score, report.clusters, report.traces, now.isoformat(timespec="seconds")
    )
    data = {"schema_version": SCORE_SCHEMA, **score.__dict__}
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / f"{report.skill}.json", json.dumps(data, indent=2).encode())
    return score


def latest(folder: Path, skill: str) -> LiveScore | None:
    """The skill's latest recorded live score, or None (never mined, or a record it cannot read)."""
    try:
        data = json.loads((folder / f"{skill}.json").read_text())
        if data.get("schema_version") != SCORE_SCHEMA:
            return None
        return LiveScore(
            str(data["skill"]),
            float(data["mean_score"]),
            int(data["samples"]),
            int(data["traces"]),
            str(data["measured_at"]),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
