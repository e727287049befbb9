"""`ingot bench regress`: the labelled edit benchmark for regression replay, built blind.

The benchmark lives in `ingot/bench/regress_data/`: five skills (bench.yaml), one golden each,
recorded from stand-in harnesses through the capture proxy (one from the reference agent) with
the cassettes of those recordings, whose criteria and world facts the scripted teacher drafted
from the golden and the skill alone (scripts/make_regress_bench.py reads no edit); and the
labelled edits (edits.yaml), written afterwards: regressions a blessed run exercises (many keep
every phrase a criterion could quote), regressions and other changes no blessed run exercises,
cosmetic edits (many reword those phrases), improving edits and world drift. For every edit the
candidate is replayed against its skill's goldens with two controls per golden (cached per
skill), a loopback "world" answering the read-only tools (moved or flapping values for the drift
edits), the judge cascade and the change's coverage; the report (regress_report.py) gives per
class the share BLOCKed, WARNed and PASSed with 95% intervals over edits, drift recognised, and
cost per verdict.

Against the scripted models (scripts/bench_regress.py, the default) the numbers test the
mechanics, not a model's detection. Against a real endpoint (`--endpoint`), each golden is first
re-recorded with the real serving model (criteria re-drafted by TEACHER_MODEL when one is set,
else kept; world facts re-checked), so the edits are judged against what that model does.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from agent.workspace import revision_of
from ingot.bench.regress_report import CLASSES, row, summary
from ingot.errors import IngotError
from optimize.measure.cascade import JudgeTiers
from optimize.measure.drift import World, WorldEndpoint
from optimize.measure.golden_store import GoldenStore
from optimize.measure.goldens import Golden, Review, check_facts
from optimize.measure.level0 import SIDE_EFFECT_TOOLS
from optimize.measure.regress import ReplaySettings, replay_cell
from optimize.measure.replay import Replayer
from optimize.models.llm import LLMClient

DATA = Path(__file__).with_name("regress_data")


@dataclass(frozen=True)
class Edit:
    id: str
    skill: str
    cls: str
    kind: str
    change: tuple[Mapping[str, str], ...]
    expect: Mapping[str, str] = field(default_factory=dict)
    world: Mapping[str, list[str]] = field(default_factory=dict)
    unlisted: tuple[str, ...] = ()  # world-fact ids the teacher "missed": dropped for this edit

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


def load_skills(folder: Path = DATA) -> Bench:
    """The skills, tasks and tools alone (bench.yaml): what the goldens are made from."""
    data = yaml.safe_load((folder / "bench.yaml").read_text())
    return Bench(folder, data["skills"], (), SIDE_EFFECT_TOOLS | frozenset(data["side_effect_tools"]))


def load(folder: Path = DATA) -> Bench:
    """The benchmark with its labelled edits (edits.yaml)."""
    bench = load_skills(folder)
    data = yaml.safe_load((folder / "edits.yaml").read_text())
    edits = tuple(
        Edit(
            e["id"],
            e["skill"],
            e["class"],
            e["kind"],
            tuple(e["change"]),
            e.get("expect") or {},
            e.get("world") or {},
            tuple(e.get("unlisted") or ()),
        )
        for e in data["edits"]
    )
    unknown = [e.id for e in edits if e.skill not in bench.skills or e.cls not in CLASSES]
    if unknown:
        raise IngotError(f"benchmark edits with an unknown skill or class: {unknown}")
    if len({e.id for e in edits}) != len(edits):
        raise IngotError("benchmark edit ids must be distinct")
    return replace(bench, edits=edits)


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
    bench: Bench,
    goldens: GoldenStore,
    llm: LLMClient,
    world: World,
    sandbox: Any = None,
    drafter: Callable[[Golden], Review] | None = None,
) -> list[str]:
    """Replace each golden with the same task run by `llm`'s serving model, its criteria and
    world facts drafted again by `drafter` (the teacher) when there is one, else kept (world facts
    re-checked against the new run); returns notes on what could not be kept."""
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
            if drafter is not None:
                review = drafter(fresh)
            else:
                facts = tuple(f for f in stored.review.facts if not check_facts(fresh, [f]))
                if len(stored.review.facts) - len(facts):
                    notes.append(
                        f"{skill}: {len(stored.review.facts) - len(facts)} world fact(s) do not hold in "
                        "the re-recorded run"
                    )
                notes.append(f"{skill}: criteria kept from the scripted recording (no TEACHER_MODEL)")
                review = replace(stored.review, facts=facts)
            stored.path.unlink()
            stored.path.with_suffix(".review.json").unlink()
            goldens.add(fresh, files, review)
    return notes


def run(
    llm: LLMClient,
    tiers: JudgeTiers,
    work: Path,
    *,
    bench: Bench | None = None,
    world_tools: frozenset[str] | None = None,
    rerecord_goldens: bool = False,
    drafter: Callable[[Golden], Review] | None = None,
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
            world = World([WorldEndpoint(live.url, tools)])
            notes = rerecord(bench, goldens, llm, world, sandbox, drafter)
        for edit in bench.edits:
            live.set(edit.world)
            champion = bench.files(edit.skill)
            goldens_dir = _unlisting(home, edit)

            def cell_of(
                before: Mapping[str, bytes] | None,
                after: Mapping[str, bytes],
                edit: Edit = edit,
                goldens_dir: Path = goldens_dir,
            ) -> dict[str, Any]:
                return replay_cell(
                    edit.skill,
                    before,
                    after,
                    goldens_dir,
                    llm,
                    tiers,
                    sandbox,
                    settings=settings,
                    world=World([WorldEndpoint(live.url, tools)]),
                    cache_dir=home / "cache",
                )

            cell = cell_of(champion, edit.apply(champion))
            # A world edit also replays the live revision alone, as `ingot replay` does: a BLOCK
            # there would be an incident for a skill nobody changed.
            live_cell = cell_of(None, champion) if edit.cls.startswith("world-") else None
            rows.append(row(edit, cell, live_cell))
    return {
        "edits": len(rows),
        "skills": len(bench.skills),
        "goldens": sum(len(goldens.active(s)[0]) for s in bench.skills),
        **summary(rows),
        "notes": notes,
        "rows": rows,
    }


def _unlisting(home: Path, edit: Edit) -> Path:
    """The goldens folder `edit` is replayed against: the bench's own, or, for an edit that
    unlists world facts (a teacher that missed them), a copy whose reviews list them no more."""
    if not edit.unlisted:
        return home / "goldens"
    folder = home / "unlisted" / edit.id
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(home / "goldens", folder)
    for path in (folder / edit.skill).glob("*.review.json"):
        review = json.loads(path.read_text())
        kept = [f for f in review.get("facts") or () if f.get("id") not in edit.unlisted]
        if len(kept) == len(review.get("facts") or ()):
            raise IngotError(f"benchmark edit {edit.id}: no world fact {list(edit.unlisted)} to unlist")
        path.write_text(json.dumps({**review, "facts": kept}, indent=1))
    return folder


def goldens_revisions(bench: Bench) -> dict[str, str]:
    """Each skill's champion revision (the goldens must have been recorded with it)."""
    return {skill: revision_of(bench.files(skill)) for skill in bench.skills}


