"""Coverage of a change: which altered instructions a blessed run exercised, model-free where a
replay shows it or the run never saw the file, a model's ruling where it must be; a change no
blessed run exercises is a WARN that names it, never a silent PASS."""

from __future__ import annotations

import hashlib
import json
import re
from types import SimpleNamespace

import pytest

from optimize.control.passport import UNEXERCISED
from optimize.measure.cascade import JudgeTiers
from optimize.measure.coverage import alone, changed_instructions
from optimize.measure.level0 import SIDE_EFFECT_TOOLS
from optimize.measure.regress import ReplaySettings, replay_cell
from tests.optimize.conftest import ready_body
from tests.regress_sim import FX_BODY, FX_DESCRIPTION, edited, regress_world
from tests.scripted_llm import Rule

TIERS = JudgeTiers("judge-l1", "judge-l2", "judge-l3")
SETTINGS = ReplaySettings(side_effects=SIDE_EFFECT_TOOLS | {"send_quote"})
PROSE = "\nQuotes stay valid for 24 hours; say so only when asked.\n"
APPROVAL = "4. If the amount is over 10000 EUR, ask a manager to approve the quote.\n"


def skill(body: str, description: str = FX_DESCRIPTION) -> bytes:
    return f"---\nname: fx-quote\ndescription: {description}\n---\n{body}".encode()


def kinds(old: str, new: str, **files: bytes) -> list[tuple[str, str, str]]:
    found = changed_instructions("fx-quote", {"SKILL.md": skill(old)}, {"SKILL.md": skill(new), **files})
    return [(i.kind, i.old, i.new) for i in found]


def test_formatting_numbering_case_and_the_description_alter_no_instruction():
    assert kinds(FX_BODY, FX_BODY.replace("1. Look up", "1) **Look  up**").replace("# FX", "## fx")) == []
    description = changed_instructions(
        "fx-quote", {"SKILL.md": skill(FX_BODY)}, {"SKILL.md": skill(FX_BODY, "Quotes FX. Use for FX.")}
    )
    assert description == []


def test_changed_added_removed_and_moved_instructions_are_told_apart():
    assert kinds(FX_BODY, FX_BODY.replace("rounded to cents", "to the cent")) == [
        (
            "changed",
            "2. State the amount in both currencies, rounded to cents.",
            "2. State the amount in both currencies, to the cent.",
        )
    ]
    assert kinds(FX_BODY, FX_BODY + PROSE) == [("added", "", PROSE.strip())]
    third = '3. Mention "no fees" for transfers under 1000 EUR.'
    assert kinds(FX_BODY, FX_BODY.replace(third + "\n", "")) == [("removed", third, "")]
    moved = FX_BODY.replace(third + "\n", "").replace("1. Look", third + "\n1. Look")
    assert [k for k, _, _ in kinds(FX_BODY, moved)] == ["moved"]
    other = changed_instructions(
        "fx-quote",
        {"SKILL.md": skill(FX_BODY), "references/fees.md": b"| amount | fee |\n| 1000 | 0.5% |\n"},
        {"SKILL.md": skill(FX_BODY), "references/fees.md": b"| amount | fee |\n| 1000 | 1% |\n"},
    )
    assert [(i.path, i.label) for i in other] == [
        ("references/fees.md", "references/fees.md: '| 1000 | 0.5% |' -> '| 1000 | 1% |'")
    ]


@pytest.fixture
def world(tmp_path, library_factory):
    with regress_world(tmp_path, library_factory) as w:
        w.bless(w.record(), ['keeps "no fees"'])
        yield w


def cell(w, candidate, tiers=TIERS) -> dict:
    return replay_cell(
        "fx-quote",
        w.files(),
        candidate,
        w.control.runs_dir / "goldens",
        w.server.client("agent", "judge"),
        tiers,
        settings=SETTINGS,
    )


def coverage_asked(w) -> int:
    return sum("ALTERED INSTRUCTIONS:" in r.body["messages"][-1]["content"] for r in w.server.chat_requests())


def digests(w, model: str | None = None, asked: str = "") -> set[str]:
    """sha256 of each prompt the scripted server was sent (by `model`, or containing `asked`)."""
    prompts = [r.body["messages"][-1]["content"] for r in w.server.chat_requests()]
    models = [r.body.get("model") for r in w.server.chat_requests()]
    return {
        hashlib.sha256(p.encode()).hexdigest()
        for p, m in zip(prompts, models, strict=True)
        if (model is None or m == model) and asked in p
    }


