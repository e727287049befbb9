"""Replaying one golden: the candidate's bytes where the recorded revision's were, recorded tool
results for matching calls, sandbox tools run for real, and the reference agent's own path."""

from __future__ import annotations

import json

from agent.run import ReferenceAgent
from agent.workspace import revision_of
from optimize.control.changes import ChangeControl
from optimize.control.goldens_admin import GoldenAdmin
from optimize.measure.cascade import JudgeTiers
from optimize.measure.drift import World
from optimize.measure.execcheck import BubblewrapSandbox
from optimize.measure.goldens import call_key
from optimize.measure.regress import replay_cell
from optimize.measure.replay import Replayer, swap_for
from optimize.models.traces import LocalTraceStore
from tests.conftest import running_mcp, write_skill
from tests.optimize.conftest import require_bwrap
from tests.regress_sim import FX_BODY, edited, install, regress_world
from tests.scripted_llm import scripted_llm

TIERS = JudgeTiers("judge-l1", "judge-l2", "judge-l3")
NO_FEES = '3. Mention "no fees" for transfers under 1000 EUR.\n'


def test_arguments_match_after_normalising_whitespace_numbers_and_nulls():
    assert call_key("get_rate", '{"pair": "EUR/USD",  "amount": 250}') == call_key(
        "get_rate", {"amount": 250.0, "pair": " EUR/USD ", "note": None}
    )
    assert call_key("get_rate", {"pair": "EUR/USD"}) != call_key("get_rate", {"pair": "EUR/GBP"})
    assert call_key("get_rate", {"pair": "EUR/USD"}) != call_key("get_fx", {"pair": "EUR/USD"})


def test_the_swap_reaches_the_body_in_json_escaped_tool_results_and_the_revision():
    old = {"SKILL.md": b'---\nname: s\ndescription: d\n---\n# S\n\n1. Say "hi" twice.\n'}
    new = {"SKILL.md": b'---\nname: s\ndescription: d\n---\n# S\n\n1. Say "hello" once.\n'}
    swap = swap_for("s", old, new)
    routed = json.dumps({"revision": revision_of(old), "skill_body": '# S\n\n1. Say "hi" twice.'})
    text, hit = swap.apply(routed)
    assert hit and json.loads(text) == {
        "revision": revision_of(new),
        "skill_body": '# S\n\n1. Say "hello" once.',
    }
    assert swap.apply("nothing of the skill here") == ("nothing of the skill here", False)
    same = swap_for("s", old, old)
    assert same.apply(routed) == (routed, True)  # unchanged bytes are still a placement


def test_a_harness_that_loads_the_skill_through_route_and_load_gets_the_candidate_there(
    tmp_path, library_factory
):
    with regress_world(tmp_path, library_factory) as w:
        revision = revision_of(w.files())
        w.tools["route_and_load"] = lambda _: json.dumps(
            {"match": "fx-quote", "revision": revision, "skill_body": FX_BODY.strip(), "novel": False}
        )
        system = "You are quote-bot. Call `route_and_load` first and follow the skill it returns."
        w.bless(w.record(system=system), ['keeps "no fees"'])
        before = len(w.server.chat_requests())
        llm = w.server.client("agent", "judge")
        result = replay_cell(
            "fx-quote", w.files(), edited(w.files(), NO_FEES, ""), w.control.runs_dir / "goldens", llm, TIERS
        )
        (golden,) = result["goldens"]
        assert golden["placements"] == ["step 1 (route_and_load) result"]
        assert result["verdict"] == "BLOCK" and golden["cited"]["quote"].startswith('Mention "no fees"')
        routed = [
            json.loads(m["content"])
            for r in w.server.chat_requests()[before:]
            for m in r.body["messages"]
            if m["role"] == "tool" and "skill_body" in m["content"]
        ]
        candidate = revision_of(edited(w.files(), NO_FEES, ""))
        as_candidate = [r for r in routed if r["revision"] == candidate]
        as_champion = [r for r in routed if r["revision"] == revision]  # the controls
        assert as_candidate and all("no fees" not in r["skill_body"] for r in as_candidate)
        assert as_champion and all("no fees" in r["skill_body"] for r in as_champion)
        assert len(as_candidate) + len(as_champion) == len(routed)