def run_endpoint(settings: Any, out: Path) -> dict[str, Any]:
    """The benchmark against a real OpenAI-compatible endpoint (BASE_URL, API_KEY, AGENT_MODEL,
    JUDGE_L1/L2/L3_MODEL, PRICES_FILE, MAX_RUN_USD): goldens re-recorded with the serving
    model, every call recorded in `out/cassettes/` so a second run replays them at no cost, the
    report also written to `out/report.json`."""
    from ingot.errors import ConfigError
    from ingot.model_runtime import judge_tiers, llm_config, sandbox
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
    drafter = None
    if "teacher" in config.endpoints:
        from optimize.measure.golden_criteria import draft_review

        drafter = lambda golden: draft_review(llm, golden)[0]  # noqa: E731
    report = run(
        llm,
        tiers,
        out,
        bench=bench,
        world_tools=frozenset(bench.answers()),  # the benchmark's tools are fakes: replays may call them all
        rerecord_goldens=True,
        drafter=drafter,
        sandbox=sandbox(settings),
        concurrency=settings.replay_concurrency,
    )
    teacher = config.endpoint("teacher").model if "teacher" in config.endpoints else None
    report = {
        "measures": f"real models: detection by {config.endpoint('agent').model} judged by the tiers below",
        "models": {"serving": config.endpoint("agent").model, **tiers.models(), "teacher": teacher},
        "endpoint": config.endpoint("agent").base_url,
        **report,
        "ledger": ledger.totals()["total"],
        "cassette": str(cassette.path),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report