def test_an_instruction_a_replay_shows_is_exercised_without_asking_a_model(world):
    result = cell(world, edited(world.files(), "rounded to cents", "rounded to whole units"))
    (entry,) = result["coverage"]["instructions"]
    assert entry["status"] == "exercised" and entry["shown_by"] == [result["goldens"][0]["id"]]
    assert entry["model"] is None and coverage_asked(world) == 0
    assert result["verdict"] == "BLOCK"  # the unit no criterion names is a lost commitment
    # The BLOCK rests on L2 and L3 agreeing: both are named in the cell with the prompt each read.
    golden = result["goldens"][0]["id"]
    named = {(r["decides"], r["tier"], r["model"], r["ruling"]) for r in result["decided_by"]}
    assert named == {
        (f"golden {golden}", "L2", "judge-l2", "regressed"),
        (f"golden {golden}", "L3", "judge-l3", "regressed"),
    }
    for ruling in result["decided_by"]:
        assert ruling["prompt_digest"] in digests(world, ruling["model"])


def rule_everything_wording(body: dict) -> str:
    """A coverage model that rules every altered instruction wording only."""
    ids = re.findall(r"^- (i\d+) \(", body["messages"][-1]["content"], re.M)
    return json.dumps(
        {"instructions": [{"id": i, "behaviour": "unchanged", "rationale": "same gist"} for i in ids]}
    )


def test_a_wording_ruling_is_overruled_when_the_model_free_comparison_finds_another_action_and_recipient(
    world,
):
    """The issue's case: "page the on-call engineer" -> "post in the ops channel" in a step no
    blessed run exercises, and a coverage model that calls it wording. The cell WARNs naming the
    instruction and what differs; a true rewording of the same step still passes on the model's
    ruling, which the cell names with the digest of the prompt it read."""
    step = "4. If the rate is stale, page the on-call engineer.\n"
    (world.root / "fx-quote" / "SKILL.md").write_bytes(skill(FX_BODY.replace("4. Send", step + "5. Send")))
    world.bless(world.record(), ['keeps "no fees"'])
    world.server.rules.insert(0, Rule(user_contains="ALTERED INSTRUCTIONS:", compute=rule_everything_wording))
    result = cell(world, edited(world.files(), "page the on-call engineer", "post in the ops channel"))
    (entry,) = result["coverage"]["instructions"]
    what = "actions, objects or recipients: page, on-call, engineer -> post, ops, channel"
    assert entry["model"]["behaviour"] == "unchanged" and coverage_asked(world) == 1  # the model said wording
    assert (entry["status"], entry["differences"]) == ("not exercised", [what])
    assert entry["why"].endswith("L3 (judge-l3) ruled it wording only, which decides nothing here")
    assert result["goldens"][0]["verdict"] == "PASS" and result["verdict"] == "WARN"
    assert result["reasons"] == [f"not exercised by any blessed run: {entry['label']} (it changes {what})"]
    assert not [r for r in result["decided_by"] if r["decides"].startswith("instruction")]

    reworded = cell(world, edited(world.files(), "page the on-call engineer", "page the engineer on call"))
    (entry,) = reworded["coverage"]["instructions"]
    assert (entry["status"], entry["differences"], reworded["verdict"]) == ("wording", [], "PASS")
    (ruling,) = reworded["decided_by"]
    assert ruling | {"prompt_digest": None} == {
        "decides": "instruction i1",
        "tier": "L3",
        "model": "judge-l3",
        "ruling": "wording only",
        "prompt_digest": None,
    }
    assert ruling["prompt_digest"] in digests(world, asked="ALTERED INSTRUCTIONS:")
    assert (
        ruling["prompt_digest"]
        == entry["model"]["prompt_digest"]
        == reworded["coverage"]["decision"]["prompt_digest"]
    )