def test_a_sandbox_tool_runs_the_candidates_script_in_bubblewrap(tmp_path, library_factory):
    require_bwrap()
    with regress_world(tmp_path, library_factory) as w:
        script = w.root / "fx-quote" / "scripts" / "fee.py"
        script.parent.mkdir()
        script.write_text("print('fee: 1.50')\n")
        skill = w.root / "fx-quote" / "SKILL.md"
        skill.write_text(
            skill.read_text().replace(
                "4. Send", "4. Compute the fee with `execute`: `python3 scripts/fee.py`.\n5. Send"
            )
        )
        w.tools["execute"] = lambda args: "fee: 1.50\n"  # the harness ran it on its own machine
        w.bless(w.record(), ['keeps "fee: 1.50"'])
        llm = w.server.client("agent", "judge")
        candidate = edited(w.files(), "print('fee: 1.50')", "print('fee: 9.99')", path="scripts/fee.py")
        result = replay_cell(
            "fx-quote", w.files(), candidate, w.control.runs_dir / "goldens", llm, TIERS, BubblewrapSandbox()
        )
        (golden,) = result["goldens"]
        assert {s["name"]: s["source"] for s in golden["steps"]}["execute"] == "sandbox"
        assert "fee: 9.99" in golden["answer"] and result["verdict"] == "BLOCK"
        assert (
            result["noise_floor"]["failed"] == 0
        )  # the champion's script, run the same way, still says 1.50


def test_without_a_sandbox_a_sandbox_tool_is_unavailable_and_the_replay_partial(tmp_path, library_factory):
    with regress_world(tmp_path, library_factory) as w:
        skill = w.root / "fx-quote" / "SKILL.md"
        skill.write_text(
            skill.read_text().replace(
                "4. Send", "4. Compute the fee with `execute`: `python3 fee.py`.\n5. Send"
            )
        )
        w.tools["execute"] = lambda args: "fee: 1.50\n"
        w.bless(w.record(), ['keeps "no fees"'])
        golden = w.admin.store.active("fx-quote")[0][0]
        run = Replayer(w.server.client("agent"), World()).run(golden.golden, w.files(), w.files())
        assert run.partial and [s.source for s in run.steps if s.name == "execute"] == ["unavailable"]
        assert "no sandbox is configured" in next(s.result for s in run.steps if s.name == "execute")


def test_a_reference_agent_golden_replays_through_its_serving_path_with_the_candidates_files(
    tmp_path, library_factory
):
    root = tmp_path / "skills"
    write_skill(
        root,
        "vat-lookup",
        "Looks up Freedonia VAT rates by province. Use when asked for a VAT rate in Freedonia.",
        "# VAT\n\n1. Read `references/rates.md` with `read_file`.\n"
        "2. Answer with the rate for the province.\n",
        files={"references/rates.md": "| province | rate |\n|---|---|\n| Sylvania | 17.5% |\n"},
    )
    library = library_factory(root)
    control = ChangeControl(tmp_path / "home", (root,), neighbours=library.current)
    store = LocalTraceStore(control.runs_dir / "traces.jsonl")
    files = {
        p.relative_to(root / "vat-lookup").as_posix(): p.read_bytes()
        for p in (root / "vat-lookup").rglob("*")
        if p.is_file()
    }
    with scripted_llm() as server, running_mcp(library, control=control) as url:
        install(server)
        ReferenceAgent(url, server.client("agent", "strong"), store, allow_mutation=False).run(
            "What is the VAT rate in Sylvania, Freedonia?"
        )
        admin = GoldenAdmin(control)
        stored, _ = admin.bless(store.read().records[-1], "tester")
        admin.approve(stored.id, "tester", ['keeps "17.5%"'], [])
        assert stored.golden.harness == "ingot-agent" and [s.name for s in stored.golden.steps] == [
            "read_file"
        ]
        candidate = {**files, "references/rates.md": b"| province | rate |\n|---|---|\n| Sylvania | 15% |\n"}
        result = replay_cell(
            "vat-lookup",
            files,
            candidate,
            control.runs_dir / "goldens",
            server.client("agent", "judge"),
            TIERS,
        )
    (golden,) = result["goldens"]
    assert golden["placements"] == ["system prompt", "/skill/ files (reference agent workspace)"]
    assert "15%" in golden["answer"] and [s["source"] for s in golden["steps"]] == ["workspace"]
    assert result["verdict"] == "BLOCK" and golden["evidence"] == "L2+L3"
    assert result["noise_floor"]["failed"] == 0
