"""`ingot bench regress`: the labelled edit benchmark for regression replay.

The benchmark lives in `ingot/bench/regress_data/`: five skills, one blessed golden each
(recorded through the capture proxy from stand-in harnesses, and one from the reference agent,
with the cassettes of those recordings), and 37 labelled edits (regressing, improving,
cosmetic, world-drift). For every edit the candidate is replayed against its skill's goldens,
with two controls per golden (cached per skill), a loopback "world" answering the read-only
tools (moved or flapping values for the drift edits), and the judge cascade; the report gives
detection of regressing edits, false blocks and holds per class, drift recognised, cost per
verdict, the all-strongest counterfactual, and which tier decided each class.

Against the scripted models (scripts/bench_regress.py, the default) the numbers test the
mechanics and each edit's expected tier is checked. Against a real endpoint (`--endpoint`),
each golden is first re-recorded with the real serving model (its criteria kept, its world facts
re-checked), so the edits are judged against what that model does; expected tiers are then
reported, not required.
"""

from __future__ import annotations

import json
import shutil
import statistics
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from agent.workspace import revision_of
from ingot.errors import IngotError
from optimize.measure.cascade import JudgeTiers
from optimize.measure.drift import World, WorldEndpoint
from optimize.measure.golden_store import GoldenStore
from optimize.measure.goldens import check_facts
from optimize.measure.level0 import SIDE_EFFECT_TOOLS
from optimize.measure.regress import ReplaySettings, replay_cell
from optimize.measure.replay import Replayer
from optimize.models.llm import LLMClient

DATA = Path(__file__).with_name("regress_data")
CLASSES = ("regressing", "improving", "cosmetic", "world-drift")
TIERS = ("L0", "L1", "L2", "L3")


@dataclass(frozen=True)
class Edit:
    id: str
    skill: str
    cls: str
    kind: str
    change: tuple[Mapping[str, str], ...]
    expect: Mapping[str, str]
    world: Mapping[str, list[str]] = field(default_factory=dict)

    def apply(self, files: Mapping[str, bytes]) -> dict[str, bytes]:
        out = dict(files)
        for step in self.change:
            path = step.get("path", "SKILL.md")
            text = out[path].decode()
            if step["find"] not in text:
                raise IngotError(f"benchmark edit {self.id}: {step['find']!r} is not in {self.skill}/{path}")
            out[path] = text.replace(step["find"], step["replace"], 1).encode()
        return out


@dataclass(frozen=True)
class Bench:
    folder: Path
    skills: Mapping[str, Mapping[str, Any]]
    edits: tuple[Edit, ...]
    side_effects: frozenset[str]

    def files(self, skill: str) -> dict[str, bytes]:
        root = self.folder / "skills" / skill
        return {
            p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
        }

    def answers(self) -> dict[str, str]:
        """What each tool answers when the world has not moved."""
        return {tool: spec["answer"] for s in self.skills.values() for tool, spec in s["tools"].items()}

    def world_tools(self) -> frozenset[str]:
        return frozenset(
            t for s in self.skills.values() for t, spec in s["tools"].items() if spec.get("world")
        )


def load(folder: Path = DATA) -> Bench:
    data = yaml.safe_load((folder / "bench.yaml").read_text())
    edits = tuple(
        Edit(
            e["id"], e["skill"], e["class"], e["kind"], tuple(e["change"]), e["expect"], e.get("world") or {}
        )
        for e in data["edits"]
    )
    unknown = [e.id for e in edits if e.skill not in data["skills"] or e.cls not in CLASSES]
    if unknown:
        raise IngotError(f"benchmark edits with an unknown skill or class: {unknown}")
    return Bench(folder, data["skills"], edits, SIDE_EFFECT_TOOLS | frozenset(data["side_effect_tools"]))