def test_a_replay_that_differs_alone_shows_its_only_instruction_only_when_the_controls_reproduce_the_golden():
    def run(answer: str, *calls: str) -> SimpleNamespace:
        return SimpleNamespace(answer=answer, steps=[SimpleNamespace(name=c, arguments={}) for c in calls])

    golden = run("250 EUR is 271.05 USD.", "get_rate")
    steady = [run("250 EUR is 271.05 USD.", "get_rate")] * 2
    assert alone(golden, run("250 EUR is 271.05 USD, fee-free.", "get_rate"), steady)
    assert alone(golden, run("250 EUR is 271.05 USD.", "get_rate", "send_quote"), steady)  # another call
    assert not alone(golden, run("250 EUR is 271.05 USD.", "get_rate"), steady)  # it reproduces the golden
    noisy = [steady[0], run("About 271 USD.", "get_rate")]
    assert not alone(
        golden, run("250 EUR is 271.05 USD, fee-free.", "get_rate"), noisy
    )  # noise, not the change
    assert not alone(golden, run("250 EUR is 271.05 USD, fee-free.", "get_rate"), [])  # no control: unknown


def test_a_change_no_blessed_run_reaches_warns_not_exercised_and_the_passport_says_how_to_close_it(world):
    candidate = edited(world.files(), "4. Send", APPROVAL.replace("4.", "5.") + "4. Send")
    result = cell(world, candidate)
    (entry,) = result["coverage"]["instructions"]
    assert (entry["status"], entry["shown_by"], entry["model"]["behaviour"]) == (
        "not exercised",
        [],
        "changed",
    )
    assert entry["model"]["tier"] == "L3" and coverage_asked(world) == 1
    assert result["verdict"] == "WARN" and result["goldens"][0]["verdict"] == "PASS"
    assert result["reasons"] == [
        f"not exercised by any blessed run: added {APPROVAL.replace('4.', '5.').strip()!r}"
    ]
    assert "coverage" in result["cost"]["judging"]
    change, _ = world.control.propose("fx-quote", "optimizer", candidate, {**ready_body(), "replay": result})
    verdict = world.control.passport(change)
    replay = verdict.cell("replay")
    assert verdict.state == "needs-acknowledgement" and not verdict.ready  # autonomy never takes it
    assert replay.state == "missing" and replay.why.startswith("not exercised by any blessed run: added")
    assert (
        replay.measure == UNEXERCISED and "ingot bless" in UNEXERCISED and "--accept-missing" in UNEXERCISED
    )


def test_a_reworded_instruction_no_replay_shows_is_ruled_wording_and_passes(world, tmp_path):
    files = world.files()
    prose = {**files, "SKILL.md": files["SKILL.md"] + PROSE.encode()}
    (world.root / "fx-quote" / "SKILL.md").write_bytes(prose["SKILL.md"])
    world.bless(world.record(), ['keeps "no fees"'])
    reworded = edited(world.files(), "Quotes stay valid", "Quotes remain valid")
    result = cell(world, reworded)
    (entry,) = result["coverage"]["instructions"]
    assert entry["status"] == "wording" and entry["model"]["behaviour"] == "unchanged"
    assert result["verdict"] == "PASS"
    shortened = cell(world, edited(world.files(), "valid for 24 hours", "valid for 1 hour"))
    assert shortened["verdict"] == "WARN" and "not exercised by any blessed run" in shortened["reasons"][0]


def test_a_file_no_run_read_is_not_exercised_without_asking_a_model(world):
    candidate = {
        **world.files(),
        "references/fees.md": b"| amount | fee |\n|---|---|\n| 1000 EUR and over | 1% |\n",
    }
    result = cell(world, candidate)
    assert {e["status"] for e in result["coverage"]["instructions"]} == {"not exercised"}
    assert all(e["served_to"] == [] for e in result["coverage"]["instructions"])
    assert result["coverage"]["decision"] is None and coverage_asked(world) == 0
    assert result["verdict"] == "WARN"


def test_without_a_judge_tier_an_undecided_instruction_is_not_exercised_never_a_pass(world):
    result = cell(world, edited(world.files(), "4. Send", APPROVAL + "5. Send"), tiers=JudgeTiers())
    (entry,) = result["coverage"]["instructions"]
    assert entry["status"] == "not exercised" and "more than wording (model-free" in entry["why"]
    assert result["coverage"]["decision"]["skipped"].startswith("no judge tier is configured")
    assert result["verdict"] == "WARN"


def test_the_live_revision_replayed_alone_has_no_change_to_cover(world):
    result = replay_cell(
        "fx-quote",
        None,
        world.files(),
        world.control.runs_dir / "goldens",
        world.server.client("agent", "judge"),
        TIERS,
    )
    assert result["coverage"]["status"] == "not_applicable" and result["verdict"] == "PASS"
