"""The replay cell end to end: a golden recorded from another harness through the capture proxy,
replayed with candidates against the scripted models (tests/regress_sim.py), judged cheapest
first, with controls, drift, costs and the verdict."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from optimize.measure.cascade import JudgeTiers
from optimize.measure.drift import World, WorldEndpoint
from optimize.measure.level0 import SIDE_EFFECT_TOOLS
from optimize.measure.regress import ReplaySettings, replay_cell
from optimize.models.ledger import Price, UsageLedger
from tests.loopback import QuietHandler, serving
from tests.regress_sim import RATE, agent, edited, regress_world

TIERS = JudgeTiers("judge-l1", "judge-l2", "judge-l3")
PRICES = {
    "agent-model": Price(0.5, 1.5),
    "judge-l1": Price(0.1, 0.4),
    "judge-l2": Price(1.0, 4.0),
    "judge-l3": Price(5.0, 15.0),
}
SETTINGS = ReplaySettings(side_effects=SIDE_EFFECT_TOOLS | {"send_quote"})
CRITERIA = ['keeps "State the amount in both currencies"', 'keeps "no fees"']
FACT = {"step": 1, "label": "EUR/USD rate", "value": "1.0842"}


@pytest.fixture
def world(tmp_path, library_factory):
    with regress_world(tmp_path, library_factory) as w:
        w.bless(w.record(), CRITERIA, [FACT])
        yield w


def cell(
    w, candidate, *, tiers=TIERS, settings=SETTINGS, ledger=None, world=None, champion="live", **kw
) -> dict:
    llm = w.server.client("agent", "judge", ledger=ledger or UsageLedger("test", PRICES))
    return replay_cell(
        "fx-quote",
        w.files() if champion == "live" else champion,
        candidate,
        w.control.runs_dir / "goldens",
        llm,
        tiers,
        settings=settings,
        world=world,
        cache_dir=w.control.runs_dir / "cache" / "replay",
        **kw,
    )


def only(result: dict) -> dict:
    assert result["status"] == "measured", result
    (golden,) = result["goldens"]
    return golden


def test_a_golden_from_a_proxy_captured_run_of_another_harness_replays_unchanged_at_L0(world):
    result = cell(world, world.files())
    golden = only(result)
    assert golden["harness"] == "quote-bot"  # recorded by the capture proxy, not the reference agent
    assert result["verdict"] == "PASS" and golden["tier"] == "L0"
    assert "system prompt" in golden["placements"]
    sources = {s["name"]: s["source"] for s in golden["steps"]}
    assert sources == {"get_rate": "recorded", "send_quote": "recorded"}
    assert RATE in golden["answer"]


def test_a_formatting_edit_passes_at_L0_and_a_rewording_at_L1(world):
    bold = cell(world, edited(world.files(), "Look up the rate", "**Look up** the rate"))
    assert bold["verdict"] == "PASS" and only(bold)["tier"] == "L0"
    assert only(bold)["decisions"] == [
        {**only(bold)["decisions"][0], "tier": "L0", "model": None, "verdict": "pass"}
    ]
    reworded = cell(world, edited(world.files(), "rounded to cents", "to the cent"))
    golden = only(reworded)
    assert reworded["verdict"] == "PASS" and golden["tier"] == "L1"
    assert [d["tier"] for d in golden["decisions"]] == ["L1"]


def test_an_edit_that_drops_a_required_step_is_blocked_with_the_cited_step(world):
    dropped = edited(world.files(), '3. Mention "no fees" for transfers under 1000 EUR.\n', "")
    result = cell(world, dropped)
    golden = only(result)
    assert result["verdict"] == "BLOCK"
    assert golden["evidence"] == "L2+L3" and golden["tier"] == "L3"
    assert golden["cited"]["run"] == "golden" and "no fees" in golden["cited"]["quote"]
    # L0 found the golden's passage (its 1000 EUR, its negation) missing: no cheap screen may pass it.
    assert [(d["tier"], d["verdict"]) for d in golden["decisions"]] == [
        ("L0", "fail"),
        ("L2", "regressed"),
        ("L3", "regressed"),
    ]
    assert (
        "'1000'" in golden["decisions"][0]["rationale"] and "no fees" in golden["decisions"][0]["rationale"]
    )
    assert "no fees" in result["reasons"][0] and result["rationale"]
    assert result["rationale_by"]["tier"] == "L3"


def test_a_lost_commitment_no_criterion_names_is_blocked_by_L2_and_L3_never_by_L0_alone(world):
    threshold = edited(world.files(), "under 1000 EUR", "under 10 EUR")  # every criterion phrase kept
    result = cell(world, threshold)
    golden = only(result)
    assert result["verdict"] == "BLOCK" and golden["evidence"] == "L2+L3"
    assert "1000" in golden["cited"]["quote"]
    alone = cell(world, threshold, tiers=JudgeTiers())
    assert alone["verdict"] == "WARN" and only(alone)["verdict_found"] == "contested"
    assert only(alone)["note"].startswith("commitments of the golden are missing and no judge tier")


def test_judges_that_fail_to_answer_are_named_as_failing_never_as_not_configured(world):
    """A judge endpoint answering 500 is not "no judge tier": the contested note says which
    tiers failed and how, so a person re-evaluates instead of configuring judges they have."""
    for model in ("judge-l1", "judge-l2", "judge-l3"):
        rule = world.server.add(model=model, error_status=500, error_times=10_000, reply="unused")
        world.server.rules.insert(0, world.server.rules.pop())  # ahead of the scripted judges
        assert rule.error_status == 500
    threshold = edited(world.files(), "under 1000 EUR", "under 10 EUR")
    result = cell(world, threshold)
    golden = only(result)
    assert result["verdict"] == "WARN" and golden["verdict_found"] == "contested"
    assert "every judge tier failed to answer" in golden["note"], golden["note"]
    assert "no judge tier is configured" not in golden["note"]
    assert "L2 failed" in golden["note"] and "re-evaluate" in golden["note"]


def test_dropping_a_side_effect_is_L0_evidence_and_blocks_without_a_model(world):
    result = cell(world, edited(world.files(), "4. Send the quote with `send_quote`.\n", ""))
    golden = only(result)
    assert result["verdict"] == "BLOCK" and golden["evidence"] == "L0"
    assert golden["cited"] == {
        "run": "golden",
        "step": 2,
        "quote": 'send_quote({"for": "Quote 250 EUR in USD for Dana"})',
    }
    assert all(d["model"] is None for d in golden["decisions"])
    assert result["cost"]["judging"] == {}  # no judge was called
    assert golden["tool_calls"] == {
        "same": False,
        "missing": ['step 2: send_quote({"for": "Quote 250 EUR in USD for Dana"})'],
        "extra": [],
    }


def test_a_block_needs_L2_and_L3_agreeing_a_missing_tier_is_skipped_and_recorded(world):
    dropped = edited(world.files(), '3. Mention "no fees" for transfers under 1000 EUR.\n', "")
    result = cell(world, dropped, tiers=JudgeTiers("judge-l1", "judge-l2", None))
    golden = only(result)
    assert result["verdict"] == "WARN" and golden["verdict_found"] == "contested"
    assert golden["decisions"][-1] == {
        **golden["decisions"][-1],
        "tier": "L3",
        "verdict": "skipped",
        "model": None,
    }
    assert "L3 is skipped: no model (JUDGE_L3_MODEL)" in result["warnings"]
    assert result["tiers"] == {"L1": "judge-l1", "L2": "judge-l2", "L3": None}


def test_an_L2_citation_that_does_not_quote_the_run_is_not_one(world):
    def forged(body):
        return json.dumps(
            {
                "verdict": "regressed",
                "failed": ["c2"],
                "cited_step": {"run": "golden", "step": "answer", "quote": "words nobody wrote"},
                "rationale": "r",
            }
        )

    world.server.rules.insert(0, world.server.rules[0].__class__(model="judge-l2", compute=forged))
    result = cell(world, edited(world.files(), '3. Mention "no fees" for transfers under 1000 EUR.\n', ""))
    golden = only(result)
    assert result["verdict"] == "WARN" and golden["cited"] is None
    assert (
        golden["decisions"][1]["verdict"] == "unsure"
        and "does not quote the run" in golden["decisions"][1]["rationale"]
    )


@contextmanager
def noisy_model(w, drop: str, every: tuple[int, ...]) -> Iterator[None]:
    """The serving model changes behaviour: the final answers numbered in `every` lose `drop`."""
    answers = {"n": 0}

    def flaky(body: dict[str, Any]) -> Any:
        reply = agent(body)
        if isinstance(reply, str):
            answers["n"] += 1
            if answers["n"] in every:
                reply = "\n".join(line for line in reply.splitlines() if drop not in line)
        return reply

    rule = w.server.rules[0].__class__(
        model="agent-model", compute=flaky, prompt_tokens=None, completion_tokens=None
    )
    w.server.rules.insert(0, rule)
    yield
    w.server.rules.remove(rule)


def test_a_difference_the_controls_also_show_does_not_block_but_a_new_one_does(world):
    serial = ReplaySettings(concurrency=1, side_effects=SETTINGS.side_effects)  # candidate, then controls
    with noisy_model(world, "no fees", every=(1, 3)):
        result = cell(world, edited(world.files(), "rounded to cents", "to the cent"), settings=serial)
    golden = only(result)
    assert golden["verdict_found"] == "regressed"  # the judges saw the lost line...
    assert result["verdict"] == "PASS"  # ...but the unchanged champion loses it too
    assert "the unchanged champion shows the same difference in 1 of 2 controls" in golden["why"]
    assert result["noise_floor"]["pass_rate"] == 0.5 and result["noise_floor"]["failed"] == 1

    dropped = edited(world.files(), "2. State the amount in both currencies, rounded to cents.\n", "")
    with noisy_model(world, "no fees", every=(1, 3)):
        blamed = cell(world, dropped, settings=serial)
    assert blamed["verdict"] == "BLOCK"  # c1 is lost only by the candidate
    assert {"c1", "c2"} <= set(only(blamed)["signature"]) and only(blamed)["controls_from_cache"] is True


def test_the_same_answer_as_the_unchanged_champion_passes_at_L0(world):
    serial = ReplaySettings(concurrency=1, side_effects=SETTINGS.side_effects)
    with noisy_model(world, "no fees", every=(1, 3)):  # candidate and the second control lose a line
        result = cell(
            world, edited(world.files(), "Look up the rate", "**Look up** the rate"), settings=serial
        )
    golden = only(result)
    assert result["verdict"] == "PASS" and golden["tier"] == "L0"
    assert golden["note"] == "the same answer as the unchanged champion gives now"


def test_costs_per_tier_add_up_to_the_ledgers(world):
    ledger = UsageLedger("costs", PRICES)
    result = cell(
        world,
        edited(world.files(), '3. Mention "no fees" for transfers under 1000 EUR.\n', ""),
        ledger=ledger,
    )
    totals, cost = ledger.totals(), result["cost"]
    assert cost["usd"] == pytest.approx(totals["total"]["usd"], abs=1e-6)  # the ledger reports 6 decimals
    assert (
        cost["tokens_in"] == totals["total"]["tokens_in"]
        and cost["tokens_out"] == totals["total"]["tokens_out"]
    )
    serving = cost["serving"]["usd"] + cost["controls_serving"]["usd"]
    assert serving == pytest.approx(
        totals["by_role"]["agent"]["usd"], abs=1e-6
    )  # the ledger reports 6 decimals
    judging = sum(t["usd"] for t in cost["judging"].values())
    assert judging == pytest.approx(
        totals["by_role"]["judge"]["usd"], abs=1e-6
    )  # the ledger reports 6 decimals
    assert set(cost["judging"]) == {"L2", "L3", "rationale"}  # L0 found commitments missing: no L1
    counter = result["counterfactual"]
    assert (
        counter["strongest_model"] == "judge-l3" and counter["replays_judged"] == 3
    )  # candidate + 2 controls
    assert counter["all_strongest_usd"] > 0 and counter["judging_usd"] == pytest.approx(
        judging, abs=1e-6
    )  # the ledger reports 6 decimals


def test_without_prices_costs_are_unknown_never_zero(world):
    result = cell(
        world,
        edited(world.files(), '3. Mention "no fees" for transfers under 1000 EUR.\n', ""),
        ledger=UsageLedger("no-prices"),
    )
    cost = result["cost"]
    assert cost["usd"] is None and cost["serving"]["usd"] is None and cost["serving"]["calls"] == 3
    assert all(tier["usd"] is None for tier in cost["judging"].values())
    assert (
        result["counterfactual"]["all_strongest_usd"] is None
        and "no price for judge-l3" in result["counterfactual"]["why"]
    )
    assert only(result)["usd"] is None


def test_controls_are_cached_by_champion_revision(world):
    cell(world, world.files())
    before = len(world.server.chat_requests())
    result = cell(world, edited(world.files(), "Look up the rate", "**Look up** the rate"))
    sent = world.server.chat_requests()[before:]
    assert only(result)["controls_from_cache"] is True and result["noise_floor"]["from_cache"]
    assert all("**Look up**" in json.dumps(r.body) for r in sent)  # no champion-side call at all
    assert result["cost"]["controls_serving"]["calls"] == 0


def test_the_live_revision_alone_has_no_noise_floor(world):
    result = cell(world, world.files(), champion=None)
    assert result["verdict"] == "PASS" and result["noise_floor"]["status"] == "not_measured"
    assert only(result)["controls"] == []


def test_no_goldens_is_not_measured_and_says_how_to_bless(world, tmp_path):
    llm = world.server.client("agent", "judge")
    result = replay_cell("fx-quote", world.files(), world.files(), tmp_path / "none", llm, TIERS)
    assert result == {
        "status": "not_measured",
        "why": "no blessed goldens for fx-quote: bless a good run with `ingot bless TRACE_ID`",
    }


def test_a_replay_that_reaches_its_bound_is_a_warning_not_a_pass(world):
    from optimize.measure.replay import ReplayLimits

    bounded = ReplaySettings(limits=ReplayLimits(max_turns=1), side_effects=SETTINGS.side_effects)
    result = cell(world, world.files(), settings=bounded)
    golden = only(result)
    assert result["verdict"] == "WARN" and "limit of 1 model calls" in golden["why"]


def test_an_unmatched_tool_call_is_world_contact_answered_unavailable_and_the_replay_is_partial(world):
    world.tools["get_fees"] = lambda _: "fees: 0"
    world.bless(world.record(task="Quote 90 EUR in USD"), CRITERIA, [FACT])  # offers get_fees, never calls it
    candidate = edited(world.files(), "4. Send", "4. Check fees with `get_fees`.\n5. Send")
    result = cell(world, candidate)
    partial = [g for g in result["goldens"] if g["partial"]]
    assert partial and {s["source"] for s in partial[0]["steps"]} >= {"unavailable"}
    assert partial[0]["verdict"] != "BLOCK"


# -- world drift ---------------------------------------------------------------------------------


@contextmanager
def world_server(answers: list[str]) -> Iterator[str]:
    """A live `get_rate` for replays: answers in order, the last one repeated."""

    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length", 0)))
            value = answers.pop(0) if len(answers) > 1 else answers[0]
            data = json.dumps({"result": value}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with serving(Handler) as url:
        yield url


def test_a_drifted_value_with_corroboration_passes_as_world_moved(world):
    with world_server(["EUR/USD 1.0910 (ECB fixing)"]) as url:
        live = World([WorldEndpoint(url, frozenset({"get_rate"}))])
        result = cell(world, edited(world.files(), "rounded to cents", "to the cent"), world=live)
    golden = only(result)
    assert result["verdict"] == "PASS" and golden["ruling"] == "world moved"
    (card,) = result["drift"]
    assert (card["old"], card["new"], card["ruling"]) == ("1.0842", "1.0910", "world moved")
    assert card["corroboration"] == "a second call agrees" and card["source"].startswith("world endpoint")
    assert "1.0910" in golden["answer"]  # the replay got the new value and was judged against it


def test_a_drifted_value_without_corroboration_warns(world):
    with world_server(["EUR/USD 1.0910 (ECB fixing)", "EUR/USD 1.0877 (ECB fixing)"]) as url:
        live = World([WorldEndpoint(url, frozenset({"get_rate"}))])
        result = cell(world, world.files(), world=live)
    (card,) = result["drift"]
    assert card["ruling"] == "unconfirmed" and card["corroboration"] == "a second call says 1.0877"
    assert result["verdict"] == "WARN" and "without corroboration" in only(result)["why"]
