"""Evidence bundles: `runs/evidence/<skill>/<id>/evidence.json` and a human-readable EVIDENCE.md.

evidence.json (schema_version 1) holds the champion and candidate revisions, every measurement
with its status ("measured" with sample counts and per-case results, or "not_measured" with why),
the gate inputs and verdict, and cost ("unknown" when it is). Nothing unmeasured gets a default
value. The file's SHA-256 is its digest: a pending change records it, and approval refuses a
bundle whose bytes changed since. Bundles are written once (temp file + rename) and never edited.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingot.errors import IngotError
from ingot.fsutil import write_atomic
from optimize.control.gate import Thresholds, Verdict, evaluate

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
) -> Evidence:
    """Compute the verdict, write evidence.json + EVIDENCE.md, return the stored bundle."""
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
        "measurements": dict(measurements),
        "cost": dict(cost) if cost else {"status": "unknown", "usd": None},
    }
    verdict = evaluate(data, thresholds)
    data["gate"] = {
        "thresholds": thresholds.__dict__,
        "verdict": verdict.status,
        "reasons": list(verdict.reasons),
        "warnings": list(verdict.warnings),
    }
    folder = runs_dir / "evidence" / skill / bundle_id
    folder.mkdir(parents=True, exist_ok=False)
    _write_atomic(folder / "evidence.json", json.dumps(data, indent=2, sort_keys=True).encode())
    _write_atomic(folder / "EVIDENCE.md", render_markdown(data, verdict).encode())
    return load(folder / "evidence.json")


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


def render_markdown(data: Mapping[str, Any], verdict: Verdict) -> str:
    lines = [
        f"# Evidence for `{data['skill']}` ({data['kind']})",
        "",
        f"- champion: `{data.get('champion_revision') or 'none (new skill)'}`",
        f"- candidate: `{data['candidate_revision']}`",
        f"- source: {data.get('source')}; created {data['created']}",
        f"- verdict: **{verdict.status}**",
        "",
    ]
    lines += [f"  - {r}" for r in verdict.reasons] + [f"  - warning: {w}" for w in verdict.warnings]
    lines += ["", "## Measurements", ""]
    for name, block in data["measurements"].items():
        if block.get("status") != "measured":
            lines.append(f"- {name}: **not measured** ({block.get('why', 'no reason given')})")
            continue
        lines.append(
            f"- {name}: measured" + (f", verdict **{block['verdict']}**" if "verdict" in block else "")
        )
        for golden in block.get("goldens", []):  # the replay cell (optimize/measure/regress.py)
            verdict, tier, why = golden.get("verdict"), golden.get("tier"), golden.get("why")
            lines.append(f"  - {golden.get('id')}: {verdict} at {tier}: {why}")
        for case in block.get("cases", []):
            lines.append(
                f"  - {case.get('id')}: champion {case.get('champion')} -> challenger "
                f"{case.get('challenger')}"
            )
        for check, result in block.get("results", {}).items():
            lines.append(
                f"  - {check}: {'passed' if result.get('passed') else 'FAILED'} "
                f"{result.get('detail', '')}".rstrip()
            )
    cost = data.get("cost", {})
    usd = cost.get("usd")
    lines += ["", f"Cost: {'unknown' if usd is None else f'${usd:.4f}'}", ""]
    return "\n".join(lines)
