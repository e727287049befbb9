"""Held-out A/B through the agent's serving path and the judge, with the champion cache."""

from __future__ import annotations

import json

import pytest

from ingot.seal import Seal
from optimize.control.changes import ChangeControl
from optimize.measure.ab import ABRefused, ABRunner, Arm, first_divergence
from optimize.measure.judge import Judge
from optimize.measure.sandbox import BubblewrapSandbox
from optimize.measure.taskset import parse_task_set
from tests.conftest import write_skill
from tests.scripted_llm import Rule, pairwise_json, scripted_llm
from tests.scripted_llm import grade_json as grade

CHAMPION = "# Notes\n\nOld guidance: write whatever.\nKeep it short.\n"
CHALLENGER = "# Notes\n\nNew guidance: group by theme.\nKeep it short.\n"
HOLDOUT = ["Notes for 1.0", "Notes for 1.1", "Notes for 1.2", "Notes for 1.3"]


@pytest.fixture
def setup(tmp_path):
    with scripted_llm() as server:
        server.add(system_contains="Old guidance", reply="weak answer\nline two")
        server.add(system_contains="New guidance", reply="strong answer\nline two")
        server.script_pairwise("strong answer")
        server.add(user_contains="strong answer", model="judge-model", reply=grade(0.9, True))
        server.add(user_contains="weak answer", model="judge-model", reply=grade(0.2, False))
        llm = server.client("agent", "judge")
        runner = ABRunner(llm, Judge(llm, ("judge-model",), "teacher-model"), tmp_path / "cache")
        tasks = parse_task_set("notes", {"train": ["t1"], "holdout": HOLDOUT})
        yield server, runner, tasks, tmp_path


def champion_calls(server) -> int:
    """Every call made for the champion's side alone (its body says "Old guidance")."""
    return server.champion_side_calls("Old guidance")


def test_a_better_challenger_shows_per_case_gains_and_passes_its_cell(setup):
    server, runner, tasks, tmp_path = setup
    runs = tmp_path / "runs"  # the champion cache lives in the state home, sealed with its key
    runner = ABRunner(runner.llm, runner.judge, runs / "cache" / "ab", seal=Seal(runs / "seal.key"))
    ab = runner.run(Arm("notes", "c" * 64, CHAMPION), Arm("notes", "d" * 64, CHALLENGER), tasks)
    assert (
        ab["samples"] == 4
        and ab["champion_mean"] == pytest.approx(0.2)
        and ab["challenger_mean"] == pytest.approx(0.9)
    )
    assert ab["pairwise"]["wins"] == 4 and {c["pairwise"] for c in ab["cases"]} == {"win"}
    assert (
        ab["cases"][0]["challenger_dimensions"]["correctness"] == 0.9
        and ab["cases"][0]["challenger_rationales"]
    )
    assert ab["cases"][0]["divergence"] == {
        "line": 1,
        "champion": "weak answer",
        "challenger": "strong answer",
    }
    assert ab["cases"][0]["champion_tokens"] > 0 and ab["retention"] == pytest.approx(2 / 3, abs=1e-3)
    root = tmp_path / "skills"
    write_skill(root, "notes", "Writes notes.", CHAMPION)
    control = ChangeControl(tmp_path / "runs", (root,))
    files = {
        "SKILL.md": (root / "notes" / "SKILL.md")
        .read_text()
        .replace("Old guidance: write whatever.", "New guidance: group by theme.")
        .encode()
    }
    change, _ = control.propose("notes", "optimizer", files, {"ab": ab})
    assert control.passport(change).cell("held-out A/B").state == "pass"
    control.approve("notes", "reviewer", change.id, accept_missing="only the A/B is under test here")


def test_a_repeat_run_makes_no_champion_side_calls(setup):
    server, runner, tasks, _ = setup
    champion, challenger = Arm("notes", "c" * 64, CHAMPION), Arm("notes", "d" * 64, CHALLENGER)
    first = runner.run(champion, challenger, tasks)
    before = champion_calls(server)
    second = runner.run(champion, challenger, tasks)
    assert (
        champion_calls(server) == before
        and second["champion_from_cache"]
        and not first["champion_from_cache"]
    )
    changed = parse_task_set(
        "notes", {"train": ["t1"], "holdout": ["Notes for 2.0", "Notes for 2.1", "x", "y"]}
    )
    runner.run(champion, challenger, changed)  # a new holdout invalidates the cache
    assert champion_calls(server) > before


