"""The replay cell's controls cache: the unchanged champion's replays and their judgements.

Keyed by the SHA-256 of everything that conditions a control (champion revision, golden and
review digests, serving model, judge tiers, controls per golden, the world's answers to the
golden's calls, the side-effecting tools, the judge prompts and CACHE_VERSION, bumped when
the cascade's own rules change), so a hit is only ever a control that would be
measured the same way again. An unreadable or malformed entry is a miss, never a crash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import rfc8785

from optimize.measure.cascade import JudgeTiers
from optimize.measure.drift import World
from optimize.measure.goldens import Stored
from optimize.measure.level0 import Judgement
from optimize.measure.replay import ReplayRun
from optimize.models.prompting import templates_digest

CACHE_VERSION = 5  # 2: L0 finds lost commitments (commitments.py); 3: values moved by provenance;
# 4: comparatives, quantifiers, recipients and owners among them, each model decision's prompt digest;
# 5: a rule line keeps only its recorded value, an unconfirmed provenance move caps at WARN


def cache_key(
    stored: Stored,
    champion: str | None,
    model: str,
    tiers: JudgeTiers,
    controls: int,
    side_effects: frozenset[str],
    world: World,
) -> str:
    """The key of `stored`'s controls: the hash of everything that conditions them."""
    golden = stored.golden
    calls = [(s.name, s.arguments) for s in golden.steps if world.covers(s.name)]
    key = {
        "version": CACHE_VERSION,
        "champion": champion,
        "golden": golden.digest,
        "review": stored.review.digest,
        "model": model,
        "tiers": tiers.models(),
        "controls": controls,
        "world": world.digest(calls),
        "side_effects": sorted(side_effects),
        "prompts": templates_digest("judge_replay_screen", "judge_replay_recheck", "judge_replay_adjudicate"),
    }
    return hashlib.sha256(rfc8785.dumps(key)).hexdigest()


def read_cache(cache_dir: Path | None, key: str | None) -> tuple[list[ReplayRun], list[Judgement]] | None:
    """The cached controls and their judgements, or None (no cache, no key, or a bad entry)."""
    if cache_dir is None or key is None:
        return None
    try:
        data = json.loads((cache_dir / f"{key}.json").read_text())
        return (
            [ReplayRun.from_json(c["replay"]) for c in data["controls"]],
            [Judgement.from_json(c["judgement"]) for c in data["controls"]],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_cache(
    cache_dir: Path | None, key: str | None, controls: Sequence[ReplayRun], judgements: Sequence[Judgement]
) -> None:
    if cache_dir is None or key is None:
        return
    from ingot.fsutil import write_atomic

    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = {
        "controls": [
            {"replay": r.to_json(), "judgement": j.to_json()}
            for r, j in zip(controls, judgements, strict=True)
        ]
    }
    write_atomic(cache_dir / f"{key}.json", json.dumps(data).encode(), mode=0o600, durable=False)
