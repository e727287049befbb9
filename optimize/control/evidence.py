"""Evidence bundles: `<home>/evidence/<skill>/<id>/evidence.json` and a readable EVIDENCE.md.

evidence.json (schema_version 1) holds the champion and candidate revisions, what the change
touches (description, body, other frontmatter, other files) and so its kind, every measurement
with its status ("measured" with its numbers and the inputs that produced them, "not_measured"
or "not_applicable" with why), the passport as it was when written (state, cells, every rule
applied, each significance test as fields; approval recomputes it), the provenance (models and
endpoints of every role, never keys; the task set's origin and hash), and cost with the run's
ledger ("unknown" when it is). Nothing unmeasured gets a default value. The file's SHA-256 is
its digest: a pending change records it, and approval refuses a bundle whose bytes changed
since. Bundles are written once, whole or not at all (both files in a `.tmp-<id>` folder
beside it, then one rename), and never edited: re-evaluating a change writes a new bundle and
the old one stays where it was. Recovery removes the `.tmp-` folder of a write a kill cut short
(`remove_unfinished`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingot import faults
from ingot.errors import IngotError
from ingot.fsutil import fsync_dir, write_atomic
from optimize.control.gate import Thresholds, p_clause
from optimize.control.passport import FAIL, PASS, Passport, passport
from optimize.control.replay_rule import FINDING_OF, STATE_OF
from optimize.measure.impact import METRIC_NAMES

SCHEMA_VERSION = 1


class EvidenceError(IngotError):
    """An evidence bundle is missing, unreadable or does not match what it claims."""


def not_measured(why: str) -> dict[str, str]:
    return {"status": "not_measured", "why": why}


@dataclass(frozen=True)
class Evidence:
    """One bundle as stored: where it is, its digest, and its parsed content."""

    id: str
    skill: str
    path: Path
    digest: str
    data: Mapping[str, Any]

    @property
    def champion_revision(self) -> str | None:
        return self.data.get("champion_revision")

    @property
    def candidate_revision(self) -> str:
        return self.data["candidate_revision"]


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_bundle(
    runs_dir: Path,
    skill: str,
    kind: str,
    champion_revision: str | None,
    candidate_revision: str,
    measurements: Mapping[str, Any],
    thresholds: Thresholds,
    cost: Mapping[str, Any] | None = None,
    source: str = "operator",
    now: dt.datetime | None = None,
    changes: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> Evidence:
    """Compute the passport, write evidence.json + EVIDENCE.md, return the stored bundle."""
    created = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
    bundle_id = f"{created.replace(':', '').replace('-', '')[:15]}-{secrets.token_hex(3)}"
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "id": bundle_id,
        "skill": skill,
        "kind": kind,
        "source": source,
        "created": created,
        "champion_revision": champion_revision,
        "candidate_revision": candidate_revision,
        "changes": dict(changes) if changes else {"status": "unknown"},
        "measurements": dict(measurements),
        "provenance": dict(provenance) if provenance else {"status": "not recorded"},
        "cost": dict(cost) if cost else {"status": "unknown", "usd": None},
    }
    verdict = passport(data, champion_revision, thresholds)
    data["passport"] = {"thresholds": thresholds.__dict__, **verdict.as_json()}
    folder = runs_dir / "evidence" / skill / bundle_id
    stage = folder.with_name(f"{UNFINISHED}{bundle_id}")
    stage.mkdir(parents=True, exist_ok=False)
    _write_atomic(stage / "evidence.json", json.dumps(data, indent=2, sort_keys=True).encode())
    _write_atomic(stage / "EVIDENCE.md", render_markdown(data, verdict).encode())
    faults.point(f"rename evidence bundle {bundle_id} into place")
    os.rename(stage, folder)
    fsync_dir(folder.parent)
    return load(folder / "evidence.json")


UNFINISHED = ".tmp-"  # a bundle being written: never read, removed by recovery if left


def remove_unfinished(runs_dir: Path) -> list[str]:
    """Delete the bundle folders a killed write left unfinished; returns their paths (relative to
    `runs_dir`). Only under the change lock, which every bundle write holds."""
    removed = []
    for stage in sorted((runs_dir / "evidence").glob(f"*/{UNFINISHED}*")):
        if stage.is_dir() and not stage.is_symlink():
            shutil.rmtree(stage, ignore_errors=True)
        else:
            stage.unlink(missing_ok=True)
        removed.append(stage.relative_to(runs_dir).as_posix())
    return removed


def _write_atomic(path: Path, data: bytes) -> None:
    write_atomic(path, data, mode=0o644)


def load(path: Path) -> Evidence:
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise EvidenceError(f"cannot read evidence {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise EvidenceError(f"{path} is not a version-{SCHEMA_VERSION} evidence bundle")
    return Evidence(str(data.get("id")), str(data.get("skill")), path, hashlib.sha256(raw).hexdigest(), data)


def render_markdown(data: Mapping[str, Any], verdict: Passport) -> str:
    """EVIDENCE.md: the passport, then the numbers it rests on, for every kind of change. The
    passport is judged against the champion the bundle was measured on (the review card re-judges
    it against what is live now)."""
    lines = [
        f"# Evidence for `{data['skill']}` ({verdict.kind} change)",
        "",
        f"- champion: `{data.get('champion_revision') or 'none (new skill)'}`",
        f"- candidate: `{data['candidate_revision']}`",
        f"- source: {data.get('source')}; created {data['created']}",
        f"- changes: {_changes(data.get('changes', {}))}",
        "",
        "## Passport",
        "",
        f"**{verdict.summary}**",
        "",
        "| cell | state | why |",
        "|---|---|---|",
    ]
    lines += [
        f"| {c.name} | {c.state} | {c.why.replace('|', '/')}"
        + (f" (to measure: {c.measure.replace('|', '/')})" if c.measure else "")
        + " |"
        for c in verdict.cells
    ]
    lines += ["", *[f"- warning: {w}" for w in verdict.warnings]] if verdict.warnings else []
    if verdict.statistics:
        lines += ["", "## Significance", ""]
        lines += [
            f"- {s['test']}: n={s['n']}, "
            + ("statistic undefined" if s.get("statistic") is None else f"statistic {s['statistic']}")
            + f", {p_clause(s['p'])}"
            + (f" ({s['note']})" if s.get("note") else "")
            for s in verdict.statistics
        ]
    lines += ["", "## Measurements", ""]
    for name, block in data["measurements"].items():
        if not isinstance(block, Mapping) or block.get("status") != "measured":
            why = block.get("why", "no reason given") if isinstance(block, Mapping) else "malformed"
            applies = not (isinstance(block, Mapping) and block.get("status") == "not_applicable")
            lines.append(f"- {BLOCK_NAMES.get(name, name)}: {'missing' if applies else 'n/a'} ({why})")
            continue
        lines += _cell(name, block)
    if verdict.rules:
        lines += ["", "## Rules applied", ""] + [f"- {rule}" for rule in verdict.rules]
    lines += ["", "## Provenance", ""] + _provenance(data.get("provenance", {}))
    cost = data.get("cost", {})
    usd = cost.get("usd")
    ledger = cost.get("ledger")
    lines += [
        "",
        f"Cost: {'unknown' if usd is None else f'${usd:.4f}'}"
        + (f" over {cost.get('calls')} calls" if cost.get("calls") is not None else "")
        + (f"; ledger `{ledger}`" if ledger else ""),
        "",
    ]
    return "\n".join(lines)


# How a measurement block is named where people read it (the passport's cell names).
BLOCK_NAMES = {
    "ab": "held-out A/B",
    "routing_impact": "routing impact",
    "sandbox_checks": "sandbox checks",
    "checks": "safety (admission checks)",
    "replay": "replay",
    "search": "search",
    "selection": "description selection",
}


def _changes(changes: Mapping[str, Any]) -> str:
    if changes.get("status") == "unknown":
        return "not recorded"
    if changes.get("removed"):
        return "removes the skill"
    touched = [part for part in ("description", "body") if changes.get(part)]
    touched += ["other frontmatter"] if changes.get("frontmatter") else []
    files = changes.get("files") or []
    return ", ".join(touched + ([f"files {', '.join(files)}"] if files else [])) or "nothing"


def _cell(name: str, block: Mapping[str, Any]) -> list[str]:
    """One measured cell as the lines a reviewer needs."""
    if name == "ab":
        judges = ", ".join(block.get("judges", []))
        origin = "from cache" if block.get("champion_from_cache") else "measured now"
        out = [
            f"- held-out A/B: champion mean {block.get('champion_mean')} -> challenger mean "
            f"{block.get('challenger_mean')} over n={block.get('samples')} distinct cases; holdout hash "
            f"`{str(block.get('holdout_hash'))[:16]}`; serving model {block.get('serving_model')}; judges "
            f"{judges}; champion {origin}"
        ]
        sampling = block.get("sampling") or {}
        if sampling:
            merged = f"; merged {sampling.get('merged')}" if sampling.get("merged") else ""
            items, distinct = sampling.get("holdout_items"), sampling.get("distinct")
            out.append(f"  - samples: {items} holdout items, {distinct} distinct{merged}")
        pairwise = block.get("pairwise") or {}
        if pairwise.get("status") == "measured":
            out.append(
                f"  - pairwise (both orders, a flip is a tie): challenger wins {pairwise.get('wins')}, ties "
                f"{pairwise.get('ties')}, loses {pairwise.get('losses')}"
            )
        for case in block.get("cases", []):
            pair = f" (pairwise: {case['pairwise']})" if case.get("pairwise") else ""
            out.append(f"  - {case.get('id')}: {case.get('champion')} -> {case.get('challenger')}{pair}")
        return out
    if name == "routing_impact":
        metrics = block.get("metrics", {})
        before, after, counts = (
            metrics.get("champion", {}),
            metrics.get("challenger", {}),
            metrics.get("n", {}),
        )
        out = [
            f"- routing impact over {block.get('cases', {}).get('total')} routing cases and "
            f"{block.get('cases', {}).get('traffic', 0)} recent real tasks:"
        ]
        out += [
            f"  - {METRIC_NAMES.get(m, m)}: {before.get(m)} -> {after.get(m)} "
            f"(n = {counts.get(m, 0)} held-out)"
            for m in before
        ]
        leakage = block.get("leakage") if isinstance(block.get("leakage"), Mapping) else {}
        for case in leakage.get("cases") or []:
            out.append(f"  - left out as leakage ({case.get('how')}): {case.get('task')!r}")
        own = block.get("own") if isinstance(block.get("own"), Mapping) else None
        if own and own.get("cases"):
            out.append(
                f"  - its own held-out cases routed to it: {own.get('champion_routed')} -> "
                f"{own.get('challenger_routed')} of {own.get('cases')}"
            )
        for skill, moved in (block.get("by_skill") or {}).items():
            out.append(
                f"  - {skill}: gains {len(moved.get('gained', []))}, loses {len(moved.get('lost', []))}"
            )
        for case in block.get("shadowed", []):
            out.append(f"  - SHADOWS {case.get('expected')}: {case.get('task')!r}")
        return out
    if name == "replay":  # the regression replay cell (optimize/measure/regress.py)
        state = STATE_OF.get(str(block.get("verdict")), "fail (unreadable)")
        out = [f"- replay: {state} (each blessed run replayed with the candidate)"]
        for golden in block.get("goldens", []):
            finding = FINDING_OF.get(str(golden.get("verdict")), "unreadable")
            out.append(f"  - {golden.get('id')}: {finding} at {golden.get('tier')}: {golden.get('why')}")
        return out
    if name == "sandbox_checks":
        sides = [
            f"{side}: " + ", ".join(f"{n} {status}" for status, n in sorted((block.get(side) or {}).items()))
            for side in ("champion", "challenger")
            if block.get(side)
        ]
        return [f"- sandbox checks (`check:` specs on each arm's answers): {'; '.join(sides) or 'none ran'}"]
    if name in ("search", "selection"):
        shown = {k: v for k, v in block.items() if k != "status" and isinstance(v, str | int | float)}
        return [
            f"- {BLOCK_NAMES.get(name, name)}: "
            + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in shown.items())
        ]
    out = [f"- {BLOCK_NAMES.get(name, name)}:"]
    for check, result in (block.get("results") or {}).items():
        if isinstance(result, Mapping):
            outcome = PASS if result.get("passed") else FAIL
            out.append(f"  - {check} check: {outcome} {result.get('detail', '')}".rstrip())
    return out


def _provenance(provenance: Mapping[str, Any]) -> list[str]:
    if not provenance or provenance.get("status") == "not recorded":
        return ["- not recorded"]
    out = []
    for role, model in (provenance.get("models") or {}).items():
        out.append(f"- {role}: {model.get('model')} at {model.get('endpoint')}")
    task_set = provenance.get("task_set")
    if task_set:
        out.append(f"- task set: {task_set.get('origin')}, sha256 `{str(task_set.get('sha256'))[:16]}`")
    return out or ["- not recorded"]