def test_a_leaky_task_set_is_measured_as_leakage(setup):
    _, runner, _, _ = setup
    ab = runner.run(
        Arm("notes", "c" * 64, CHAMPION),
        Arm("notes", "d" * 64, CHALLENGER),
        parse_task_set("notes", ["only", "a", "flat list"]),
    )
    assert ab["leakage"] is True and ab["samples"] == 0


def test_first_divergence():
    assert first_divergence("a\nb", "a\nb") is None
    assert first_divergence("a\nb", "a\nc")["line"] == 2
    assert first_divergence("a", "a\nextra")["line"] == 2


def test_an_execution_check_overrules_the_judge(tmp_path):
    from optimize.measure.execcheck import BubblewrapSandbox
    from tests.optimize.conftest import require_bwrap

    require_bwrap()
    with scripted_llm() as server:
        server.add(system_contains="Old guidance", reply="```python\ndef add(a, b):\n    return a + b\n```")
        server.add(system_contains="New guidance", reply="```python\ndef add(a, b):\n    return a - b\n```")
        server.add(model="judge-model", user_contains="FIRST ANSWER", reply=pairwise_json("tie"))
        server.add(model="judge-model", reply=grade(0.9, True))  # the judge likes both
        llm = server.client("agent", "judge")
        runner = ABRunner(
            llm,
            Judge(llm, ("judge-model",), "teacher-model"),
            tmp_path / "cache",
            sandbox=BubblewrapSandbox(),
        )
        tasks = parse_task_set(
            "math",
            {
                "train": ["t"],
                "holdout": [
                    {
                        "prompt": f"Write add(a, b), variant {n}",
                        "check": {"assert": "from answer import add\nassert add(2, 3) == 5\n"},
                    }
                    for n in (1, 2, 3)
                ],
            },
        )
        ab = runner.run(Arm("math", "c" * 64, CHAMPION), Arm("math", "d" * 64, CHALLENGER), tasks)
    case = ab["cases"][0]
    assert case["champion_check"]["status"] == "passed" and case["challenger_check"]["status"] == "failed"
    assert case["champion_pass"] is True and case["challenger_pass"] is False  # a catastrophic regression


def test_each_arms_serving_cost_comes_from_the_price_table_or_stays_unknown(setup):
    from optimize.models.ledger import Price, UsageLedger

    server, runner, tasks, _ = setup
    ab = runner.run(Arm("notes", "c" * 64, CHAMPION), Arm("notes", "d" * 64, CHALLENGER), tasks)
    assert ab["champion_usd"] is None and ab["cases"][0]["challenger_usd"] is None  # no prices
    runner.llm.ledger = UsageLedger("run", {"agent-model": Price(1.0, 2.0)})
    ab = runner.run(Arm("notes", "e" * 64, CHAMPION), Arm("notes", "f" * 64, CHALLENGER), tasks)
    per_answer = (11 * 1.0 + 7 * 2.0) / 1e6  # the scripted server reports 11 in / 7 out
    assert ab["cases"][0]["challenger_usd"] == pytest.approx(per_answer)
    assert ab["champion_usd"] == pytest.approx(4 * per_answer) == ab["challenger_usd"]


def test_each_arm_is_served_with_its_own_files_through_the_agent(tmp_path):
    def files(body: str, reference: str) -> dict[str, bytes]:
        front = "---\nname: notes\ndescription: Writes notes from a guide.\n---\n"
        return {"SKILL.md": (front + body).encode(), "references/guide.md": reference.encode()}

    old, new = (
        files("# Notes\n\nFollow references/guide.md.\n", "OLD-REF"),
        files("# Notes\n\nFollow references/guide.md closely.\n", "NEW-REF"),
    )
    with scripted_llm() as server:
        server.add(tool_result_contains="NEW-REF", reply="strong answer")
        server.add(tool_result_contains="OLD-REF", reply="weak answer")
        server.add(
            system_contains="/skill/references/guide.md",
            model="agent-model",
            tool_calls=[{"name": "read_file", "arguments": {"file_path": "/skill/references/guide.md"}}],
        )
        server.script_pairwise("strong answer")
        server.add(user_contains="strong answer", model="judge-model", reply=grade(0.9, True))
        server.add(user_contains="weak answer", model="judge-model", reply=grade(0.2, False))
        llm = server.client("agent", "judge")
        runner = ABRunner(llm, Judge(llm, ("judge-model",), "teacher-model"), tmp_path / "cache")
        tasks = parse_task_set("notes", {"train": ["t1"], "holdout": ["Notes 1", "Notes 2", "Notes 3"]})
        ab = runner.run(
            Arm("notes", "c" * 64, "# Notes\n\nFollow references/guide.md.\n", old),
            Arm("notes", "d" * 64, "# Notes\n\nFollow references/guide.md closely.\n", new),
            tasks,
        )
        served = [r.body for r in server.chat_requests() if r.body["model"] == "agent-model"]
    assert ab["champion_mean"] == pytest.approx(0.2) and ab["challenger_mean"] == pytest.approx(0.9)
    assert len(served) == 12  # 2 arms x 3 tasks x (read_file call + answer)
    assert {tuple(t["function"]["name"] for t in b["tools"]) for b in served} == {("read_file",)}