class BenchWorld:
    """The benchmark's tools, answering live on loopback (`POST /<tool>`): by default what they
    answered when the goldens were recorded; per edit, the moved or flapping values it sets."""

    def __init__(self, answers: Mapping[str, str]) -> None:
        self.answers = dict(answers)
        self._queue: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self.url = ""

    def set(self, world: Mapping[str, list[str]]) -> None:
        with self._lock:
            self._queue = {tool: list(values) for tool, values in world.items()}

    def answer(self, tool: str) -> str | None:
        with self._lock:
            queued = self._queue.get(tool)
            if queued:
                return queued.pop(0) if len(queued) > 1 else queued[0]
            return self.answers.get(tool)

    @contextmanager
    def serving(self) -> Iterator[BenchWorld]:
        world = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("content-length", 0)))
                value = world.answer(self.path.strip("/"))
                data = json.dumps({"result": value}).encode()
                self.send_response(200 if value is not None else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                """Quiet: the report is the output."""

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()


def rerecord(
    bench: Bench, goldens: GoldenStore, llm: LLMClient, world: World, sandbox: Any = None
) -> list[str]:
    """Replace each golden with the same task run by `llm`'s serving model (criteria kept,
    world facts re-checked against the new run); returns notes on what could not be kept."""
    notes = []
    for skill in bench.skills:
        for stored in goldens.active(skill)[0]:
            files = bench.files(skill)
            run = Replayer(llm, world, sandbox).run(stored.golden, files, files)
            if run.answer is None:
                notes.append(
                    f"{skill}: the serving model did not finish the task ({run.stopped}); golden dropped"
                )
                stored.path.unlink()
                continue
            fresh = replace(
                stored.golden,
                answer=run.answer,
                messages=run.transcript,
                model=llm.config.endpoint("agent").model,
                model_calls=tuple({k: c[k] for k in ("model", "tokens_in", "tokens_out")} for c in run.calls),
                source={**stored.golden.source, "rerecorded_from": stored.id},
            )
            facts = tuple(f for f in stored.review.facts if not check_facts(fresh, [f]))
            dropped = len(stored.review.facts) - len(facts)
            if dropped:
                notes.append(f"{skill}: {dropped} world fact(s) do not hold in the re-recorded run")
            stored.path.unlink()
            stored.path.with_suffix(".review.json").unlink()
            goldens.add(fresh, files, replace(stored.review, facts=facts))
    return notes


def _tier(cell: Mapping[str, Any]) -> str | None:
    tiers = [g["tier"] for g in cell.get("goldens") or () if g.get("tier") in TIERS]
    return max(tiers, key=TIERS.index) if tiers else None


def run(
    llm: LLMClient,
    tiers: JudgeTiers,
    work: Path,
    *,
    bench: Bench | None = None,
    world_tools: frozenset[str] | None = None,
    rerecord_goldens: bool = False,
    sandbox: Any = None,
    controls: int = 2,
    concurrency: int = 4,
) -> dict[str, Any]:
    """Measure every labelled edit; see the module docstring for what the report holds."""
    bench = bench or load()
    home = work / "home"
    if home.exists():
        shutil.rmtree(home)
    shutil.copytree(bench.folder / "goldens", home / "goldens")
    goldens = GoldenStore(home / "goldens")
    settings = ReplaySettings(controls=controls, concurrency=concurrency, side_effects=bench.side_effects)
    rows, notes = [], []
    with BenchWorld(bench.answers()).serving() as live:
        tools = world_tools if world_tools is not None else bench.world_tools()
        if rerecord_goldens:
            notes = rerecord(bench, goldens, llm, World([WorldEndpoint(live.url, tools)]), sandbox)
        for edit in bench.edits:
            live.set(edit.world)
            champion = bench.files(edit.skill)
            cell = replay_cell(
                edit.skill,
                champion,
                edit.apply(champion),
                home / "goldens",
                llm,
                tiers,
                sandbox,
                settings=settings,
                world=World([WorldEndpoint(live.url, tools)]),
                cache_dir=home / "cache",
            )
            rows.append(_row(edit, cell))
    return {"edits": len(rows), "skills": len(bench.skills), **_summary(rows), "notes": notes, "rows": rows}


def _row(edit: Edit, cell: Mapping[str, Any]) -> dict[str, Any]:
    if cell.get("status") != "measured":
        return {"id": edit.id, "class": edit.cls, "kind": edit.kind, "verdict": None, "why": cell.get("why")}
    drift = [d["ruling"] for d in cell.get("drift") or ()]
    cost, counter = cell["cost"], cell["counterfactual"]
    tier = _tier(cell)
    expected = edit.expect
    return {
        "id": edit.id,
        "skill": edit.skill,
        "class": edit.cls,
        "kind": edit.kind,
        "verdict": cell["verdict"],
        "tier": tier,
        "drift": drift,
        "expected": dict(expected),
        "as_expected": cell["verdict"] == expected.get("verdict")
        and tier == expected.get("tier")
        and (not expected.get("drift") or drift == [expected["drift"]]),
        "usd": cost.get("usd"),
        "judging_usd": counter.get("judging_usd"),
        "all_strongest_usd": counter.get("all_strongest_usd"),
        "calls": cost.get("calls"),
        "noise_floor": (cell.get("noise_floor") or {}).get("pass_rate"),
        "reasons": cell.get("reasons"),
    }


def _rate(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_class: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_class[row["class"]].append(row)
    regressing = by_class["regressing"]
    drifted = by_class["world-drift"]
    usd = [r["usd"] for r in rows if r.get("usd") is not None]
    judging = [r["judging_usd"] for r in rows if r.get("judging_usd") is not None]
    strongest = [r["all_strongest_usd"] for r in rows if r.get("all_strongest_usd") is not None]
    complete = len(judging) == len(strongest) == len(rows)
    return {
        "detection": _rate(sum(r["verdict"] == "BLOCK" for r in regressing), len(regressing)),
        "held_regressing": _rate(sum(r["verdict"] in ("BLOCK", "WARN") for r in regressing), len(regressing)),
        "false_blocks": {
            c: sum(r["verdict"] == "BLOCK" for r in by_class[c]) for c in CLASSES if c != "regressing"
        },
        "held_for_a_human": {c: sum(r["verdict"] == "WARN" for r in by_class[c]) for c in CLASSES},
        "per_class": {c: len(by_class[c]) for c in CLASSES},
        "drift_recognised": f"{sum(_drift_as_labelled(r) for r in drifted)} of {len(drifted)}",
        "tiers_by_class": {c: dict(Counter(r.get("tier") for r in by_class[c])) for c in CLASSES},
        "as_expected": f"{sum(bool(r.get('as_expected')) for r in rows)} of {len(rows)}",
        "cost_per_verdict_usd": round(statistics.fmean(usd), 6) if usd and len(usd) == len(rows) else None,
        "judging_usd": round(sum(judging), 6) if complete else None,
        "all_strongest_judging_usd": round(sum(strongest), 6) if complete else None,
        "judging_share_of_all_strongest": round(sum(judging) / sum(strongest), 4)
        if complete and sum(strongest)
        else None,
        "noise_floor_pass_rate": _noise(rows),
    }


def _drift_as_labelled(row: Mapping[str, Any]) -> bool:
    """The edit's drift cards carry exactly the ruling its label expects."""
    return row.get("drift") == [row["expected"].get("drift")]


def _noise(rows: list[dict[str, Any]]) -> float | None:
    rates = [r["noise_floor"] for r in rows if r.get("noise_floor") is not None]
    return round(statistics.fmean(rates), 4) if rates else None


def goldens_revisions(bench: Bench) -> dict[str, str]:
    """Each skill's champion revision (the goldens must have been recorded with it)."""
    return {skill: revision_of(bench.files(skill)) for skill in bench.skills}


def run_endpoint(settings: Any, out: Path) -> dict[str, Any]:
    """The benchmark against a real OpenAI-compatible endpoint (BASE_URL, API_KEY, AGENT_MODEL,
    JUDGE_L1/L2/L3_MODEL, PRICES_FILE, MAX_RUN_USD): goldens re-recorded with the serving
    model, every call recorded in `out/cassettes/` so a second run replays them at no cost, the
    report also written to `out/report.json`."""
    from ingot.errors import ConfigError
    from ingot.runtime import judge_tiers, llm_config, sandbox
    from optimize.models.cassette import Cassette
    from optimize.models.ledger import UsageLedger, load_prices

    config = llm_config(settings)
    if "agent" not in config.endpoints or "judge" not in config.endpoints:
        raise ConfigError(
            "the benchmark needs AGENT_MODEL and at least one judge tier (JUDGE_L3_MODEL or JUDGE_MODEL)"
        )
    tiers = judge_tiers(settings)
    out.mkdir(parents=True, exist_ok=True)
    ledger = UsageLedger("bench-regress", load_prices(settings.prices_file), settings.max_run_usd)
    cassette = Cassette(out / "cassettes" / "bench-regress.jsonl", "record-missing")
    llm = LLMClient(config, ledger, cassette)
    bench = load()
    report = run(
        llm,
        tiers,
        out,
        bench=bench,
        world_tools=frozenset(bench.answers()),  # the benchmark's tools are fakes: replays may call them all
        rerecord_goldens=True,
        sandbox=sandbox(settings),
        concurrency=settings.replay_concurrency,
    )
    report = {
        "models": {"serving": config.endpoint("agent").model, **tiers.models()},
        "endpoint": config.endpoint("agent").base_url,
        **report,
        "ledger": ledger.totals()["total"],
        "cassette": str(cassette.path),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report