def test_copies_of_one_task_count_once_and_too_few_are_refused_before_any_call(setup, embedder):
    server, runner, _, _ = setup
    runner.embed = embedder.embed
    copies = parse_task_set(
        "notes", {"train": ["t1"], "holdout": ["Notes for 1.0", "notes  for 1.0", "NOTES FOR 1.0."]}
    )
    assert runner.sampling(copies).distinct == 1
    with pytest.raises(ABRefused, match=r"1 distinct item\(s\) \(3 listed\)"):
        runner.run(Arm("notes", "c" * 64, CHAMPION), Arm("notes", "d" * 64, CHALLENGER), copies)
    assert server.chat_requests() == []


def test_a_holdout_task_that_near_copies_a_train_task_is_leakage(setup, embedder):
    server, runner, _, _ = setup
    runner.embed = embedder.embed
    leaky = parse_task_set(
        "notes",
        {
            "train": ["Write release notes for v2.0 from the merged PRs"],
            "holdout": [
                "Write release notes for v2.0 from the merged PRs.",
                "Notes for 1.1",
                "Notes for 1.2",
            ],
        },
    )
    ab = runner.run(Arm("notes", "c" * 64, CHAMPION), Arm("notes", "d" * 64, CHALLENGER), leaky)
    assert ab["leakage"] is True and "near-copies train" in ab["why"][0] and server.chat_requests() == []
    distinct = parse_task_set(
        "notes",
        {"train": ["Write release notes for v2.0"], "holdout": ["Write release notes for v2.1", "a", "b"]},
    )
    assert runner.sampling(distinct).leaks == ()  # another version number is another task


def test_a_tampered_or_truncated_cache_entry_is_recomputed_never_trusted(setup, tmp_path):
    server, runner, tasks, _ = setup
    runner.cache.seal = Seal(tmp_path / "seal.key")
    champion, challenger = Arm("notes", "c" * 64, CHAMPION), Arm("notes", "d" * 64, CHALLENGER)
    first = runner.run(champion, challenger, tasks)
    entry = runner.cache.folder / first["champion_cache"]["file"]
    edited = json.loads(entry.read_text())
    for result in edited["results"]:
        result["score"] = 0.0  # a worse champion makes any challenger look better
    entry.write_text(json.dumps(edited))
    before = champion_calls(server)
    second = runner.run(champion, challenger, tasks)
    assert not second["champion_from_cache"] and second["champion_mean"] == pytest.approx(0.2)
    assert champion_calls(server) > before  # recomputed, not trusted
    entry.write_bytes(entry.read_bytes()[:40])  # a crash mid-write
    third = runner.run(champion, challenger, tasks)
    assert not third["champion_from_cache"] and third["champion_mean"] == pytest.approx(0.2)


def test_the_cache_key_covers_everything_that_conditions_an_answer(setup):
    _, runner, tasks, _ = setup
    champion = Arm("notes", "c" * 64, CHAMPION)
    base = runner.conditions(champion, tasks.holdout, tasks.holdout_hash)
    wanted = {
        "agent_model",
        "agent_base_url",
        "sandbox",
        "serving_prompts",
        "judge_prompts",
        "judges",
        "holdout",
    }
    assert wanted <= set(base)
    other_sandbox = ABRunner(runner.llm, runner.judge, runner.cache.folder, sandbox=BubblewrapSandbox())
    assert runner.cache.path(base) != other_sandbox.cache.path(
        other_sandbox.conditions(champion, tasks.holdout, tasks.holdout_hash)
    )


def test_a_new_skill_is_measured_against_no_skill_at_all(setup):
    server, runner, tasks, _ = setup
    server.rules.insert(0, Rule(system_contains="No stored skill fits", reply="weak answer"))
    ab = runner.run(Arm("notes", None, None), Arm("notes", "d" * 64, CHALLENGER), tasks)
    assert ab["champion_mean"] == pytest.approx(0.2) and ab["challenger_mean"] == pytest.approx(0.9)
    assert ab["conditions"]["champion"] == "no-skill"


PER_ANSWER = (11 * 1.0 + 7 * 2.0) / 1e6  # the scripted server reports 11 in / 7 out; $1 in, $2 out


def test_a_cached_champion_is_priced_at_todays_prices_without_rewriting_its_entry(setup, tmp_path):
    from optimize.models.ledger import Price, UsageLedger

    server, runner, tasks, _ = setup
    runner.cache.seal = Seal(tmp_path / "seal.key")
    champion, challenger = Arm("notes", "c" * 64, CHAMPION), Arm("notes", "d" * 64, CHALLENGER)
    runner.llm.ledger = UsageLedger("unpriced", {})
    first = runner.run(champion, challenger, tasks)
    assert first["champion_usd"] is None and first["cost_basis"]["price"] is None
    entry = runner.cache.folder / first["champion_cache"]["file"]
    sealed, before = entry.read_bytes(), champion_calls(server)
    runner.llm.ledger = UsageLedger("priced", {"agent-model": Price(1.0, 2.0)})
    second = runner.run(champion, challenger, tasks)
    assert second["champion_from_cache"] and champion_calls(server) == before  # no champion-side call
    assert second["champion_usd"] == pytest.approx(4 * PER_ANSWER) == second["challenger_usd"]
    case = second["cases"][0]
    assert (case["champion_tokens_in"], case["champion_tokens_out"], case["champion_tokens"]) == (11, 7, 18)
    assert case["champion_usd"] == pytest.approx(PER_ANSWER)
    assert second["cost_basis"] == {
        "serving_model": "agent-model",
        "price": {"input_per_million": 1.0, "output_per_million": 2.0},
        "champion": "recomputed from cached token counts",
        "challenger": "measured now",
    }
    assert entry.read_bytes() == sealed and second["champion_cache"] == {
        **first["champion_cache"],
        "from_cache": True,
    }
    assert (
        runner.cache.still_valid(entry.name, second["champion_cache"]["digest"]) is None
    )  # approval's check
    runner.llm.ledger = UsageLedger("unpriced-again", {})  # a price removed: unknown, not yesterday's number
    assert runner.run(champion, challenger, tasks)["champion_usd"] is None


def test_a_cached_champion_without_token_counts_is_remeasured_only_when_it_can_be_priced(setup, tmp_path):
    from optimize.models.ledger import Price, UsageLedger

    server, runner, tasks, _ = setup
    champion, challenger = Arm("notes", "c" * 64, CHAMPION), Arm("notes", "d" * 64, CHALLENGER)
    first = runner.run(champion, challenger, tasks)
    conditions = first["conditions"]
    old = [
        {k: v for k, v in r.items() if k not in ("tokens_in", "tokens_out")}
        for r in runner.cache.get(conditions).results
    ]
    runner.cache.put(conditions, old)  # as an Ingot before the split token counts wrote it
    entry = runner.cache.folder / first["champion_cache"]["file"]
    sealed, before = entry.read_bytes(), champion_calls(server)
    kept = runner.run(champion, challenger, tasks)  # no prices: its cost is unknown either way
    assert kept["champion_from_cache"] and champion_calls(server) == before and entry.read_bytes() == sealed
    assert kept["champion_usd"] is None and kept["cases"][0]["champion_tokens_in"] is None
    assert kept["cost_basis"]["champion"] == "cached without its token counts: cost unknown"
    runner.llm.ledger = UsageLedger("priced", {"agent-model": Price(1.0, 2.0)})
    remeasured = runner.run(champion, challenger, tasks)
    assert not remeasured["champion_from_cache"] and champion_calls(server) > before
    assert remeasured["champion_usd"] == pytest.approx(4 * PER_ANSWER)
    assert remeasured["cost_basis"]["champion"] == "measured now"
